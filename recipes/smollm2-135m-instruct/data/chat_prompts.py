"""Write the chat-domain prompts of the training mix with a per-seed id suffix, for sampled regeneration.

The mix's chat sources (OpenAssistant, Arena-Hard, UltraChat, self-instruct, GPTeacher role-play) are the prompts
closest to MT-Bench. Their greedy answers are in `mix_16k`; answers *sampled* from the target (several seeds) add
new chat contexts for the same prompts. Each seed's prompts get the id suffix `@s<seed>` so that the folders can be
combined with `mix_16k` in one comma-separated `dataset_path` (ids must be unique there).

    python recipes/smollm2-135m-instruct/data/chat_prompts.py --seed 1 --out /tmp/chat_prompts_s1.jsonl
    OMP_NUM_THREADS=1 slimspec prepare-data --engine vllm --target embedded --prompts /tmp/chat_prompts_s1.jsonl \
        --out data/smollm2-135m-instruct/chat_t07_s1 --temperature 0.7 --seed 1 \
        --max-new-tokens 384 --max-prompt-length 512 --threads 1 --dtype bfloat16

`--skip-answered FOLDER` leaves out the prompts already answered there (under any seed) and `--part I/N` keeps every
N-th of the rest, so that two seeds can answer different halves (how the chat stage of the shipped drafter got its data).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from slimspec_hf.training.data import completed_ids
from slimspec_hf.utils import atomic_write


CHAT_SOURCES = (
    "oasst",
    "arena_hard_v0.1",
    "ultrachat_ultra_eval",
    "self_instruct_user_oriented",
    "gpteacher_roleplay",
)
REPO = Path(__file__).resolve().parents[3]
DEFAULT_PROMPTS = REPO.parent / "shared" / "data" / "train" / "prompts_mix.jsonl"
DEFAULT_HELD_OUT = REPO / "data" / "smollm2-135m-instruct" / "heldout_mix96"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", default=str(DEFAULT_PROMPTS), help="the training mix (JSONL with `source`)")
    parser.add_argument("--seed", type=int, required=True, help="the sampling seed the answers will use")
    parser.add_argument("--out", required=True, help="where to write the JSONL")
    parser.add_argument("--held-out", default=str(DEFAULT_HELD_OUT), help="prepare-data folder whose ids are left out")
    parser.add_argument(
        "--skip-answered", default=None, help="prepare-data folder whose prompts (any seed) are left out"
    )
    parser.add_argument("--part", default=None, help="I/N: keep every N-th remaining prompt, starting at the I-th")
    args = parser.parse_args(argv)
    if not Path(args.prompts).is_file():
        print(f"--prompts: {args.prompts} is not a file; pass the training mix (prompts_mix.jsonl).", file=sys.stderr)
        return 2
    if not (Path(args.held_out) / "data").is_dir():
        print(
            f"--held-out: {args.held_out} is not a prepare-data folder (no data/); pass the evaluation set's.",
            file=sys.stderr,
        )
        return 2
    skip = completed_ids(args.held_out)
    answered = set()
    if args.skip_answered is not None:
        if not (Path(args.skip_answered) / "data").is_dir():
            print(f"--skip-answered: {args.skip_answered} is not a prepare-data folder (no data/).", file=sys.stderr)
            return 2
        answered = {key.rsplit("@s", 1)[0] for key in completed_ids(args.skip_answered)}
    part, parts = 1, 1
    if args.part is not None:
        try:
            part, parts = (int(x) for x in args.part.split("/"))
            assert 1 <= part <= parts
        except (ValueError, AssertionError):
            print(f"--part: got {args.part!r}; pass I/N with 1 ≤ I ≤ N, e.g. 1/2.", file=sys.stderr)
            return 2
    kept = []
    with open(args.prompts, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                if row.get("source") in CHAT_SOURCES and row["id"] not in skip and row["id"] not in answered:
                    kept.append({**row, "id": f"{row['id']}@s{args.seed}"})
    kept = kept[part - 1 :: parts]
    atomic_write(args.out, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in kept))
    print(f"{len(kept)} chat prompts ({len(skip)} held-out ids left out) → {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
