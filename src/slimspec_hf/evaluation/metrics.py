# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The paper's measurements: acceptance length τ, relative acceptance ρτ, relative head cost ν, head share κ.

- τ (acceptance length): tokens produced per target verification, (accepted drafts + rounds) / rounds.
- ρτ = τ_head / τ_full: a head's acceptance length relative to the full head's (same backbone, same data).
- ν = T_head / T_head_full: a head's time relative to the full V×d head's, measured on this machine.
- κ = k·T_head_full / T_non_head: the full head's share of a round (k drafter steps + one verification),
  relative to everything else in the round (see `cost_model`).

Timing helpers measure these on synthetic inputs of the real shapes; `measure_round_costs` gives the drafter-step
breakdown (T_head, T_head_full, T_backbone per step and T_verify per round).
"""

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ..heads_slimspec import FullHead, fit_layout
from .timing import Timer, median_times


# ----------------------------------------------------------------------------------------------------------------
# τ, ρτ, ν, κ
# ----------------------------------------------------------------------------------------------------------------


def acceptance_length(accepted_tokens: int | Sequence[int], rounds: int | Sequence[int]) -> float:
    """τ = (accepted + rounds) / rounds, pooled over generations when given sequences (one entry per `generate`)."""
    accepted = sum(accepted_tokens) if isinstance(accepted_tokens, Sequence) else accepted_tokens
    total_rounds = sum(rounds) if isinstance(rounds, Sequence) else rounds
    if total_rounds < 0 or accepted < 0:
        raise ValueError(f"`accepted_tokens` ({accepted}) and `rounds` ({total_rounds}) must be non-negative.")
    if total_rounds == 0:
        return float("nan")
    return (accepted + total_rounds) / total_rounds


def pooled_acceptance_length(stats: Iterable[Any]) -> float:
    """τ pooled over several `generate` calls; each item is a `SlimSpecGenerationStats` or its `as_dict()`."""
    accepted, rounds = 0, 0
    for item in stats:
        item = item.as_dict() if hasattr(item, "as_dict") else item
        accepted += int(item["accepted_tokens"])
        rounds += int(item["rounds"])
    return acceptance_length(accepted, rounds)


def rho_tau(tau: float, tau_full: float) -> float:
    """ρτ = τ_head / τ_full."""
    if not tau_full > 0:
        raise ValueError(f"`tau_full` must be positive (the full head's acceptance length), got {tau_full}.")
    return float(tau) / float(tau_full)


def nu(t_head: float, t_head_full: float) -> float:
    """ν = T_head / T_head_full."""
    if not t_head_full > 0:
        raise ValueError(f"`t_head_full` must be a positive time, got {t_head_full}.")
    return float(t_head) / float(t_head_full)


def kappa(t_head_full: float, t_non_head: float, num_assistant_tokens: int = 1) -> float:
    """κ = k·T_head_full / T_non_head, with T_head_full per drafter step and T_non_head per round."""
    if not t_non_head > 0:
        raise ValueError(f"`t_non_head` must be a positive time, got {t_non_head}.")
    if num_assistant_tokens < 1:
        raise ValueError(f"`num_assistant_tokens` must be at least 1, got {num_assistant_tokens}.")
    return num_assistant_tokens * float(t_head_full) / float(t_non_head)


def tau_from_acceptance_rate(alpha: float, num_assistant_tokens: int) -> float:
    """τ of a chain of k drafts with independent per-token acceptance α: Σ_{i=0..k} α^i."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"`alpha` must lie in [0, 1], got {alpha}.")
    return sum(alpha**i for i in range(num_assistant_tokens + 1))


def acceptance_rate_from_tau(tau: float, num_assistant_tokens: int) -> float:
    """The per-token acceptance α with `tau_from_acceptance_rate(α, k) == tau` (bisection)."""
    k = num_assistant_tokens
    if not 1.0 <= tau <= k + 1:
        raise ValueError(f"`tau` must lie in [1, k + 1 = {k + 1}] for k = {k} drafted tokens, got {tau}.")
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if tau_from_acceptance_rate(mid, k) < tau:
            low = mid
        else:
            high = mid
    return (low + high) / 2


# ----------------------------------------------------------------------------------------------------------------
# Results in the form a model card turns into `model-index` entries
# ----------------------------------------------------------------------------------------------------------------


