"""Copies a trained SmolLM2 drafter into `drafters/smollm2-135m-instruct-slimspec/`, the embedded default.

    python scripts/ship_embedded_drafter.py TRAINED_DIR [--results bench-results/results.json#NAME]
        [--confidence-threshold P] [--dest DIR]

Weights are stored in bfloat16 (`load_embedded_drafter()` casts them back to float32, the fast dtype on a CPU
without bf16 instructions); the borrowed embedding is not saved. The model card keeps the trainer's recipe and
adds the benchmark results when given. The folder is written next to DEST and renamed into place, so an
interrupted run never leaves a half-shipped drafter.
"""

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trained_dir", help="output_dir (or checkpoint) of `slimspec train`")
    parser.add_argument("--results", default=None, help="`slimspec bench` results.json#NAME for the card")
    parser.add_argument("--confidence-threshold", type=float, default=None, help="draft_confidence_threshold")
    parser.add_argument("--dataset", action="append", default=None, help="training dataset named in the card")
    parser.add_argument("--dest", default=None, help="default: the embedded drafter folder")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from slimspec_hf.hub import CARD_INPUTS_FILE, write_model_card
    from slimspec_hf.targets import EMBEDDED_DRAFTER_DIR

    source = Path(args.trained_dir)
    dest = Path(args.dest) if args.dest else EMBEDDED_DRAFTER_DIR
    if not (source / "model.safetensors").is_file():
        print(f"ship: {source} holds no model.safetensors; pass a `slimspec train` output folder.", file=sys.stderr)
        return 2
    drafter = AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
    if args.confidence_threshold is not None:
        drafter.config.draft_confidence_threshold = args.confidence_threshold
        drafter.config._validate()

    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    staging.chmod(0o755)
    try:
        drafter.save_pretrained(staging)
        old = dest.with_name(f".{dest.name}-old")
        if dest.exists():
            dest.rename(old)
        staging.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    # the card is titled after its folder, so it is written in place (atomically, file by file)
    stored = source / CARD_INPUTS_FILE
    recipe = json.loads(stored.read_text())["recipe"] if stored.is_file() else None
    write_model_card(dest, recipe=recipe, results=args.results, datasets=args.dataset)
    size = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    print(f"shipped {source} -> {dest} ({size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
