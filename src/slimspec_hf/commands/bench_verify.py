# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec bench-verify`: what verifying k drafted tokens costs the target, in each dtype, in one run.

    slimspec bench-verify [--target embedded] [--dtypes float32 bfloat16] [--max-tokens 16] [--context 256]
        [--repeats 9] [--threads 1] [--batch-sizes 1 4 16]

Times the target's cached forward over n = 1 … max-tokens new tokens (n = 1 is a plain decoding step; n = k + 1
verifies k drafted tokens) and prints T(n) and T(n) / T(1) per dtype (and per batch size: B rows of n tokens each). Speculative decoding pays where verifying is
nearly as cheap as one step: on GPUs, and on CPUs that compute bf16 natively; in fp32 on a CPU T(n) grows with n.
"""

import argparse
import sys

import torch

from .common import error_boundary


def _parser() -> argparse.ArgumentParser:
    from ..targets import DTYPE_CHOICES

    parser = argparse.ArgumentParser(prog="slimspec bench-verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="embedded", help="target: Hub id, local folder, .gguf or 'embedded'")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=list(DTYPE_CHOICES))
    parser.add_argument("--max-tokens", type=int, default=16, help="largest number of new tokens timed")
    parser.add_argument("--context", type=int, default=256, help="cached positions before the timed forward")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1], help="rows verified at once (default 1)")
    parser.add_argument("--device", default="cpu")
    return parser


@error_boundary("slimspec bench-verify", code=2)
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name in ("max_tokens", "context", "repeats", "threads"):
        if getattr(args, name) < 1:
            raise ValueError(f"`--{name.replace('_', '-')}` must be at least 1, got {getattr(args, name)}.")
    if min(args.batch_sizes) < 1:
        raise ValueError(f"`--batch-sizes` must all be at least 1, got {args.batch_sizes}.")
    torch.set_num_threads(args.threads)
    from ..evaluation.timing import verification_costs
    from ..targets import load_target, resolve_dtype

    sizes = list(range(1, args.max_tokens + 1))
    costs = {}
    for dtype in args.dtypes:
        target, _ = load_target(args.target, dtype=dtype, device=args.device)
        name = str(resolve_dtype(dtype, args.device)).removeprefix("torch.")
        for batch in args.batch_sizes:
            key = name if args.batch_sizes == [1] else f"{name} B={batch}"
            costs[key] = verification_costs(
                target, sizes, context=args.context, repeats=args.repeats, batch_size=batch
            )
        del target
    names = list(costs)
    print(
        f"target {args.target}, {args.device}, {args.threads} thread(s), {args.context} cached positions, "
        f"median of {args.repeats}"
    )
    print("| new tokens n | " + " | ".join(f"T(n) {d} ms | T(n)/T(1) {d}" for d in names) + " |")
    print("|---:|" + "---:|---:|" * len(names))
    for n in sizes:
        cells = " | ".join(f"{costs[d][n] * 1e3:.1f} | {costs[d][n] / costs[d][1]:.2f}" for d in names)
        print(f"| {n} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
