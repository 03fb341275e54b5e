# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The timer of the package, and what every timed `generate` call shares.

- [`synchronize`] + [`Timer`]: wall time with `time.perf_counter`, the device synchronised at both ends (CUDA
  kernels run asynchronously; a CPU needs nothing).
- [`median_times`] (round-robin medians: κ, ν) and [`time_interleaved`] (per-round times with rotating order and an
  optional cold cache: `slimspec bench-head`) time bare callables.
- [`encode_prompt`], [`sampling_kwargs`], [`timed_generate`] and [`profile_generation`] are what `slimspec bench`,
  `slimspec generate` and the demo use to time a `generate` call the same way.
"""

import contextlib
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch


def synchronize(device: str | torch.device | None) -> None:
    """Waits for the device's queued kernels (CUDA); a no-op on a CPU."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Timer:
    """`with Timer(device) as t: ...` then `t.seconds`: wall time, the device synchronised at both ends."""

    def __init__(self, device: str | torch.device | None = None):
        self.device = device
        self.seconds = float("nan")

    def __enter__(self) -> "Timer":
        synchronize(self.device)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        synchronize(self.device)
        self.seconds = time.perf_counter() - self._start


def median_times(
    functions: Mapping[str, Callable[[], Any]], repeats: int = 30, warmup: int = 3, device="cpu"
) -> dict[str, float]:
    """Median wall time (s) of each function, measured round-robin so that all share the machine's noise."""
    if repeats < 1:
        raise ValueError(f"`repeats` must be at least 1, got {repeats}.")
    samples: dict[str, list[float]] = {name: [] for name in functions}
    with torch.inference_mode():
        for _ in range(warmup):
            for fn in functions.values():
                fn()
        for _ in range(repeats):
            for name, fn in functions.items():
                with Timer(device) as timer:
                    fn()
                samples[name].append(timer.seconds)
    return {name: statistics.median(values) for name, values in samples.items()}


def time_interleaved(
    functions: dict, inputs: torch.Tensor, rounds: int, warmup: int, flush: torch.Tensor | None = None
) -> dict:
    """Per-round wall-clock seconds of each function; rounds interleave all functions, rotating their order."""
    names = list(functions)
    times = {name: [] for name in names}
    with torch.inference_mode():
        for _ in range(warmup):
            for name in names:
                functions[name](inputs)
        for i in range(rounds):
            order = names[i % len(names) :] + names[: i % len(names)]
            for name in order:
                if flush is not None:
                    flush.add_(1.0)  # evict the last-level cache: the head starts cold, as after a target pass
                with Timer(inputs.device) as timer:
                    functions[name](inputs)
                times[name].append(timer.seconds)
    return times


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(25th, 50th, 75th) percentiles, inclusive method; a single value is all three."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


# ----------------------------------------------------------------------------------------------------------------
# Timed generation
# ----------------------------------------------------------------------------------------------------------------