def model_index_entry(
    acceptance_length: float,
    dataset: str = "Spec-Bench",
    rho_tau: float | None = None,
    speedup: float | None = None,
    nu: float | None = None,
    kappa: float | None = None,
    temperature: float = 0.0,
    hardware: str | None = None,
    **extra,
) -> dict:
    """A flat dict `{"acceptance_length", "rho_tau", "speedup", "nu", "kappa", "dataset", "temperature", ...}`.

    Values that were not measured are left out rather than filled in. `hub.py` maps each key to a
    `model-index` metric (`type` = key, `value` = value) under the dataset `dataset`.
    """
    entry = {"dataset": dataset, "temperature": float(temperature), "acceptance_length": float(acceptance_length)}
    for key, value in (("rho_tau", rho_tau), ("speedup", speedup), ("nu", nu), ("kappa", kappa)):
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            entry[key] = float(value)
    if hardware:
        entry["hardware"] = hardware
    entry.update(extra)
    return entry


# ----------------------------------------------------------------------------------------------------------------
# Timing on this machine
# ----------------------------------------------------------------------------------------------------------------


def dense_head(hidden_size: int, vocab_size: int, dtype=torch.float32, device="cpu") -> nn.Linear:
    """A random V×d dense head: the full-head reference T_head_full is timed on it (its values do not matter)."""
    head = nn.Linear(hidden_size, vocab_size, bias=False, device=device, dtype=dtype)
    nn.init.normal_(head.weight, std=0.02)
    return head.eval()


def low_rank_head(hidden_size: int, vocab_size: int, rank: int, dtype=torch.float32, device="cpu") -> nn.Module:
    """A random rank-r head d→r→V (two bias-free linears), the same computation as `LowRankHead`."""
    head = nn.Sequential(
        nn.Linear(hidden_size, rank, bias=False, device=device, dtype=dtype),
        nn.Linear(rank, vocab_size, bias=False, device=device, dtype=dtype),
    )
    for layer in head:
        nn.init.normal_(layer.weight, std=0.02)
    return head.eval()


def time_heads(
    heads: Mapping[str, nn.Module],
    hidden_size: int,
    vocab_size: int | None = None,
    repeats: int = 50,
    warmup: int = 5,
    dtype=torch.float32,
    device="cpu",
) -> dict[str, dict[str, float]]:
    """T_head and ν of each head on one decoding position (1, 1, d), against a random dense V×d head.

    Returns `{name: {"t_head": s, "nu": ν}}` plus `"full": {"t_head": T_head_full, "nu": 1.0}`.
    """
    if vocab_size is None:
        raise ValueError("`vocab_size` is required to build the full-head reference.")
    full = dense_head(hidden_size, vocab_size, dtype=dtype, device=device)
    x = torch.randn(1, 1, hidden_size, dtype=dtype, device=device)
    functions = {"full": lambda: full(x)}
    for name, head in heads.items():
        functions[name] = lambda head=head: head(x)
    times = median_times(functions, repeats=repeats, warmup=warmup, device=device)
    return {name: {"t_head": t, "nu": t / times["full"]} for name, t in times.items()}


