"""Write the prompts of one file that another leaves out, in a seeded order: the Gemma drafter's next data.

The drafter's first data are the target's answers to `prompts_balanced_4k.jsonl`, a subset of `prompts_mix.jsonl`.
Its next data answer the rest of the mix (math, code, role-play and chat), shuffled so that any first N prompts
cover every category in proportion; `slimspec prepare-data --max-prompts N` then answers the first N, and a later
call with a larger N carries on where the last one stopped:

    python recipes/gemma-3-270m/data/mix_rest.py --prompts ../shared/data/train/prompts_mix.jsonl \
        --without ../shared/data/train/prompts_balanced_4k.jsonl --seed 0 --out data/gemma-3-270m/prompts_mix_rest.jsonl

The rows are written unchanged (the same ids and turns).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from slimspec_hf.utils import atomic_write


def _read(path: str, parameter: str) -> list[dict] | None:
    if not Path(path).is_file():
        print(
            f"{parameter}: {path} is not a file; pass a prompts .jsonl (one object with `id` per line).",
            file=sys.stderr,
        )
        return None
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    if any("id" not in row for row in rows):
        print(
            f"{parameter}: {path} has rows without an `id`; pass a prompts .jsonl with one per row.", file=sys.stderr
        )
        return None
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", required=True, help="the prompts to choose from (.jsonl with `id`)")
    parser.add_argument("--without", required=True, help="prompts already answered (.jsonl with `id`), left out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="the .jsonl to write")
    args = parser.parse_args(argv)
    prompts, answered = _read(args.prompts, "--prompts"), _read(args.without, "--without")
    if prompts is None or answered is None:
        return 2
    done = {row["id"] for row in answered}
    rest = [row for row in prompts if row["id"] not in done]
    random.Random(args.seed).shuffle(rest)
    atomic_write(args.out, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rest))
    print(f"{len(rest)} of {len(prompts)} prompts (without {len(prompts) - len(rest)} answered) → {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
