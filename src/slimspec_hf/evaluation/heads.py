# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec bench-head`: wall-clock cost of the LM heads (full, low-rank, trimmed) against their MAC limits.

For a head of hidden size d over a vocabulary of V tokens:

    full       z = W h,                      W (V×d)             V·d MACs
    low-rank   z = W_up (W_down h),          W_down (r×d), W_up (V×r), r = d/8        r·d + V·r MACs
    trimmed    z_K = W_K h, scattered into a full-V row of -inf,  W_K (K×d)          K·d MACs

so the low-rank head can be at most (V·d)/(r·d + V·r) times faster than the full one and the trimmed head V/K
times. Each head is timed in two memory layouts of the same weight:

    "as stored"   the weight as `nn.Linear` holds it, row-major (out×in): F.linear(h, W)
    "T-layout"    the same logical weight stored column-major, i.e. its transpose (in×out) contiguous, so the
                  product is `h @ W_T` and the output dimension is the contiguous one.

On this CPU (MKL / oneDNN, AVX-512) the T-layout is what lets the low-rank head reach its MAC limit at batch 1:
`F.linear(z, W_up)` with a row-major V×r `W_up` reads V rows of only r (64–512) numbers each, which MKL's GEMV
does at a fraction of the memory bandwidth; `z @ W_up_T` with W_up_T (r×V) contiguous streams r long rows and
runs at full bandwidth. See `fast_low_rank_logits` and docs/head_benchmark.md for the numbers. bf16 cells at
batch <= 8 also time the row-major weight with oneDNN switched off ("no oneDNN"): ATen's own bf16 GEMV is the
fastest bf16 path at batch 1 here, for the full head as well as the low-rank one.

