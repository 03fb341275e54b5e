"""Write a seeded replay subset of a prepare-data folder: every row of some sources, N rows of the others.

A training stage aimed at one domain replays the rest of the data at a lower rate so that it is not forgotten. The
chat stage of the shipped drafter (v6) keeps all of mix_16k's chat-source answers and 2,000 of its GSM8K / code answers:

    python recipes/smollm2-135m-instruct/data/replay_subset.py --data data/smollm2-135m-instruct/mix_16k --others 2000 --seed 0 \
        --out data/smollm2-135m-instruct/subsets/mix_16k_chat_replay2k.jsonl

The rows are written unchanged (the same ids), sorted by id; the evaluation set's ids are left out by the trainer.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from slimspec_hf.utils import atomic_write


sys.path.insert(0, str(Path(__file__).resolve().parent))
from chat_prompts import CHAT_SOURCES  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a prepare-data folder (with data/*.jsonl)")
    parser.add_argument("--keep-sources", nargs="+", default=list(CHAT_SOURCES), help="sources kept whole")
    parser.add_argument("--others", type=int, required=True, help="how many rows of the other sources to keep")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="the .jsonl to write")
    args = parser.parse_args(argv)
    shards = sorted((Path(args.data) / "data").glob("*.jsonl"))
    if not shards:
        print(f"--data: {args.data} holds no data/*.jsonl shards; pass a prepare-data folder.", file=sys.stderr)
        return 2
    if args.others < 0:
        print(f"--others: got {args.others}; pass a count ≥ 0.", file=sys.stderr)
        return 2
    rows = [json.loads(line) for shard in shards for line in open(shard, encoding="utf-8") if line.strip()]
    rows.sort(key=lambda row: row["id"])
    kept = [row for row in rows if row.get("source") in args.keep_sources]
    others = [row for row in rows if row.get("source") not in args.keep_sources]
    if args.others > len(others):
        print(
            f"--others: got {args.others}, but {args.data} has {len(others)} rows of other sources.", file=sys.stderr
        )
        return 2
    chosen = kept + random.Random(args.seed).sample(others, args.others)
    chosen.sort(key=lambda row: row["id"])
    atomic_write(args.out, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in chosen))
    print(f"{len(kept)} rows of {', '.join(args.keep_sources)} + {args.others} others → {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
