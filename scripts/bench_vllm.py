# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Serving benchmark in vLLM: the SlimSpec low-rank head (plugin) vs the merged full head vs no speculation.

Three settings, in one run: the target alone, the target + the drafter exported with `--to vllm` (two head factors, served by the slimspec
plugin), the target + the drafter exported with `--to speculators` (the merged V×d head, stock vLLM). Each serves
the same MT-Bench first turns (chat template, greedy, `--max-tokens` new tokens) at batch 1, 4, 16, 64: `batch`
requests in flight at once, repeated over distinct prompts until `--min-requests` requests have run. Two passes
(`scripts/vllm_runner.py`, beside this script): interleaved — the three engines alive in one process and timed in turns,
so that on a shared CPU each setting sees the same load: the throughput reported — and sequential — one engine
per process, one after another, with vLLM's spec-decode counters on: tau (1 + accepted / drafts), the greedy
texts (identical across settings?) and a second, load-exposed throughput. tokens/s = generated tokens / wall
time of generate().

    make install-vllm
    OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=nobind \\
        .venv-vllm/bin/python scripts/bench_vllm.py --dtype float32 --out-dir runs/bench_vllm

Writes `results.json` (everything, texts included) and `results.md` (the table) into `--out-dir`. `--head-only`
times the head alone (dense vs the two factors) as vLLM's CPU backend runs linear layers, without an engine.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from vllm_runner import run_in_own_session  # beside this script (scripts/ is first on sys.path)


REPO_ROOT = Path(__file__).resolve().parents[1]
RUNNER = Path(__file__).resolve().with_name("vllm_runner.py")
DEFAULT_DRAFTER = REPO_ROOT / "drafters" / "smollm2-135m-instruct-slimspec"
DEFAULT_PROMPTS = (
    Path(os.environ.get("SLIMSPEC_DATA", REPO_ROOT.parent / "shared" / "data")) / "eval/mt_bench/question.jsonl"
)
SETTINGS = ("no speculation", "merged full head", "SlimSpec low-rank head")


