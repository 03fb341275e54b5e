# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec bench-head`: time the LM heads (full, low-rank, trimmed) against their MAC limits."""

import argparse
import gc
import os
import platform
import sys
import time
from dataclasses import asdict

import torch

from ..evaluation.heads import (
    DEFAULT_TRIM_K,
    SHAPES,
    Measurement,
    build_heads,
    check_layouts_agree,
    measure_cell,
    peak_bandwidth_gbs,
)
from ..targets import resolve_dtype
from ..utils import atomic_write_json


def _parse_shape(spec: str) -> tuple[str, int, int]:
    if spec in SHAPES:
        return (spec, *SHAPES[spec])
    name, sep, dims = spec.partition("=")
    parts = dims.split(",")
    if not sep or len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(
            f"`--shapes` entry {spec!r} is neither a known shape ({', '.join(SHAPES)}) nor NAME=d,V (e.g. tiny=32,256)."
        )
    return name, int(parts[0]), int(parts[1])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slimspec bench-head",
        description="Time the LM heads (full, low-rank r=d/rank-divisor, trimmed top-K) in two weight layouts, "
        "at several batch sizes, against their MAC limits. Not a test: numbers depend on the machine.",
    )
    parser.add_argument(
        "--shapes",
        nargs="+",
        type=_parse_shape,
        default=[_parse_shape(name) for name in SHAPES],
        help=f"known shapes ({', '.join(SHAPES)}) or NAME=d,V. Default: all known shapes.",
    )
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 64], help="default: 1 64")
    parser.add_argument(
        "--dtypes",
        nargs="+",
        choices=["float32", "bfloat16", "float16"],
        default=["float32", "bfloat16"],
        help="default: float32 bfloat16",
    )
    parser.add_argument("--device", default="cpu", help="where the heads run: cpu (default), cuda, cuda:1, ...")
    parser.add_argument(
        "--peak-bandwidth",
        type=float,
        default=None,
        metavar="GB/S",
        help="memory bandwidth the timings are read against (GB/s). Default: the datasheet value for known GPUs "
        "(H200, H100, A100, L4, ...), none on a CPU (the 'of bw' column then stays empty)",
    )
    parser.add_argument("--rank-divisor", type=int, default=8, help="low-rank head rank r = d // this (default 8)")
    parser.add_argument(
        "--trim-k",
        type=int,
        default=None,
        help=f"trimmed head's K. Default: min({DEFAULT_TRIM_K}, V // 3) (32768 for the paper's vocabularies, "
        "16384 for SmolLM2's 49152).",
    )
    parser.add_argument("--rounds", type=int, default=9, help="interleaved timed rounds at batch 1 (default 9)")
    parser.add_argument(
        "--rounds-large", type=int, default=3, help="interleaved timed rounds at batch > 8 (default 3)"
    )
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls of each head before timing (default 1)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: leave as is)")
    parser.add_argument(
        "--cold-cache",
        action="store_true",
        help="write a 64 MiB buffer before every call so heads start with a cold last-level cache",
    )
    parser.add_argument(
        "--model-head",
        action="store_true",
        help="also time modeling_slimspec.LowRankHead before/after storing up.weight column-major",
    )
    parser.add_argument("--json", dest="json_path", default=None, help="also write every measurement to this JSON")
    return parser


def _format_table(rows: list[Measurement]) -> str:
    header = (
        f"{'shape':<14} {'dtype':<8} {'B':>3} {'head':<11} {'layout':<9} {'median ms':>10} {'IQR ms':>17} "
        f"{'speed-up':>8} {'IQR':>13} {'MAC limit':>9} {'of limit':>8} {'GB/s':>8} {'of bw':>6}"
    )
    lines = [header, "-" * len(header)]
    for m in rows:
        lines.append(
            f"{m.shape:<14} {m.dtype:<8} {m.batch_size:>3} {m.head:<11} {m.layout:<9} {m.median_ms:>10.3f} "
            f"{f'{m.p25_ms:.3f}–{m.p75_ms:.3f}':>17} {m.speedup:>8.2f} "
            f"{f'{m.speedup_p25:.2f}–{m.speedup_p75:.2f}':>13} {m.mac_limit:>9.2f} {m.fraction_of_limit:>8.2f} "
            f"{m.bandwidth_gbs:>8.1f} {m.fraction_of_bandwidth:>6.2f}"
        )
    return "\n".join(lines)


