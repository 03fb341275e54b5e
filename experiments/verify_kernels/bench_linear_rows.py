# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""How a CPU linear layer's cost grows with the rows it multiplies (1 = plain decoding, k + 1 = verifying k drafted
tokens), per kernel, with the weights cold in cache as in a model's forward (each call takes the next of `--copies`
distinct weights of the shape, more than the L3 cache holds):

    OMP_NUM_THREADS=1 python experiments/verify_kernels/bench_linear_rows.py [--dtype float32]

Kernels: `F.linear`; `weight @ x.T` (the weight as the streamed operand: what `head_rows` picks for a vocabulary head);
MKL's sgemm with the weight packed once ahead (`torch.ops.mkl._mkl_linear`, fp32 only); oneDNN with a prepacked
weight (`mkldnn_linear`). Prints ms per call and the ratio to one row for SmolLM2-135M's and Gemma-3-270M's shapes."""

import argparse
import time

import torch
import torch.nn.functional as F


SHAPES = {  # name: (out, in, distinct copies cycled through)
    "smollm2 mlp up 1536x576": (1536, 576, 60),
    "smollm2 mlp down 576x1536": (576, 1536, 60),
    "smollm2 attn 576x576": (576, 576, 120),
    "gemma3 mlp up 2048x640": (2048, 640, 40),
    "smollm2 head 49152x576": (49152, 576, 3),
}


def kernels(weights: list, rows: list, dtype) -> dict:
    found = {"linear": lambda i, x: F.linear(x, weights[i]), "weight @ x.T": lambda i, x: (weights[i] @ x.T).T}
    if dtype == torch.float32 and torch.backends.mkl.is_available():
        packed = {n: [torch.ops.mkl._mkl_reorder_linear_weight(w, n) for w in weights] for n in rows}
        found["mkl packed"] = lambda i, x: torch.ops.mkl._mkl_linear(x, packed[len(x)][i], weights[i], None, len(x))
    if torch.backends.mkldnn.is_available():
        dense = [w.to_mkldnn() for w in weights]
        found["onednn packed"] = lambda i, x: torch._C._nn.mkldnn_linear(x.to_mkldnn(), dense[i], None).to_dense()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 2, 5, 8])
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {args.dtype}, weights cold in cache\n")
    print(
        "| shape | kernel | "
        + " | ".join(f"{n} rows ms" for n in args.rows)
        + " | "
        + " | ".join(f"{n}/1" for n in args.rows[1:])
        + " |"
    )
    print("|---" * (1 + 2 * len(args.rows)) + "|")
    with torch.inference_mode():
        for name, (out_f, in_f, copies) in SHAPES.items():
            weights = [torch.randn(out_f, in_f, dtype=dtype) for _ in range(copies)]
            for kname, kernel in kernels(weights, args.rows, dtype).items():
                times = []
                for n in args.rows:
                    x = torch.randn(n, in_f, dtype=dtype)
                    for i in range(copies):  # warm the kernel, not the cache: the next pass evicts these
                        kernel(i, x)
                    start = time.perf_counter()
                    for _ in range(args.passes):
                        for i in range(copies):
                            kernel(i, x)
                    times.append((time.perf_counter() - start) / args.passes / copies * 1e3)
                ratios = " | ".join(f"{t / times[0]:.2f}" for t in times[1:])
                print(f"| {name} | {kname} | " + " | ".join(f"{t:.3f}" for t in times) + f" | {ratios} |")


if __name__ == "__main__":
    main()