@torch.inference_mode()
def measure_round_costs(
    target: nn.Module,
    drafter: nn.Module,
    context_length: int = 256,
    num_assistant_tokens: int | None = None,
    repeats: int = 20,
    warmup: int = 3,
) -> dict[str, float]:
    """The drafter-step breakdown on synthetic inputs of the real shapes, timed round-robin.

    - `t_head`: the drafter's head on one position, per draft step of a chain round as decoding runs it (a
      verification, then k drafter steps, each its backbone and its head; the mean of each step's median);
      `t_head_full`: the same for a random dense V×d head, same dtype/device, its rounds alternating with the
      head's. `t_head_first` / `t_head_full_first`: the first step's alone, right after the target's pass. A head
      whose weight fits the last-level cache reads it from there from the second step on (Gemma-3-270M's rank-80
      factor, 42 MB in bf16, on a Xeon: 3.3 ms in the first step, 1.9-2.3 in the later ones; the dense 335 MB head
      21.6 in every step).
    - `t_backbone`: one drafter step without its head (embedding, fuse, decoder layer, final norm) with a cache
      of `context_length` positions.
    - `t_verify`: the target's forward over k + 1 tokens after `context_length` cached ones, returning the
      hidden states the drafter reads.

    Per round, T_non_head = t_verify + k·t_backbone, so κ = k·t_head_full / T_non_head and ν = t_head /
    t_head_full (`nu_first`: the first step's). Also returns `kappa_drafter` = t_head_full / t_backbone (the head's
    share of a drafter step). k is `num_assistant_tokens`, by default the depth the drafter was trained with
    (`ttt_steps`; 3 if it records none).
    """
    from ..cache_slimspec import SlimSpecDrafterCache
    from ..verification_slimspec import cache_keyword

    cfg = drafter.config
    k = int(num_assistant_tokens or cfg.ttt_steps or 3)
    device = next(drafter.parameters()).device
    dtype = next(drafter.parameters()).dtype
    if context_length < 1:
        raise ValueError(f"`context_length` must be at least 1, got {context_length}.")
    if drafter.get_input_embeddings() is None:
        drafter.attach_target(target)
    generator = torch.Generator().manual_seed(0)
    vocab = cfg.vocab_size

    # target: a cache of `context_length` positions, then k + 1 new tokens, cropped back after each timing
    context_ids = torch.randint(vocab, (1, context_length), generator=generator).to(target.device)
    target_out = target(input_ids=context_ids, use_cache=True)
    cache_kwarg = cache_keyword(target)  # the output's field has the same name
    past = target_out[cache_kwarg]
    verify_ids = torch.randint(vocab, (1, k + 1), generator=generator).to(target.device)
    layer_ids = list(cfg.target_layer_ids)

    def verify():
        target(input_ids=verify_ids, use_cache=True, output_hidden_states=layer_ids, **{cache_kwarg: past})
        past.crop(-(k + 1))

    # drafter: cache of `context_length` positions from target features, then one own-state step
    cache = SlimSpecDrafterCache()
    features = torch.randn(1, context_length, 3 * cfg.target_hidden_size, generator=generator).to(device, dtype)
    tokens = torch.randint(vocab, (1, context_length), generator=generator).to(device)
    drafter(input_ids=tokens, target_features=features, cache=cache, use_cache=True, logits_to_keep=-1)
    step_token = tokens[:, -1:]
    step_state = torch.randn(1, 1, cfg.hidden_size, generator=generator).to(device, dtype)

    def backbone():
        drafter(input_ids=step_token, hidden_states=step_state, cache=cache, use_cache=True, logits_to_keep=-1)
        cache.crop(context_length)

    full = FullHead(cfg.hidden_size, vocab, device=device, dtype=dtype).eval()  # the drafter's kernels, random
    nn.init.normal_(full.weight, std=0.02)
    x = torch.randn(1, 1, cfg.hidden_size, generator=generator).to(device, dtype)
    head = drafter.lm_head
    fit_layout(full.weight)  # both heads in the memory order they decode in here (`attach_target` fits the drafter's)
    if hasattr(head, "fit_layout"):
        head.fit_layout()
    times = median_times({"t_verify": verify, "t_backbone": backbone}, repeats=repeats, warmup=warmup, device=device)

    def chain_round(head_fn) -> list[float]:
        """A verification, then k drafter steps: each head's time."""
        verify()
        seconds = []
        for _ in range(k):
            drafter(input_ids=step_token, hidden_states=step_state, cache=cache, use_cache=True, logits_to_keep=-1)
            with Timer(device) as timer:
                head_fn()
            seconds.append(timer.seconds)
        cache.crop(context_length)
        return seconds

    heads = {"t_head": lambda: head(x), "t_head_full": lambda: full(x)}
    steps = {name: [] for name in heads}
    with torch.inference_mode():
        for _ in range(warmup):
            for fn in heads.values():
                chain_round(fn)
        for i in range(repeats):
            for name in list(heads)[:: 1 if i % 2 else -1]:
                steps[name].append(chain_round(heads[name]))
    for name, rounds in steps.items():
        medians = [statistics.median(column) for column in zip(*rounds)]
        times[name], times[f"{name}_first"] = sum(medians) / k, medians[0]
    t_non_head = times["t_verify"] + k * times["t_backbone"]
    return {
        **times,
        "t_non_head": t_non_head,
        "num_assistant_tokens": k,
        "context_length": context_length,
        "nu": nu(times["t_head"], times["t_head_full"]),
        "nu_first": nu(times["t_head_first"], times["t_head_full_first"]),
        "kappa": kappa(times["t_head_full"], t_non_head, k),
        "kappa_drafter": times["t_head_full"] / times["t_backbone"],
    }


__all__ = [
    "acceptance_length",
    "pooled_acceptance_length",
    "rho_tau",
    "nu",
    "kappa",
    "tau_from_acceptance_rate",
    "acceptance_rate_from_tau",
    "model_index_entry",
    "dense_head",
    "low_rank_head",
    "time_heads",
    "measure_round_costs",
]
