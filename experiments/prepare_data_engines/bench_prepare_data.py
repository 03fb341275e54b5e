# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Side by side: how fast each `slimspec prepare-data` engine regenerates the same prompts (one run, one table).

    OMP_NUM_THREADS=1 python experiments/prepare_data_engines/bench_prepare_data.py --prompts ../shared/data/train/prompts_mix.jsonl \\
        --limit 128 --max-new-tokens 384 --dtype bfloat16 --threads 1 [--engines transformers vllm]

Each engine runs `slimspec prepare-data` in its own process, one after the other, on the same prompts (a seeded
sample of `--limit`), into a temporary folder. Generation seconds are the command's own (model loading excluded);
wall seconds include loading. The table also counts the answers both engines wrote identically.
"""

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--limit", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engines", nargs="+", default=["transformers", "vllm"])
    parser.add_argument("--max-new-tokens", type=int, default=384)
    parser.add_argument("--max-prompt-length", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32, help="transformers engine")
    parser.add_argument("--max-num-seqs", type=int, default=128, help="vllm engine")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="also write the table and the raw numbers here (folder)")
    args = parser.parse_args()

    lines = Path(args.prompts).read_text(encoding="utf-8").splitlines()
    random.Random(args.seed).shuffle(lines)
    results, answers = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-prepare-") as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        prompts.write_text("\n".join(lines[: args.limit]) + "\n", encoding="utf-8")
        for engine in args.engines:
            out = Path(tmp) / engine
            cmd = [sys.executable, "-m", "slimspec_hf.cli", "prepare-data", "--engine", engine]
            cmd += ["--prompts", str(prompts), "--out", str(out), "--max-new-tokens", str(args.max_new_tokens)]
            cmd += ["--max-prompt-length", str(args.max_prompt_length), "--dtype", args.dtype]
            cmd += ["--threads", str(args.threads), "--batch-size", str(args.batch_size)]
            cmd += ["--max-num-seqs", str(args.max_num_seqs), "--no-progress"]
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - start
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            summary = proc.stdout.strip().splitlines()[-1]
            # "prepare-data: N new, ... ; T tokens in S s (R tokens/s; ...)"
            tokens = int(summary.split(" tokens in ")[0].split()[-1])
            seconds = float(summary.split(" tokens in ")[1].split(" s ")[0])
            results.append({"engine": engine, "tokens": tokens, "seconds": seconds, "wall_s": wall})
            rows = [json.loads(line) for shard in sorted((out / "data").glob("*.jsonl")) for line in open(shard)]
            answers[engine] = {r["id"]: r["messages"][-1]["content"] for r in rows}
            results[-1]["answers"] = len(rows)
            results[-1]["length_cut"] = sum(r["finish_reason"] == "length" for r in rows)
    base = results[0]["tokens"] / results[0]["seconds"]
    table = [
        f"prepare-data engines side by side: {args.limit} prompts of {Path(args.prompts).name} (seed {args.seed}), "
        f"≤ {args.max_new_tokens} new tokens, greedy, {args.dtype}, {args.threads} thread(s)",
        "",
        "| engine | answers | cut at max | new tokens | generation s | tokens/s | × first | wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rate = r["tokens"] / r["seconds"]
        table.append(
            f"| {r['engine']} | {r['answers']} | {r['length_cut']} | {r['tokens']} | {r['seconds']:.1f} | "
            f"{rate:.1f} | {rate / base:.2f} | {r['wall_s']:.1f} |"
        )
    if len(answers) >= 2:
        first, *others = list(answers)
        for other in others:
            same = sum(answers[first][k] == answers[other].get(k) for k in answers[first])
            table.append(f"\nidentical answers, {first} vs {other}: {same}/{len(answers[first])}")
    text = "\n".join(table)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "README.md").write_text(text + "\n")
        (out / "results.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
