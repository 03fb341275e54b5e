# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Share of response tokens a trimmed drafter can draft at all: its kept vocabulary's coverage.

A trimmed head drafts only its K kept tokens, so at a position whose target token lies outside them it cannot
agree with the target, however well trained: the coverage caps its per-token agreement. Measured on the
assistant turns of regenerated conversations (`slimspec prepare-data` output), split into those a subset file
lists (e.g. the training subset) and the rest:

    python experiments/vocab_coverage/vocab_coverage.py outputs/v1-trimmed data/smollm2-135m-instruct/balanced_4k \
        --subset data/smollm2-135m-instruct/subsets/embedded_drafter_v1.jsonl
"""

import argparse
import json
from pathlib import Path

from transformers import AutoModelForCausalLM

import slimspec_hf  # noqa: F401  (registers the drafter with the Auto classes)
from slimspec_hf.targets import load_target
from slimspec_hf.training.data import load_training_dataset


def kept_token_ids(drafter_dir: Path) -> set[int]:
    drafter = AutoModelForCausalLM.from_pretrained(drafter_dir)
    if drafter.config.head_type != "trimmed":
        raise SystemExit(
            f"`drafter` ({drafter_dir}) has a {drafter.config.head_type!r} head: pass a drafter trained with "
            "`--head_type trimmed`."
        )
    return set(drafter.lm_head.token_ids.tolist())


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("drafter", type=Path, help="trimmed drafter folder")
    parser.add_argument("data", type=Path, help="`slimspec prepare-data` output folder")
    parser.add_argument("--subset", type=Path, help="jsonl whose ids form the first group (e.g. the training subset)")
    parser.add_argument("--target", default="embedded", help="target whose tokenizer to use")
    args = parser.parse_args(argv)

    kept = kept_token_ids(args.drafter)
    _, tokenizer = load_target(args.target)
    subset = {json.loads(line)["id"] for line in args.subset.open()} if args.subset else set()
    counts = {"subset": [0, 0], "rest": [0, 0]}  # group -> [tokens, covered]
    for row in load_training_dataset(args.data):
        text = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
        ids = [t for turn in text for t in tokenizer(turn, add_special_tokens=False)["input_ids"]]
        group = counts["subset" if row["id"] in subset else "rest"]
        group[0] += len(ids)
        group[1] += sum(t in kept for t in ids)
    print(f"K = {len(kept)} kept tokens")
    for name, (total, covered) in counts.items():
        if total:
            print(f"{name}: {covered / total:.4f} of {total} response tokens covered")


if __name__ == "__main__":
    main()
