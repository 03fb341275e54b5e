"""Copies a trained drafter into an embedded target's drafter folder: `drafters/smollm2-135m-instruct-slimspec/`
(the default) or, with `--target gemma-3-270m`, `drafters/gemma-3-270m-slimspec/`.

    python scripts/ship_embedded_drafter.py TRAINED_DIR [--target NAME] [--results bench-results/results.json#NAME]
        [--num-assistant-tokens K] [--confidence-threshold P] [--draft-lookup | --no-draft-lookup]
        [--draft-tree-size N] [--draft-tree-depth D] [--draft-tree-top-k K] [--draft-shape auto|fixed]
        [--draft-sampling JSON] [--draft-batched JSON] [--dest DIR]

Weights are stored in bfloat16 (`load_embedded_drafter()` loads them in the target's dtype, "auto" by default);
the borrowed embedding is not saved. The decoding defaults go into the drafter's generation_config.json. The model card keeps the trainer's recipe and
adds the benchmark results when given. A continual run's folder (`continual_state.json`) ships with its state, so
that the run can go on from the shipped drafter (`make train-gemma` on a new machine). The folder is written next to
DEST and renamed into place, so an interrupted run never leaves a half-shipped drafter.
"""

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trained_dir", help="output_dir (or checkpoint, or continual run folder) of `slimspec train`")
    parser.add_argument(
        "--target", default=None, help="embedded target whose drafter folder to write (default SmolLM2)"
    )
    parser.add_argument("--results", default=None, help="`slimspec bench` results.json#NAME for the card")
    parser.add_argument("--num-assistant-tokens", type=int, default=None, help="tokens drafted per round (k)")
    parser.add_argument("--confidence-threshold", type=float, default=None, help="assistant_confidence_threshold")
    parser.add_argument("--draft-lookup", action=argparse.BooleanOptionalAction, default=None, help="hybrid lookup")
    parser.add_argument("--draft-tree-size", type=int, default=None, help="> 0: draft a tree of this many nodes")
    parser.add_argument("--draft-tree-depth", type=int, default=None, help="the tree's depth (levels)")
    parser.add_argument("--draft-tree-top-k", type=int, default=None, help="children per expanded node")
    parser.add_argument("--draft-shape", choices=("auto", "fixed"), default=None, help="draft_shape")
    parser.add_argument(
        "--draft-sampling",
        default=None,
        help='settings that apply when sampling, as JSON, e.g. \'{"draft_tree_size": 0, "num_assistant_tokens": 1}\'',
    )
    parser.add_argument(
        "--draft-batched",
        default=None,
        help='settings that apply to more than one prompt, as JSON, e.g. \'{"draft_tree_size": 0, "draft_lookup": false}\'',
    )
    parser.add_argument("--dataset", action="append", default=None, help="training dataset named in the card")
    parser.add_argument("--dest", default=None, help="default: the embedded drafter folder")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from slimspec_hf import DraftSettings
    from slimspec_hf.interop.model_card import CARD_INPUTS_FILE, read_results, write_model_card
    from slimspec_hf.targets import embedded_target
    from slimspec_hf.training.continual import STATE_FILE

    source = Path(args.trained_dir)
    dest = Path(args.dest) if args.dest else embedded_target(args.target).drafter_dir
    if not (source / "model.safetensors").is_file():
        print(f"ship: {source} holds no model.safetensors; pass a `slimspec train` output folder.", file=sys.stderr)
        return 2
    variants = {}
    for name, given in (("draft_sampling", args.draft_sampling), ("draft_batched", args.draft_batched)):
        if given is not None:
            try:
                variants[name] = json.loads(given)
            except json.JSONDecodeError:
                variants[name] = given  # DraftSettings names the parameter and the value below
    drafter = AutoModelForCausalLM.from_pretrained(source, dtype=torch.bfloat16)
    settings = {
        "num_assistant_tokens": args.num_assistant_tokens,
        "assistant_confidence_threshold": args.confidence_threshold,
        "draft_lookup": args.draft_lookup,
        "draft_tree_size": args.draft_tree_size,
        "draft_tree_depth": args.draft_tree_depth,
        "draft_tree_top_k": args.draft_tree_top_k,
        "draft_shape": args.draft_shape,
        **variants,
    }
    for name, value in settings.items():
        if value is not None:
            setattr(drafter.generation_config, name, value)
    DraftSettings.resolve(drafter.generation_config)  # validates, before anything is written

    stored = source / CARD_INPUTS_FILE
    stored = json.loads(stored.read_text()) if stored.is_file() else {}
    results = read_results(args.results)  # fails here, before anything is replaced, on a bad --results

    dest.parent.mkdir(parents=True, exist_ok=True)
    # staged under its final name (the card is titled after its folder), then swapped into place
    parent = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    staging = parent / dest.name
    old = dest.with_name(f".{dest.name}-old")
    try:
        drafter.save_pretrained(staging)
        if (source / STATE_FILE).is_file():  # a continual run's state: the run goes on from the shipped folder
            shutil.copy(source / STATE_FILE, staging / STATE_FILE)
        datasets = args.dataset or stored.get("datasets")
        write_model_card(staging, recipe=stored.get("recipe"), results=results, datasets=datasets)
        shutil.rmtree(old, ignore_errors=True)  # left by an interrupted earlier run
        if dest.exists():
            dest.rename(old)
        try:
            staging.rename(dest)
        except OSError:
            if old.exists():
                old.rename(dest)
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    size = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    print(f"shipped {source} -> {dest} ({size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