def _check_arguments(args) -> None:
    """Raise on round, warm-up, rank-divisor, batch-size or thread counts out of range."""
    for name in ("rounds", "rounds_large", "rank_divisor"):
        if getattr(args, name) < 1:
            raise ValueError(f"`--{name.replace('_', '-')}` must be >= 1, got {getattr(args, name)}.")
    if args.warmup < 0:
        raise ValueError(f"`--warmup` must be >= 0, got {args.warmup}.")
    if any(b < 1 for b in args.batch_sizes):
        raise ValueError(f"`--batch-sizes` must all be >= 1, got {args.batch_sizes}.")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"`--threads` must be >= 1, got {args.threads}.")


def _plan_shapes(args) -> list[tuple[str, int, int, int, int]]:
    """(name, d, V, rank, K) per shape, with r = d // `--rank-divisor` and K from `--trim-k`, both checked."""
    plans = []
    for name, d, V in args.shapes:
        rank = d // args.rank_divisor
        k = args.trim_k if args.trim_k is not None else min(DEFAULT_TRIM_K, V // 3)
        if not 0 < rank < min(d, V):
            raise ValueError(
                f"shape {name!r}: rank d // --rank-divisor = {d} // {args.rank_divisor} = {rank} must satisfy "
                f"0 < r < min(d, V) = {min(d, V)}; use a larger d or a smaller --rank-divisor."
            )
        if not 0 < k < V:
            raise ValueError(f"shape {name!r}: `--trim-k` ({k}) must satisfy 0 < K < V = {V}.")
        plans.append((name, d, V, rank, k))
    return plans


def _resolve_device(args) -> tuple[torch.device, float | None, str]:
    """(device, peak bandwidth in GB/s or None, a description of the device) from `--device`/`--peak-bandwidth`."""
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"`--device {args.device}` asked for a GPU, but torch {torch.__version__} sees none.")
    peak = args.peak_bandwidth if args.peak_bandwidth is not None else peak_bandwidth_gbs(device)
    if peak is not None and peak <= 0:
        raise ValueError(f"`--peak-bandwidth` must be > 0 GB/s, got {peak}.")
    where = (
        f"{torch.cuda.get_device_name(device)} ({device})"
        if device.type == "cuda"
        else f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()})"
    )
    return device, peak, where


def _measure_all(
    args, plans, device: torch.device, flush: torch.Tensor | None, peak: float | None
) -> list[Measurement]:
    """Time every planned shape × dtype × batch size, printing each cell's rows as it finishes."""
    rows: list[Measurement] = []
    for name, d, V, rank, k in plans:
        for dtype_name in args.dtypes:
            dtype = resolve_dtype(dtype_name)
            heads = build_heads(d, V, rank, k, dtype, model_head=args.model_head, device=device)
            check_layouts_agree(heads, d, dtype, device)
            for batch_size in args.batch_sizes:
                rounds = args.rounds if batch_size <= 8 else args.rounds_large
                cell = measure_cell(
                    name, d, V, rank, k, dtype_name, heads, batch_size, rounds, args.warmup, flush, device, peak
                )
                rows.extend(cell)
                print(_format_table(cell).split("\n", 2)[2], flush=True)
            del heads  # one shape and dtype in memory at a time
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _check_arguments(args)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    plans = _plan_shapes(args)
    device, peak, where = _resolve_device(args)
    load_before = os.getloadavg()
    print(
        f"slimspec bench-head: torch {torch.__version__}, {torch.get_num_threads()} threads, {where}, load average "
        f"{load_before[0]:.2f}; cache {'cold (buffer written before each call)' if args.cold_cache else 'warm'}; "
        f"peak bandwidth {f'{peak:.0f} GB/s' if peak else 'not given'}",
        flush=True,
    )
    # 64 MiB > the 32 MiB L3 here; 256 MiB > any GPU's L2 (60 MB on an H200)
    flush = torch.zeros((16 if device.type == "cpu" else 64) << 20, device=device) if args.cold_cache else None
    print(_format_table([]), flush=True)
    started = time.perf_counter()
    rows = _measure_all(args, plans, device, flush, peak)
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()

    print()
    print(_format_table(rows))
    print(
        f"\nspeed-up: median over rounds of (faster full-head layout) / (head), IQR over rounds; MAC limit: "
        f"(V·d)/(r·d+V·r) for low-rank, V/K for trimmed; GB/s: (weights + input + logits) bytes / median time. "
        f"{elapsed:.0f} s; load average {load_after[0]:.2f}."
    )
    if args.json_path:
        atomic_write_json(
            args.json_path,
            {
                "command": "slimspec bench-head " + " ".join(argv if argv is not None else sys.argv[1:]),
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "cpu_count": os.cpu_count(),
                "device": str(device),
                "device_name": where,
                "peak_bandwidth_gbs": peak,
                "cold_cache": args.cold_cache,
                "load_average_before": load_before,
                "load_average_after": load_after,
                "seconds": elapsed,
                "measurements": [asdict(m) for m in rows],
            },
        )
    return 0
