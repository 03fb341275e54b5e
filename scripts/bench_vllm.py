# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Serving benchmark in vLLM: the SlimSpec low-rank head (plugin) vs the merged full head vs no speculation.

Three engines, one after another in one run, each in its own process (`slimspec_hf.integrations.vllm.runner`):
the target alone, the target + the drafter exported with `--to vllm` (two head factors, served by the slimspec
plugin), the target + the drafter exported with `--to speculators` (the merged V×d head, stock vLLM). Each serves
the same MT-Bench first turns (chat template, greedy, `--max-tokens` new tokens) at batch 1, 4, 16, 64: `batch`
requests in flight at once, repeated over distinct prompts until `--min-requests` requests have run. Reported:
tokens/s (generated tokens / wall time of generate()), tau (vLLM's spec-decode counters: 1 + accepted / drafts),
and the low-rank / merged ratio.

    make install-vllm
    OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=nobind \\
        .venv-vllm/bin/python scripts/bench_vllm.py --dtype float32 --out-dir runs/bench_vllm

Writes `results.json` (everything, texts included) and `results.md` (the table) into `--out-dir`.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DRAFTER = REPO_ROOT / "drafters" / "smollm2-135m-instruct-slimspec"
DEFAULT_PROMPTS = (
    Path(os.environ.get("SLIMSPEC_DATA", REPO_ROOT.parent / "shared" / "data")) / "eval/mt_bench/question.jsonl"
)
SETTINGS = ("no speculation", "merged full head", "SlimSpec low-rank head")


def run_in_own_session(cmd, timeout, **kwargs) -> subprocess.CompletedProcess:
    """Runs an engine process in its own session (vLLM tears down its process group on exit, which would take
    the caller with it); on timeout the whole group, workers included, is killed: no engine is left running."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise RuntimeError(
            f"{' '.join(map(str, cmd))} ran past {timeout} s and was killed:\n{stderr[-4000:]}"
        ) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def run_engine(args, target, draft, out: Path) -> dict:
    cmd = [sys.executable, "-m", "slimspec_hf.integrations.vllm.runner", "--target", str(target)]
    cmd += ["--prompts", str(args.prompts), "--out", str(out), "--dtype", args.dtype]
    cmd += ["--max-tokens", str(args.max_tokens), "--min-requests", str(args.min_requests)]
    cmd += ["--num-speculative-tokens", str(args.num_speculative_tokens), "--batch-sizes", *map(str, args.batch_sizes)]
    if draft is not None:
        cmd += ["--draft", str(draft)]
    started = time.perf_counter()
    proc = run_in_own_session(cmd, args.engine_timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    result = json.loads(out.read_text())
    result["wall_s"] = time.perf_counter() - started
    return result


def table(results: dict, args) -> str:
    plain, merged, low = (results[s] for s in SETTINGS)
    lines = [
        f"dtype {args.dtype}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
        f"{args.max_tokens} new tokens per request, k = {args.num_speculative_tokens}, "
        f"at least {args.min_requests} requests per batch size",
        "",
        "| batch | no spec tok/s | merged tok/s (τ) | low-rank tok/s (τ) | low-rank / merged | low-rank / no spec |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for p, m, lr in zip(plain["runs"], merged["runs"], low["runs"]):
        lines.append(
            f"| {p['batch']} | {p['tok_per_s']:.1f} | {m['tok_per_s']:.1f} ({m['tau']:.2f}) | "
            f"{lr['tok_per_s']:.1f} ({lr['tau']:.2f}) | {lr['tok_per_s'] / m['tok_per_s']:.2f}x | "
            f"{lr['tok_per_s'] / p['tok_per_s']:.2f}x |"
        )
    same = all(
        a["token_ids"] == b["token_ids"] == c["token_ids"]
        for a, b, c in zip(plain["runs"], merged["runs"], low["runs"])
    )
    lines += ["", f"greedy outputs identical across the three settings: {same}"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drafter", default=str(DEFAULT_DRAFTER), help="SlimSpec drafter folder (low-rank head)")
    parser.add_argument("--target", default=None, help="local HF folder of the target (default: embedded SmolLM2)")
    parser.add_argument("--prompts", default=str(DEFAULT_PROMPTS), help="MT-Bench question.jsonl (first turns)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--min-requests", type=int, default=8)
    parser.add_argument("--num-speculative-tokens", type=int, default=3)
    parser.add_argument("--engine-timeout", type=int, default=900, help="seconds per engine process")
    parser.add_argument("--out-dir", default="runs/bench_vllm")
    args = parser.parse_args(argv)

    import torch

    from slimspec_hf.convert import export_speculators
    from slimspec_hf.integrations.vllm.export import export_vllm
    from slimspec_hf.targets import embedded_target_dir

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = Path(args.target) if args.target else embedded_target_dir()
    dtype = getattr(torch, args.dtype)
    drafts = {
        SETTINGS[0]: None,
        SETTINGS[1]: export_speculators(args.drafter, out / "merged", dtype=dtype, verifier_name_or_path=str(target)),
        SETTINGS[2]: export_vllm(args.drafter, out / "low_rank", dtype=dtype, verifier_name_or_path=str(target)),
    }
    results = {}
    for i, (setting, draft) in enumerate(drafts.items()):
        print(f"[{setting}] running ...", flush=True)
        results[setting] = run_engine(args, target, draft, out / f"engine{i}.json")
        for r in results[setting]["runs"]:
            print(f"  batch {r['batch']:>3}: {r['tok_per_s']:7.1f} tok/s  tau {r['tau']}", flush=True)
    report = table(results, args)
    (out / "results.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    (out / "results.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
