# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec gpu-check`: the device tests, the LM-head timings and MT-Bench speculative decoding on a GPU, each
step time-boxed, all results (JSON + markdown) in one folder. `scripts/gpu_check.sh` installs and calls it."""

import argparse
import os

from ..evaluation.gpu_check import STEP_NAMES, CheckSettings, run_gpu_check
from ..targets import DTYPE_CHOICES
from .common import error_boundary


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="slimspec gpu-check", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--output-dir",
        default=None,
        help="where the results go (default: $OUT when set, else gpu-check-results/)",
    )
    p.add_argument("--device", default="cuda", help="device of every step (default cuda; cpu runs it in CI)")
    p.add_argument(
        "--dtype", choices=[d for d in DTYPE_CHOICES if d != "auto"], default="bfloat16", help="bench dtypes"
    )
    p.add_argument("--steps", nargs="+", choices=STEP_NAMES, default=list(STEP_NAMES), help="default: all")
    p.add_argument("--budget", type=float, default=450.0, help="seconds for all steps together (default 450)")
    p.add_argument("--timeout-tests", type=float, default=130.0, help="time box of the device tests (s)")
    p.add_argument("--timeout-bench-head", type=float, default=90.0, help="time box of bench-head (s)")
    p.add_argument("--timeout-bench", type=float, default=160.0, help="time box of the MT-Bench run (s)")
    p.add_argument("--timeout-bench-batch", type=float, default=100.0, help="time box of the batched run (s)")
    p.add_argument("--drafter", default=None, help="drafter folder (default: the shipped SmolLM2 drafter)")
    p.add_argument("--data", default=None, help="MT-Bench question.jsonl (default: the shared data)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="bench (default 256; 8 with --tiny)")
    p.add_argument("--tiny", action="store_true", help="tiny shapes, one prompt, few tokens: seconds, for CI")
    return p


@error_boundary("slimspec gpu-check")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("budget", "timeout_tests", "timeout_bench_head", "timeout_bench", "timeout_bench_batch"):
        if getattr(args, name) <= 0:
            raise ValueError(f"`--{name.replace('_', '-')}` must be > 0 seconds, got {getattr(args, name)}.")
    settings = CheckSettings(
        device=args.device,
        dtype=args.dtype,
        tiny=args.tiny,
        budget_s=args.budget,
        timeouts={
            "tests": args.timeout_tests,
            "bench_head": args.timeout_bench_head,
            "bench": args.timeout_bench,
            "bench_batch": args.timeout_bench_batch,
        },
        steps=tuple(args.steps),
        drafter=args.drafter,
        data=args.data,
        max_new_tokens=args.max_new_tokens,
    )
    output_dir = args.output_dir or os.environ.get("OUT") or "gpu-check-results"
    summary = run_gpu_check(settings, output_dir, progress=lambda line: print(line, flush=True))
    print(f"[gpu-check] results in {output_dir}: " + ", ".join(f"{s['name']} {s['status']}" for s in summary["steps"]))
    return 0 if all(s["status"] in ("ok", "skipped") for s in summary["steps"]) else 1