def encode_prompt(tokenizer, prompt: str, device: str | torch.device | None = None) -> dict[str, torch.Tensor]:
    """Token ids of `prompt` as a user turn, through the tokenizer's chat template when it has one (plain text
    otherwise), on `device` when given."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        inputs = dict(tokenizer(text, add_special_tokens=False, return_tensors="pt"))
    else:
        inputs = dict(tokenizer(prompt, return_tensors="pt"))
    return {k: v.to(device) for k, v in inputs.items()} if device is not None else inputs


def sampling_kwargs(temperature: float | None, top_p: float = 1.0, top_k: int | None = None) -> dict:
    """`generate` kwargs: greedy at temperature 0 (or None), else sampling at `temperature` with `top_p` (and
    `top_k` when given; 0 disables it, which is what the unbiased-sampling benchmark wants)."""
    if not temperature:
        return {"do_sample": False}
    kwargs = {"do_sample": True, "temperature": float(temperature), "top_p": float(top_p)}
    if top_k is not None:
        kwargs["top_k"] = int(top_k)
    return kwargs


@dataclass
class TimedGeneration:
    text: str
    new_tokens: int
    seconds: float
    acceptance_length: float | None = None
    stats: dict | None = None  # the drafter's `last_generation_stats.as_dict()`

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else float("nan")


def timed_generate(target, tokenizer, inputs: dict, drafter=None, streamer=None, **generate_kwargs) -> TimedGeneration:
    """One `target.generate` call (drafted by `drafter` when given), timed; τ and the round statistics are read
    from the drafter's `last_generation_stats`. Other assistants (e.g. `prompt_lookup_num_tokens`) go in
    `generate_kwargs`; `tokenizer=None` skips decoding the text."""
    device = target.device
    inputs = {k: v.to(device) for k, v in inputs.items()}
    extra = {"assistant_model": drafter} if drafter is not None else {}
    with torch.inference_mode(), Timer(device) as timer:
        out = target.generate(**inputs, streamer=streamer, **extra, **generate_kwargs)
    new = out[0, inputs["input_ids"].shape[1] :]
    stats = dict(drafter.last_generation_stats.as_dict()) if drafter is not None else None
    tau = drafter.last_generation_stats.acceptance_length if drafter is not None else None
    text = tokenizer.decode(new, skip_special_tokens=True) if tokenizer is not None else ""
    return TimedGeneration(text, int(new.numel()), timer.seconds, tau, stats)


@contextlib.contextmanager
def _timed_forward(module, totals: dict, key: str):
    """Adds the wall time and the number of calls of `module.forward` to `totals[key]` while active."""
    original = module.forward
    totals.setdefault(key, [0.0, 0])

    def forward(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[key][0] += time.perf_counter() - start
            totals[key][1] += 1

    module.forward = forward  # an instance attribute shadows the class's forward; removed on exit
    try:
        yield
    finally:
        del module.forward


def profile_generation(target, tokenizer, inputs: dict, drafter, **generate_kwargs) -> dict:
    """Splits one assisted `generate` call into target verification, drafter steps (head and the rest) and the
    remaining time — the decoding loop's own Python.

    Returns per-round and per-step milliseconds; rounds = target forwards (the prefill included). The target is
    timed as its decoder layers plus its LM head: the loop runs the head only on the rows it needs.
    """
    totals: dict = {}
    backbone = getattr(target, target.base_model_prefix, target)
    with (
        _timed_forward(backbone, totals, "target"),
        _timed_forward(target.get_output_embeddings(), totals, "target_head"),
        _timed_forward(drafter, totals, "drafter"),
        _timed_forward(drafter.lm_head, totals, "head"),
    ):
        result = timed_generate(target, tokenizer, inputs, drafter=drafter, **generate_kwargs)
    target_s, target_calls = totals["target"]
    target_s += totals.get("target_head", (0.0, 0))[0]
    drafter_s, drafter_calls = totals["drafter"]
    head_s, _ = totals["head"]
    other_s = result.seconds - target_s - drafter_s
    rounds = max(target_calls, 1)
    return {
        "new_tokens": result.new_tokens,
        "seconds": result.seconds,
        "tokens_per_second": result.tokens_per_second,
        "acceptance_length": result.acceptance_length,
        "rounds": target_calls,
        "drafter_steps": drafter_calls,
        "target_ms_per_round": 1e3 * target_s / rounds,
        "drafter_ms_per_round": 1e3 * drafter_s / rounds,
        "drafter_ms_per_step": 1e3 * drafter_s / max(drafter_calls, 1),
        "head_ms_per_step": 1e3 * head_s / max(drafter_calls, 1),
        "other_ms_per_round": 1e3 * other_s / rounds,
        "share": {
            "target": target_s / result.seconds,
            "drafter": drafter_s / result.seconds,
            "other": other_s / result.seconds,
        },
    }


def format_profile(profile: dict) -> str:
    p = profile
    return "\n".join(
        [
            f"[profile] {p['rounds']} target forwards (prefill included), {p['drafter_steps']} drafter forwards",
            f"[profile] per round: target verification {p['target_ms_per_round']:.1f} ms, drafter "
            f"{p['drafter_ms_per_round']:.1f} ms, other (generate loop + generator Python) {p['other_ms_per_round']:.1f} ms",
            f"[profile] per drafter forward: {p['drafter_ms_per_step']:.2f} ms, of which head {p['head_ms_per_step']:.2f} ms",
            f"[profile] time shares: target {p['share']['target']:.0%}, drafter {p['share']['drafter']:.0%}, "
            f"other {p['share']['other']:.0%}",
        ]
    )


__all__ = [
    "synchronize",
    "Timer",
    "median_times",
    "time_interleaved",
    "quartiles",
    "encode_prompt",
    "sampling_kwargs",
    "TimedGeneration",
    "timed_generate",
    "profile_generation",
    "format_profile",
]


# ----------------------------------------------------------------------------------------------------------------
# What verification costs the target
# ----------------------------------------------------------------------------------------------------------------


def verification_costs(
    target, sizes: Sequence[int], context: int = 256, repeats: int = 9, layer_ids=None, batch_size: int = 1
) -> dict:
    """Median seconds of the target's cached forward over n new tokens, for each n in `sizes` (n = 1 is a plain
    decoding step, n = k + 1 verifies k drafted tokens), after `context` cached positions, for `batch_size` rows
    at once; sizes interleaved per repeat. `layer_ids`: also return those hidden states, as speculative decoding
    asks for."""
    import copy

    from transformers import DynamicCache

    from ..verification_slimspec import cache_keyword

    vocab = target.config.get_text_config().vocab_size
    generator = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, vocab, (batch_size, context), generator=generator).to(target.device)
    prefill = DynamicCache(config=target.config)
    extra = {"output_hidden_states": list(layer_ids)} if layer_ids else {}
    samples: dict[int, list[float]] = {n: [] for n in sizes}
    with torch.inference_mode():
        name = cache_keyword(target)
        target(prefix, **{name: prefill}, use_cache=True)
        for _ in range(repeats + 1):  # the first pass warms up and is not kept
            for n in sizes:
                cache = copy.deepcopy(prefill)
                tokens = torch.randint(0, vocab, (batch_size, n), generator=generator).to(target.device)
                with Timer(target.device) as timer:
                    target(tokens, **{name: cache}, use_cache=True, **extra)
                samples[n].append(timer.seconds)
    return {n: statistics.median(values[1:]) for n, values in samples.items()}
