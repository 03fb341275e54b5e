"""Write one part of `prompts_extra_25k.jsonl` (a source group, every N-th prompt) for regeneration by the target.

The extra prompts widen the chat mix (≈ 9,900 chat and instruction prompts: UltraFeedback, HelpSteer2, hh-rlhf
helpful, OASST2, Capybara, Dolly, awesome-chatgpt-prompts, self-instruct seeds, exercism) and add tool-style tasks
and MATH. The file is already shuffled, so every N-th prompt of a group is a fair sample of it. Half the chat group is
answered greedily, the other half sampled (T 0.7), each half in its own prepare-data folder:

    python recipes/smollm2-135m-instruct/data/extra_prompts.py --group chat --part 1/2 --out /tmp/extra_chat_1.jsonl
    OMP_NUM_THREADS=1 slimspec prepare-data --engine vllm --target embedded --prompts /tmp/extra_chat_1.jsonl \
        --out data/smollm2-135m-instruct/extra_chat_greedy --max-new-tokens 384 --max-prompt-length 512 \
        --threads 1 --dtype bfloat16 --max-seconds 7200
    python recipes/smollm2-135m-instruct/data/extra_prompts.py --group chat --part 2/2 --out /tmp/extra_chat_2.jsonl
    OMP_NUM_THREADS=1 slimspec prepare-data --engine vllm --target embedded --prompts /tmp/extra_chat_2.jsonl \
        --out data/smollm2-135m-instruct/extra_chat_t07 --temperature 0.7 --seed 1 --max-new-tokens 384 \
        --max-prompt-length 512 --threads 1 --dtype bfloat16 --max-seconds 7200

The tool-style tasks (GPTeacher Toolformer, tool preamble removed), greedily:

    python recipes/smollm2-135m-instruct/data/extra_prompts.py --group tools --out /tmp/extra_tools.jsonl
    OMP_NUM_THREADS=1 slimspec prepare-data --engine vllm --target embedded --prompts /tmp/extra_tools.jsonl \
        --out data/smollm2-135m-instruct/extra_tools_greedy --max-new-tokens 384 --max-prompt-length 512 \
        --threads 1 --dtype bfloat16 --max-seconds 2400

Rerun the same commands to continue: prepare-data skips the prompts already answered.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from slimspec_hf.utils import atomic_write


GROUPS = {
    # the chat and instruction prompts closest to MT-Bench
    "chat": ("anicka-net/karma-electric-project:", "f/awesome-chatgpt-prompts", "yizhongw/self-instruct", "exercism/"),
    "tools": ("teknium1/GPTeacher",),
    "math": ("hendrycks/math",),
}
REPO = Path(__file__).resolve().parents[3]
DEFAULT_PROMPTS = REPO.parent / "shared" / "data" / "train" / "prompts_extra_25k.jsonl"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--prompts", default=str(DEFAULT_PROMPTS), help="prompts_extra_25k.jsonl (JSONL with `source`)"
    )
    parser.add_argument("--group", required=True, help=f"source group: one of {', '.join(GROUPS)}")
    parser.add_argument("--part", default="1/1", help="I/N: keep every N-th prompt of the group, starting at the I-th")
    parser.add_argument("--out", required=True, help="where to write the JSONL")
    args = parser.parse_args(argv)
    if args.group not in GROUPS:
        print(f"--group: got {args.group!r}; pass one of {', '.join(GROUPS)}.", file=sys.stderr)
        return 2
    try:
        part, parts = (int(x) for x in args.part.split("/"))
        if not 1 <= part <= parts:
            raise ValueError
    except ValueError:
        print(f"--part: got {args.part!r}; pass I/N with 1 ≤ I ≤ N, e.g. 1/2.", file=sys.stderr)
        return 2
    if not Path(args.prompts).is_file():
        print(f"--prompts: {args.prompts} is not a file; pass prompts_extra_25k.jsonl.", file=sys.stderr)
        return 2
    prefixes = GROUPS[args.group]
    with open(args.prompts, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    kept = [row for row in rows if row.get("source", "").startswith(prefixes)][part - 1 :: parts]
    atomic_write(args.out, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in kept))
    print(f"{len(kept)} {args.group} prompts (part {part}/{parts}) → {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
