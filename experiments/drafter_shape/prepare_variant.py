# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""A continual run folder reshaped for the drafter-shape comparison, its function kept where the shape allows.

    python experiments/drafter_shape/prepare_variant.py SRC OUT [--rank R] [--layer-ids 2,15,30]

`--rank R` (R > the folder's rank) widens the low-rank head: the new columns of `up` are zero, so the drafter's
output is unchanged at the start; the new rows of `down` are the leading right singular vectors of the residual
between the target's LM head and the folder's head (scaled like the existing rows), so their gradient points somewhere
useful. `--layer-ids` swaps which target layers feed `fc`; each block of `fc` keeps its weights (a changed layer's
block then reads a different layer, the start is no longer the source's function). The folder's
`continual_state.json` is copied, so each variant continues the same data order from the same place.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def widen_head(tensors: dict, rank: int, target_head: torch.Tensor) -> dict:
    up, down = tensors["lm_head.up.weight"].float(), tensors["lm_head.down.weight"].float()
    old = down.shape[0]
    if rank <= old:
        sys.exit(f"--rank: received {rank}, the folder's head already has rank {old}; give a larger rank.")
    residual = target_head.float() - up @ down  # (V, d)
    _, _, vh = torch.linalg.svd(residual, full_matrices=False)
    scale = down.norm(dim=1).mean()
    new_down = vh[: rank - old] * scale  # unit rows scaled like the trained ones
    dtype = tensors["lm_head.up.weight"].dtype
    tensors["lm_head.up.weight"] = torch.cat([up, up.new_zeros(up.shape[0], rank - old)], dim=1).to(dtype)
    tensors["lm_head.down.weight"] = torch.cat([down, new_down], dim=0).to(dtype)
    return tensors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src")
    parser.add_argument("out")
    parser.add_argument("--rank", type=int)
    parser.add_argument("--layer-ids", help="comma-separated indices into the target's hidden_states")
    args = parser.parse_args()
    src, out = Path(args.src), Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    config = json.loads((out / "config.json").read_text())
    tensors = load_file(out / "model.safetensors")
    if args.rank:
        from slimspec_hf.targets import load_target

        target, _ = load_target("embedded", dtype=torch.float32)
        tensors = widen_head(tensors, args.rank, target.get_output_embeddings().weight.detach())
        config["head_rank"] = args.rank
    if args.layer_ids:
        config["target_layer_ids"] = [int(i) for i in args.layer_ids.split(",")]
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"{out}: rank {config['head_rank']}, target_layer_ids {config['target_layer_ids']}")


if __name__ == "__main__":
    main()