def run_runner(args, target, extra, out: Path) -> dict:
    cmd = [sys.executable, str(RUNNER), "--target", str(target)]
    cmd += ["--prompts", str(args.prompts), "--out", str(out), "--dtype", args.dtype]
    cmd += ["--max-tokens", str(args.max_tokens), "--min-requests", str(args.min_requests)]
    cmd += ["--num-speculative-tokens", str(args.num_speculative_tokens), "--batch-sizes", *map(str, args.batch_sizes)]
    cmd += extra
    started = time.perf_counter()
    proc = run_in_own_session(cmd, args.engine_timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{proc.stderr[-4000:]}")
    result = json.loads(out.read_text())
    result["wall_s"] = time.perf_counter() - started
    return result


def table(interleaved: dict, sequential: dict, args) -> str:
    plain, merged, low = (sequential[s] for s in SETTINGS)
    lines = [
        f"dtype {args.dtype}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} (one thread per engine), "
        f"{args.max_tokens} new tokens per request, k = {args.num_speculative_tokens}, MT-Bench first turns, "
        f"at least {args.min_requests} requests per batch size.",
        "",
        "Interleaved (the three engines alive in one process, timed in turns, same load):",
        "",
        "| batch | no spec tok/s | merged head tok/s | low-rank head tok/s | τ | low-rank / merged | low-rank / no spec |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run, lr in zip(interleaved["runs"], low["runs"]):
        p, m, r = run["tok_per_s"]
        lines.append(
            f"| {run['batch']} | {p:.1f} | {m:.1f} | {r:.1f} | {lr['tau']:.2f} | {r / m:.2f}x | {r / p:.2f}x |"
        )
    lines += [
        "",
        "Sequential (one engine after another; τ from vLLM's spec-decode counters):",
        "",
        "| batch | no spec tok/s | merged tok/s (τ) | low-rank tok/s (τ) | low-rank / merged |",
        "|---:|---:|---:|---:|---:|",
    ]
    for p, m, lr in zip(plain["runs"], merged["runs"], low["runs"]):
        lines.append(
            f"| {p['batch']} | {p['tok_per_s']:.1f} | {m['tok_per_s']:.1f} ({m['tau']:.2f}) | "
            f"{lr['tok_per_s']:.1f} ({lr['tau']:.2f}) | {lr['tok_per_s'] / m['tok_per_s']:.2f}x |"
        )
    same = all(
        a["token_ids"] == b["token_ids"] == c["token_ids"]
        for a, b, c in zip(plain["runs"], merged["runs"], low["runs"])
    )
    lines += ["", f"Greedy outputs identical across the three settings (sequential runs): {same}"]
    return "\n".join(lines) + "\n"


def head_only(args) -> str:
    """The drafter's head alone as vLLM's CPU backend runs linear layers (`dispatch_cpu_unquantized_gemm`): dense
    V×d vs down (r×d) then up (V×r), random weights of the drafter's shapes, per batch size (ms per call)."""
    import torch
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    from slimspec_hf import SlimSpecDrafterConfig

    cfg = SlimSpecDrafterConfig.from_pretrained(args.drafter)
    d, V, r = cfg.hidden_size, cfg.vocab_size, cfg.head_rank
    dtype = getattr(torch, args.dtype)

    def layer(rows, cols):
        module = torch.nn.Module()
        module.weight = torch.nn.Parameter(torch.randn(rows, cols).mul(0.02).to(dtype), requires_grad=False)
        dispatch_cpu_unquantized_gemm(module, remove_weight=False)
        return lambda x: module.cpu_linear(x, module.weight, None)

    dense, down, up = layer(V, d), layer(r, d), layer(V, r)

    def ms(fn, x, n=20):
        fn(x)
        start = time.perf_counter()
        for _ in range(n):
            fn(x)
        return (time.perf_counter() - start) / n * 1e3

    lines = [
        f"head alone, {args.dtype}, torch threads {torch.get_num_threads()}: d {d}, V {V}, r {r}",
        "",
        "| batch | dense V×d (ms) | down then up (ms) | ratio |",
        "|---:|---:|---:|---:|",
    ]
    for batch in args.batch_sizes:
        x = torch.randn(batch, d).to(dtype)
        t_dense, t_low = ms(dense, x), ms(lambda h: up(down(h)), x)
        lines.append(f"| {batch} | {t_dense:.2f} | {t_low:.2f} | {t_dense / t_low:.1f}x |")
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
    parser.add_argument("--head-only", action="store_true", help="time the head alone (no engine) and exit")
    args = parser.parse_args(argv)
    if args.head_only:
        print(head_only(args))
        return 0

    import torch

    from slimspec_hf.integrations.vllm.export import export_vllm
    from slimspec_hf.interop.export import export_speculators
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
    # Interleaved first: throughput under the same load for the three settings.
    print("[interleaved] running the three engines in turns ...", flush=True)
    folders = ["none" if d is None else str(d) for d in drafts.values()]
    interleaved = run_runner(args, target, ["--interleave", *folders], out / "interleaved.json")
    for r in interleaved["runs"]:
        print(f"  batch {r['batch']:>3}: " + ", ".join(f"{t:7.1f}" for t in r["tok_per_s"]) + " tok/s", flush=True)
    sequential = {}
    for i, (setting, draft) in enumerate(drafts.items()):
        print(f"[{setting}] running ...", flush=True)
        extra = [] if draft is None else ["--draft", str(draft)]
        sequential[setting] = run_runner(args, target, extra, out / f"engine{i}.json")
        for r in sequential[setting]["runs"]:
            print(f"  batch {r['batch']:>3}: {r['tok_per_s']:7.1f} tok/s  tau {r['tau']}", flush=True)
    report = table(interleaved, sequential, args)
    results = {"args": vars(args), "interleaved": interleaved, "sequential": sequential}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "results.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
