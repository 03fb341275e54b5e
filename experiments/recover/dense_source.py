# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The dense-head SmolLM2 drafter that `slimspec convert --recover` is measured against: the shipped drafter's
backbone with a dense V×d head, initialised from the target's LM head (as EAGLE-3 trainers initialise theirs) and then
trained head-only (`config_dense_source.yaml`, backbone frozen). Writes the untrained folder:

    python experiments/recover/dense_source.py --out outputs/recover/dense-init
    OMP_NUM_THREADS=1 slimspec train --config experiments/recover/config_dense_source.yaml --max_train_seconds 2400
"""

import argparse

import torch

from slimspec_hf import SlimSpecDrafterConfig, SlimSpecDrafterForCausalLM
from slimspec_hf.targets import load_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafter", default="drafters/smollm2-135m-instruct-slimspec")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    shipped = SlimSpecDrafterForCausalLM.from_pretrained(args.drafter, dtype=torch.float32)
    config = SlimSpecDrafterConfig(**{**shipped.config.to_dict(), "head_type": "full", "head_rank": None})
    dense = SlimSpecDrafterForCausalLM(config).float()
    backbone = {k: v for k, v in shipped.state_dict().items() if not k.startswith("lm_head.")}
    missing = dense.load_state_dict(backbone, strict=False).missing_keys
    assert missing == ["lm_head.weight"], missing
    target, _ = load_target("embedded", dtype=torch.float32, tokenizer_required=False)
    with torch.no_grad():
        dense.lm_head.weight.copy_(target.get_output_embeddings().weight)
    dense.generation_config = shipped.generation_config
    dense.save_pretrained(args.out)
    print(f"dense-head drafter (head = the target's LM head, backbone = {args.drafter}): {args.out}")


if __name__ == "__main__":
    main()