Timing: all variants of one (shape, dtype, batch) cell are measured in interleaved rounds (the order rotates each
round), after warm-up, with `time.perf_counter` around a single call under `torch.inference_mode()`. Medians are
reported with their inter-quartile range; each speed-up is the median of the per-round ratios to the faster
full-head layout of the same round, again with its IQR, so that noise from other processes sharing the CPU shows.
One shape is held in memory at a time.
"""

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..modeling_slimspec import store_column_major
from ..targets import resolve_dtype
from .cost_model import mac_limit_low_rank, mac_limit_trimmed
from .timing import quartiles, time_interleaved


# (hidden size d, vocabulary size V) of the embedded target and of the paper's targets
SHAPES: dict[str, tuple[int, int]] = {
    "smollm2-135m": (576, 49152),
    "llama-3.1-8b": (4096, 128256),
    "gpt-oss-20b": (2880, 201088),
    "qwen3-30b-a3b": (2048, 151936),
}
DEFAULT_TRIM_K = 32768

# Peak memory bandwidth (GB/s, vendor datasheets) of GPUs the head timings are read against, matched as a
# substring of `torch.cuda.get_device_name()` (first match wins, so the more specific names come first).
PEAK_BANDWIDTH_GBS: dict[str, float] = {
    "H200": 4800.0,
    "H100 PCIe": 2000.0,
    "H100": 3350.0,
    "A100-SXM4-80GB": 2039.0,
    "A100 80GB PCIe": 1935.0,
    "A100": 1555.0,
    "L40S": 864.0,
    "L4": 300.0,
    "A10G": 600.0,
    "RTX 4090": 1008.0,
}


def peak_bandwidth_gbs(device: "str | torch.device") -> float | None:
    """The datasheet memory bandwidth (GB/s) of `device` when it is a GPU named in `PEAK_BANDWIDTH_GBS`, else
    None (a CPU's depends on its memory channels: pass `--peak-bandwidth`)."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    return next((gbs for key, gbs in PEAK_BANDWIDTH_GBS.items() if key in name), None)


def head_bytes(weight_elements: int, batch_size: int, hidden_size: int, vocab_size: int, itemsize: int) -> int:
    """Bytes a head call must move at least: its weights once, the B×d input and the B×V logits."""
    return (weight_elements + batch_size * (hidden_size + vocab_size)) * itemsize


# ----------------------------------------------------------------------------------------------------------------
# The fast low-rank head (what `LowRankHead.forward` should compute) and the layout helper
# ----------------------------------------------------------------------------------------------------------------


def fast_low_rank_logits(
    hidden_states: torch.Tensor, down_weight: torch.Tensor, up_weight_t: torch.Tensor
) -> torch.Tensor:
    """Low-rank head logits `(W_up · W_down · h)` with W_up given transposed.

    Args:
        hidden_states: (..., d).
        down_weight: W_down, (r, d) — `lm_head.down.weight` as stored.
        up_weight_t: W_upᵀ, (r, V), contiguous — `lm_head.up.weight.t()` when `lm_head.up.weight` is stored
            column-major (see `modeling_slimspec.store_column_major`), or `lm_head.up.weight.t().contiguous()`.

    Returns:
        (..., V) logits, equal to `F.linear(F.linear(hidden_states, down_weight), up_weight_t.t())`.
    """
    if down_weight.dim() != 2 or up_weight_t.dim() != 2 or down_weight.shape[0] != up_weight_t.shape[0]:
        raise ValueError(
            f"`down_weight` must be (r, d) and `up_weight_t` (r, V) with the same r, got "
            f"{tuple(down_weight.shape)} and {tuple(up_weight_t.shape)}."
        )
    if hidden_states.shape[-1] != down_weight.shape[1]:
        raise ValueError(
            f"`hidden_states` last dimension ({hidden_states.shape[-1]}) must equal d = {down_weight.shape[1]} "
            f"of `down_weight`."
        )
    reduced = F.linear(hidden_states, down_weight)  # (..., r): tiny, the layout of W_down does not matter
    # (..., r) @ (r, V): GEMV/GEMM whose output dimension V is the contiguous one of the big matrix.
    return torch.matmul(reduced, up_weight_t)


# ----------------------------------------------------------------------------------------------------------------
# Measurement
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class Measurement:
    shape: str
    hidden_size: int
    vocab_size: int
    dtype: str
    batch_size: int
    head: str
    layout: str
    rank: int | None
    draft_vocab_size: int | None
    macs: int
    mac_limit: float
    median_ms: float
    p25_ms: float
    p75_ms: float
    speedup: float = float("nan")  # median of per-round (best full layout) / (this head)
    speedup_p25: float = float("nan")
    speedup_p75: float = float("nan")
    fraction_of_limit: float = float("nan")
    rounds: int = 0
    times_ms: list[float] = field(default_factory=list)
    device: str = "cpu"
    bytes_moved: int = 0  # weights + input + logits, see `head_bytes`
    bandwidth_gbs: float = float("nan")  # bytes_moved / median time
    fraction_of_bandwidth: float = float("nan")  # bandwidth_gbs / the peak given (nan without one)


def _fill_random(tensor: torch.Tensor, scale: float, seed: int) -> torch.Tensor:
    """Fills `tensor` with uniform noise in [-scale, scale) by tiling a 1 Mi-element random block.

    Drawing 0.5 G random numbers takes ~10 s on this CPU; a tiled block gives the GEMMs the same non-trivial,
    denormal-free data at memcpy speed.
    """
    generator = torch.Generator().manual_seed(seed)
    block = (torch.rand(1 << 20, generator=generator) * 2 - 1).mul_(scale).to(tensor.dtype)
    flat = tensor.view(-1)
    for start in range(0, flat.numel(), block.numel()):
        stop = min(start + block.numel(), flat.numel())
        flat[start:stop].copy_(block[: stop - start])
    return tensor


def _random_matrix(rows: int, cols: int, dtype: torch.dtype, seed: int, transposed: bool = False) -> torch.Tensor:
    """A (rows×cols) matrix, row-major, or column-major (its transpose contiguous) when `transposed`."""
    scale = 1.0 / math.sqrt(cols)
    if transposed:
        return _fill_random(torch.empty(cols, rows, dtype=dtype), scale, seed).t()
    return _fill_random(torch.empty(rows, cols, dtype=dtype), scale, seed)


def _scatter_full(compact: torch.Tensor, token_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The trimmed head's output: K logits placed into a full-V row of -inf (as `TrimmedHead.forward`)."""
    logits = compact.new_full((*compact.shape[:-1], vocab_size), float("-inf"))
    return logits.index_copy_(-1, token_ids, compact)


NO_ONEDNN = "no oneDNN"  # row-major weight, bf16 matmul with oneDNN disabled (ATen's own kernel)
NO_ONEDNN_MAX_BATCH = 8


def _without_onednn(function: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    def call(hidden_states: torch.Tensor) -> torch.Tensor:
        enabled = torch.backends.mkldnn.enabled
        torch.backends.mkldnn.enabled = False
        try:
            return function(hidden_states)
        finally:
            torch.backends.mkldnn.enabled = enabled

    return call


def build_heads(
    hidden_size: int,
    vocab_size: int,
    rank: int,
    draft_vocab_size: int,
    dtype: torch.dtype,
    seed: int = 0,
    model_head: bool = False,
    device: "str | torch.device" = "cpu",
) -> dict[tuple[str, str], Callable[[torch.Tensor], torch.Tensor]]:
    """{(head, layout): h -> full-V logits} for one shape and dtype (bf16 adds the "no oneDNN" layout). Holds every weight of the shape once per
    layout (for Llama-3.1-8B in fp32: 2 × 2.1 GB full, 2 × 0.5 GB trimmed, 2 × 0.26 GB low-rank).

    With `model_head`, also `modeling_slimspec.LowRankHead` as the model builds it ("as stored") and with its
    `up.weight` re-laid out by `store_column_major` ("T-layout"), both holding the same W_down and W_up.

    Weights are drawn on the CPU (the same numbers on every device) and then moved to `device`, layout kept."""
    d, V, r, K = hidden_size, vocab_size, rank, draft_vocab_size
    device = torch.device(device)

    def place(matrix: torch.Tensor) -> torch.Tensor:  # keeps a column-major view column-major on the device
        if device.type == "cpu":
            return matrix
        if matrix.is_contiguous():
            return matrix.to(device)
        return matrix.t().contiguous().to(device).t()

    full = place(_random_matrix(V, d, dtype, seed))
    full_t = place(_random_matrix(V, d, dtype, seed, transposed=True))  # (V, d) view of a contiguous (d, V)
    down = place(_random_matrix(r, d, dtype, seed + 1))
    up = place(_random_matrix(V, r, dtype, seed + 2))
    up_t = up.t().contiguous()  # (r, V) — the same W_up, transposed storage
    trimmed = place(_random_matrix(K, d, dtype, seed + 3))
    trimmed_t = place(_random_matrix(K, d, dtype, seed + 3, transposed=True))
    token_ids = torch.randperm(V, generator=torch.Generator().manual_seed(seed))[:K].sort().values.to(device)

    heads = {
        ("full", "as stored"): lambda h: F.linear(h, full),
        ("full", "T-layout"): lambda h: F.linear(h, full_t),
        ("low-rank", "as stored"): lambda h: F.linear(F.linear(h, down), up),
        ("low-rank", "T-layout"): lambda h: fast_low_rank_logits(h, down, up_t),
        ("trimmed", "as stored"): lambda h: _scatter_full(F.linear(h, trimmed), token_ids, V),
        ("trimmed", "T-layout"): lambda h: _scatter_full(F.linear(h, trimmed_t), token_ids, V),
    }
    if dtype == torch.bfloat16 and device.type == "cpu":
        # bf16 matmuls go to oneDNN by default; at batch 1 ATen's own bf16 GEMV (fp32 accumulation) streams the
        # row-major weight about twice as fast on this CPU. Only timed at small batches (see `measure_cell`).
        for head in ("full", "low-rank", "trimmed"):
            heads[(head, NO_ONEDNN)] = _without_onednn(heads[(head, "as stored")])
    if model_head:
        heads[("LowRankHead", "as stored")] = _model_head(down, up, column_major=False)
        heads[("LowRankHead", "T-layout")] = _model_head(down, up, column_major=True)
    return heads


def _model_head(down: torch.Tensor, up: torch.Tensor, column_major: bool):
    """The package's own `LowRankHead` module holding W_down and W_up (on their device, in their dtype), with
    `up.weight` stored column-major (`store_column_major`) or as the model builds it."""
    from ..modeling_slimspec import LowRankHead

    (r, d), V = down.shape, up.shape[0]
    head = LowRankHead(d, V, r).to(device=down.device, dtype=down.dtype).requires_grad_(False)
    head.down.weight.copy_(down)
    head.up.weight.copy_(up)
    if column_major:
        store_column_major(head.up.weight)
    return head


def check_layouts_agree(
    heads: dict, hidden_size: int, dtype: torch.dtype, device: "str | torch.device" = "cpu"
) -> None:
    """The T-layout low-rank head must compute the same logits as the as-stored one (same weights)."""
    h = torch.randn(2, hidden_size, generator=torch.Generator().manual_seed(0)).to(device=device, dtype=dtype)
    with torch.inference_mode():
        reference = heads[("low-rank", "as stored")](h).float()
        others = [key for key in heads if key[0] in ("low-rank", "LowRankHead") and key != ("low-rank", "as stored")]
        for key in others:
            other = heads[key](h).float()
            tol = 1e-4 if dtype == torch.float32 else 3e-2
            if not torch.allclose(reference, other, rtol=tol, atol=tol * float(reference.abs().max())):
                raise RuntimeError(
                    f"{key} disagrees with F.linear(F.linear(h, down), up): max |diff| "
                    f"{float((reference - other).abs().max())}."
                )


def measure_cell(
    shape: str,
    hidden_size: int,
    vocab_size: int,
    rank: int,
    draft_vocab_size: int,
    dtype_name: str,
    heads: dict,
    batch_size: int,
    rounds: int,
    warmup: int,
    flush: torch.Tensor | None,
    device: "str | torch.device" = "cpu",
    peak_bandwidth: float | None = None,
) -> list[Measurement]:
    """One (shape, dtype, batch) cell: every head timed in interleaved rounds; with `peak_bandwidth` (GB/s), each
    row also says what share of it the head's minimum traffic (`head_bytes`) reached."""
    dtype = resolve_dtype(dtype_name)
    inputs = torch.randn(batch_size, hidden_size, generator=torch.Generator().manual_seed(batch_size))
    inputs = inputs.to(device=device, dtype=dtype)
    if batch_size > NO_ONEDNN_MAX_BATCH:  # ATen's bf16 GEMM fallback is far slower than oneDNN's at batch 64
        heads = {key: fn for key, fn in heads.items() if key[1] != NO_ONEDNN}
    times = time_interleaved(heads, inputs, rounds, warmup, flush)
    medians = {key: statistics.median(ts) for key, ts in times.items()}
    best_full = min((key for key in times if key[0] == "full"), key=medians.__getitem__)
    rows = []
    for (head, layout), ts in times.items():
        if head == "full":
            macs, limit, r, k = vocab_size * hidden_size, 1.0, None, None
        elif head in ("low-rank", "LowRankHead"):
            macs, r, k = rank * hidden_size + vocab_size * rank, rank, None
            limit = mac_limit_low_rank(hidden_size, vocab_size, rank)
        else:
            macs, r, k = draft_vocab_size * hidden_size, None, draft_vocab_size
            limit = mac_limit_trimmed(vocab_size, draft_vocab_size)
        weights = (rank * hidden_size + vocab_size * rank) if r is not None else (k or vocab_size) * hidden_size
        moved = head_bytes(weights, batch_size, hidden_size, vocab_size, inputs.element_size())
        bandwidth = moved / statistics.median(ts) / 1e9
        ratios = [f / t for f, t in zip(times[best_full], ts)]
        s25, s50, s75 = quartiles(ratios)
        q25, q50, q75 = quartiles(ts)
        rows.append(
            Measurement(
                shape=shape,
                hidden_size=hidden_size,
                vocab_size=vocab_size,
                dtype=dtype_name,
                batch_size=batch_size,
                head=head,
                layout=layout,
                rank=r,
                draft_vocab_size=k,
                macs=macs * batch_size,
                mac_limit=limit,
                median_ms=q50 * 1e3,
                p25_ms=q25 * 1e3,
                p75_ms=q75 * 1e3,
                speedup=s50,
                speedup_p25=s25,
                speedup_p75=s75,
                fraction_of_limit=s50 / limit,
                rounds=len(ts),
                times_ms=[t * 1e3 for t in ts],
                device=str(inputs.device),
                bytes_moved=moved,
                bandwidth_gbs=bandwidth,
                fraction_of_bandwidth=bandwidth / peak_bandwidth if peak_bandwidth else float("nan"),
            )
        )
    return rows


__all__ = [
    "PEAK_BANDWIDTH_GBS",
    "SHAPES",
    "head_bytes",
    "peak_bandwidth_gbs",
    "build_heads",
    "fast_low_rank_logits",
    "measure_cell",
]
