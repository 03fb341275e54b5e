# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""VocabTrim applied to a trained drafter, without training: the same backbone, its head multiplied out (a low-rank
head's W_up·W_down, or a full head as it is) and cut to the K tokens met most often in the responses of a training
set, a token map back to the full vocabulary. The trimmed baseline of the head comparison at equal training: the
only difference from the drafter it comes from is the head.

    python experiments/gemma_heads/trim_head.py drafters/gemma-3-270m-slimspec --data data/gemma-3-270m/balanced_4k \
        --keep 32768 --out outputs/gemma-3-270m-trimmed

Prints how many distinct tokens the data's answers hold and the share of their tokens the kept ones cover (the
ceiling on a trimmed head's acceptance there).
"""

import argparse
import sys
from pathlib import Path

import torch

from slimspec_hf.modeling_slimspec import LowRankHead, SlimSpecDrafterForCausalLM
from slimspec_hf.targets import load_target
from slimspec_hf.training.data import load_training_dataset, prepare_dataset
from slimspec_hf.training.head_init import most_frequent_tokens, response_token_counts


@torch.no_grad()
def trimmed_copy(drafter, token_ids: torch.Tensor):
    """A new drafter with `drafter`'s backbone and a trimmed head over `token_ids`, rows from its dense head."""
    head = drafter.lm_head
    dense = head.merged_weight() if isinstance(head, LowRankHead) else head.weight.float()  # (V, d)
    config = drafter.config.to_dict()
    for key in ("model_type", "transformers_version", "architectures", "auto_map"):
        config.pop(key, None)
    config.update(head_type="trimmed", head_rank=None, draft_vocab_size=int(token_ids.numel()))
    trimmed = SlimSpecDrafterForCausalLM(type(drafter.config)(**config)).to(next(head.parameters()).dtype)
    own = {k: v for k, v in drafter.state_dict().items() if not k.startswith("lm_head.")}
    missing, unexpected = trimmed.load_state_dict(own, strict=False)
    if unexpected or any(not k.startswith("lm_head.") for k in missing):
        raise ValueError(f"backbone mismatch: missing {missing}, unexpected {unexpected}")
    trimmed.lm_head.set_token_ids(token_ids, dense_weight=dense)
    trimmed.generation_config = drafter.generation_config
    return trimmed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("drafter", help="a SlimSpec drafter folder (low-rank or full head)")
    parser.add_argument("--data", required=True, help="prepare-data folder whose response tokens are counted")
    parser.add_argument("--keep", type=int, default=32768, help="tokens kept (default 32768)")
    parser.add_argument("--out", required=True, help="folder of the trimmed drafter")
    args = parser.parse_args(argv)
    drafter = SlimSpecDrafterForCausalLM.from_pretrained(args.drafter)
    if not 0 < args.keep < drafter.config.vocab_size:
        parser.error(f"--keep must lie in (0, {drafter.config.vocab_size}), got {args.keep}")
    _, tokenizer = load_target(drafter.config.target_model_name_or_path or None)
    dataset = prepare_dataset(load_training_dataset(args.data), tokenizer, max_length=None)
    counts = response_token_counts(dataset, drafter.config.vocab_size)
    kept = most_frequent_tokens(counts, args.keep)
    covered = int(counts[kept].sum()) / int(counts.sum())
    trimmed_copy(drafter, kept).save_pretrained(args.out)
    print(
        f"{Path(args.out)}: {args.keep} of {drafter.config.vocab_size} tokens kept; the answers in {args.data} hold "
        f"{int((counts > 0).sum())} distinct tokens, {int(counts.sum())} in all, {covered:.4f} of them kept"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
