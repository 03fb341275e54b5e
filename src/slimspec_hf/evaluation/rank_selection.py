# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec choose-rank`: pick the head rank r that maximises the predicted speed-up, without training drafters.

For each candidate r the acceptance–cost model needs ν(r) and ρτ(r):

- ν(r) is measured on this machine (a random d→r→V head timed against a random dense V×d head, round-robin),
  or counted in multiply–accumulates with `--nu macs`.
- ρτ(r) comes from a *proxy drafter* fitted in seconds. A drafter does not see the target's final hidden state:
  it builds its own state, and trained drafters reach ρτ ≈ 0.99 at r = d/8 because that state adapts to the head.
  The proxy: a residual state map φ(x) = x + W₂·silu(W₁·x) (W₂ = 0 at start) applied to the target's hidden
  state `proxy_layers` layers below the head (through the target's final norm), followed by a head. Two proxies
  are fitted with the same map, data, steps and optimiser, by KL against the target's logits at the same
  position: one with the full head (initialised to the target's head) and one per rank with rank-r factors
  (initialised by a token- and activation-weighted SVD). Their top-1 agreements with the target on held-out
  positions, a_full and a(r), share the proxy's deficit (a 1-layer map cannot do a decoder layer's work), and
  the chain model τ(α) = Σ_{i=0..k} α^i turns them into ρτ(r) = τ(α_full·a(r)/a_full) / τ(α_full), with
  α_full = a_full unless a measured τ of a full-head drafter is given (`--tau-full`).
- With `--drafter PATH` (a trained drafter, ideally full-head) the proxies read that drafter's own teacher-forced
  step-0 states instead of the target's: the states a drafter's head really sees, built by a decoder layer that
  had a whole training run to learn them, so the fits measure what a rank-r head loses on such states.

The predicted speed-up over the full head is ρτ·(1+κ)/(1+ν·κ) (`cost_model.speedup`), with κ measured on this
machine from the target and a drafter of its shape, or given with `--kappa`.
"""

import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..paths import data_dir
from ..training.head_init import activation_aware_factors, second_moment
from . import cost_model
from .cost_model import nu_macs
from .metrics import low_rank_head, tau_from_acceptance_rate, time_heads


logger = logging.getLogger(__name__)

# Where a head and its hidden states cannot be loaded, ρτ(r) is assumed from the paper's trained Llama-3.1-8B
# drafters (SlimSpec d/16: 0.98, d/8: 0.99) and ρτ = 1 from d/4 up, linear in log2(r/d) in between and below.
PAPER_RHO_TAU = ((1 / 16, 0.98), (1 / 8, 0.99), (1 / 4, 1.0))
FULL_RANK = 0  # `rank` of the full-head reference proxy in `fit_proxy`


@dataclass
class RankCandidate:
    rank: int
    energy: float  # fraction of Σσ² kept by the first r singular values
    nu: float
    agreement: float | None  # a(r): the fitted rank-r proxy's top-1 agreement with the target (test positions)
    svd_agreement: float | None  # the same at the fit's start (weighted SVD, identity map)
    relative_agreement: float | None  # a(r) / a_full, a_full from the full-head proxy fitted the same way
    rho_tau: float
    predicted_speedup: float


@dataclass
class ProxyFit:
    """Top-1 agreement with the target of one proxy head, before and after its fit (best validation checkpoint)."""

    rank: int  # FULL_RANK (0) for the full head
    agreement: float  # test positions, at the kept checkpoint
    initial_agreement: float  # test positions, before the fit
    validation_agreement: float  # validation positions, at the kept checkpoint (≥ the initial one by construction)
    initial_validation_agreement: float
    best_step: int  # 0 when no checkpoint beat the start
    seconds: float


def default_ranks(hidden_size: int, vocab_size: int | None = None) -> list[int]:
    """d/32, d/16, d/12, d/8, d/6, d/4, d/2 (rounded, distinct, ≥ 1)."""
    ranks = sorted({max(1, round(hidden_size / f)) for f in (32, 16, 12, 8, 6, 4, 2)})
    limit = min(hidden_size, vocab_size or hidden_size)
    return [r for r in ranks if r < limit]


def singular_values(weight: torch.Tensor) -> torch.Tensor:
    """Singular values of a V×d head, in fp32 (bf16/fp16 lose the small ones the truncation error depends on)."""
    return torch.linalg.svdvals(weight.detach().float())


def energy(singular: torch.Tensor, rank: int) -> float:
    power = singular.double() ** 2
    return float(power[:rank].sum() / power.sum())


def token_weights_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Mean next-token probability of each vocabulary entry over positions, plus 1/V: the rows top-1 depends on."""
    return F.softmax(logits.float(), dim=-1).mean(0) + 1.0 / logits.shape[-1]


class AdaptedHead(nn.Module):
    """φ(h) followed by a head: φ(h) = h + W₂·silu(W₁·h) with W₂ = 0 at start (so φ starts as the identity).

    `matrices` are applied in order: `(weight,)` for a full V×d head, `(down, up)` for a rank-r head.
    """

    def __init__(self, *matrices: torch.Tensor, seed: int = 0):
        super().__init__()
        d = matrices[0].shape[1]
        self.matrices = nn.ParameterList([nn.Parameter(m.detach().float().clone()) for m in matrices])
        generator = torch.Generator().manual_seed(seed)
        self.map_in = nn.Parameter(torch.randn(d, d, generator=generator) * d**-0.5)
        self.map_out = nn.Parameter(torch.zeros(d, d))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + F.silu(h @ self.map_in.T) @ self.map_out.T
        for matrix in self.matrices:
            h = h @ matrix.T
        return h  # (N, V)

    def param_groups(self, lr: float) -> list[dict]:
        """Adam groups with a step proportional to each matrix's RMS over √fan-in.

        Adam moves every entry by about lr per step whatever its scale; for y = M·x that changes y by about
        lr·RMS(M)·fan-in while y itself is about RMS(M)·√fan-in. Scaling lr by RMS(M)/√fan-in keeps the relative
        change per step near `lr` for every matrix and rank (a fixed lr overshoots the small entries of a wide
        up factor: the r = d/2 fit used to end below its own start).
        """
        d = self.map_in.shape[0]
        groups = [
            {"params": [m], "lr": lr * float(m.detach().pow(2).mean().sqrt()) / math.sqrt(m.shape[1])}
            for m in self.matrices
        ]
        groups.append({"params": [self.map_in, self.map_out], "lr": lr * d**-0.5 / math.sqrt(d)})
        return groups


def _top1_agreement(model: nn.Module, inputs: torch.Tensor, teacher_top1: torch.Tensor, chunk: int = 512) -> float:
    with torch.no_grad():
        hits = sum(
            int((model(inputs[i : i + chunk]).argmax(-1) == teacher_top1[i : i + chunk]).sum())
            for i in range(0, inputs.shape[0], chunk)
        )
    return hits / inputs.shape[0]


def fit_proxy(
    head: AdaptedHead,
    train_inputs: torch.Tensor,
    train_teacher_logprobs: torch.Tensor,
    val_inputs: torch.Tensor,
    val_top1: torch.Tensor,
    test_inputs: torch.Tensor,
    test_top1: torch.Tensor,
    steps: int = 60,
    lr: float = 0.15,
    batch_size: int = 128,
    eval_every: int | None = None,
    warmup_fraction: float = 0.1,
    seed: int = 0,
    rank: int = FULL_RANK,
) -> ProxyFit:
    """KL fit of `head` to the teacher's log-probs; keeps the checkpoint with the best validation top-1.

    Adam with per-matrix relative steps (`AdaptedHead.param_groups`), linear warm-up over `warmup_fraction` of
    the steps, then cosine decay to 0. The start is a candidate checkpoint, so the returned head is never worse
    than its initialisation on the validation positions; the reported `agreement` is on separate test positions.
    """
    start = time.perf_counter()
    if steps < 0:
        raise ValueError(f"`steps` must be ≥ 0, got {steps}.")
    eval_every = eval_every or max(1, steps // 10)
    warmup = max(1, round(warmup_fraction * steps))
    optimizer = torch.optim.Adam(head.param_groups(lr))
    base_lrs = [group["lr"] for group in optimizer.param_groups]
    initial_val = best_val = _top1_agreement(head, val_inputs, val_top1)
    initial_test = _top1_agreement(head, test_inputs, test_top1)
    best_state = {k: v.detach().clone() for k, v in head.state_dict().items()}  # the start is a candidate
    best_step = 0
    generator = torch.Generator().manual_seed(seed)
    n = train_inputs.shape[0]
    for step in range(1, steps + 1):
        if step <= warmup:
            factor = step / warmup
        else:
            factor = 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))
        for group, base in zip(optimizer.param_groups, base_lrs):
            group["lr"] = base * factor
        idx = torch.randint(n, (min(batch_size, n),), generator=generator)
        student = F.log_softmax(head(train_inputs[idx]), dim=-1)
        loss = F.kl_div(student, train_teacher_logprobs[idx], log_target=True, reduction="batchmean")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % eval_every == 0 or step == steps:
            val = _top1_agreement(head, val_inputs, val_top1)
            if val > best_val:
                best_val, best_step = val, step
                best_state = {k: v.detach().clone() for k, v in head.state_dict().items()}
    head.load_state_dict(best_state)
    test = _top1_agreement(head, test_inputs, test_top1)
    return ProxyFit(rank, test, initial_test, best_val, initial_val, best_step, time.perf_counter() - start)


def assumed_rho_tau(rank: int, hidden_size: int) -> float:
    """The paper-anchored ρτ(r) assumption used for shapes whose head cannot be loaded (see PAPER_RHO_TAU)."""
    x = math.log2(rank / hidden_size)
    anchors = [(math.log2(f), v) for f, v in PAPER_RHO_TAU]
    if x >= anchors[-1][0]:
        return 1.0
    for (x0, y0), (x1, y1) in zip(anchors, anchors[1:]):
        if x >= x0:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = anchors[0], anchors[1]  # extrapolate below d/16 with the d/16→d/8 slope
    return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))


def measure_nu(
    hidden_size: int, vocab_size: int, ranks: list[int], mode: str = "time", repeats: int = 30, dtype=torch.float32
) -> dict[int, float]:
    """ν(r) per rank: timed on this machine (`mode="time"`) or counted in MACs (`mode="macs"`)."""
    if mode == "macs":
        return {r: nu_macs(r, hidden_size, vocab_size) for r in ranks}
    if mode != "time":
        raise ValueError(f"`mode` must be 'time' or 'macs', got {mode!r}.")
    heads = {str(r): low_rank_head(hidden_size, vocab_size, r, dtype=dtype) for r in ranks}
    times = time_heads(heads, hidden_size, vocab_size, repeats=repeats, dtype=dtype)
    return {r: times[str(r)]["nu"] for r in ranks}


def rho_tau_from_agreements(
    agreement: float, full_agreement: float, num_assistant_tokens: int, acceptance_rate: float | None = None
) -> float:
    """ρτ(r) = τ(α_r) / τ(α_full) under the chain model τ(α) = Σ_{i=0..k} α^i, with α_r = α_full·a(r)/a_full.

    `agreement` a(r) and `full_agreement` a_full are the top-1 agreements with the target of the rank-r and the
    full-head proxies fitted the same way; their ratio is the fraction of the full head's accepted tokens the rank-r
    head keeps. α_full is `acceptance_rate` (a measured full-head drafter's α) or, when None, a_full itself.
    """
    if not 0 < full_agreement <= 1:
        raise ValueError(
            f"`full_agreement` must lie in (0, 1], got {full_agreement}; the full-head proxy agrees nowhere."
        )
    alpha_full = full_agreement if acceptance_rate is None else acceptance_rate
    if not 0 < alpha_full <= 1:
        raise ValueError(f"`acceptance_rate` must lie in (0, 1], got {acceptance_rate}.")
    alpha = min(1.0, alpha_full * agreement / full_agreement)
    k = num_assistant_tokens
    return tau_from_acceptance_rate(alpha, k) / tau_from_acceptance_rate(alpha_full, k)


@dataclass
class _ProxyData:
    """What every proxy fit of one `choose_rank` call shares (built by `_prepare_proxy_data`)."""

    start: torch.Tensor  # V×d fp32, the head every proxy starts from
    singular: torch.Tensor  # its singular values
    token_weights: torch.Tensor  # V, the token weights of its weighted SVD
    splits: dict[str, torch.Tensor]  # `fit_proxy`'s train / validation / test inputs and teacher targets
    fit_kwargs: dict  # `fit_proxy`'s steps, lr, batch_size and seed

    def fit_full_head(self) -> ProxyFit:
        """Fit and log the full-head reference proxy, started from `start` itself."""
        head = AdaptedHead(self.start, seed=self.fit_kwargs["seed"])
        fit = fit_proxy(head, **self.splits, **self.fit_kwargs, rank=FULL_RANK)
        logger.info(
            "full head: top-1 %.3f → %.3f (best step %d) in %.1fs",
            fit.initial_agreement,
            fit.agreement,
            fit.best_step,
            fit.seconds,
        )
        return fit

    def fit_rank(self, rank: int) -> ProxyFit:
        """Fit and log the rank-r proxy, started from the token- and activation-weighted SVD of `start`."""
        moment = second_moment(self.splits["train_inputs"])
        down, up = activation_aware_factors(self.start, moment, rank, token_weights=self.token_weights)
        head = AdaptedHead(down, up, seed=self.fit_kwargs["seed"])
        fit = fit_proxy(head, **self.splits, **self.fit_kwargs, rank=rank)
        logger.info(
            "rank %d: top-1 %.3f → %.3f (best step %d) in %.1fs",
            rank,
            fit.initial_agreement,
            fit.agreement,
            fit.best_step,
            fit.seconds,
        )
        return fit


def _checked_proxy_states(
    weight: torch.Tensor,
    hidden_states: torch.Tensor | None,
    proxy_states: torch.Tensor | None,
    eval_fraction: float,
) -> tuple[torch.Tensor, int]:
    """(proxy states, positions held out for each of validation and test), after checking the states.

    The proxy states default to `hidden_states`; both must be N×d over the same positions, with d the head's, and
    `eval_fraction` of them must leave every split non-empty.
    """
    if hidden_states is None:
        raise ValueError("`hidden_states` (N×d inputs of the head) are required with `weight`.")
    proxy_states = hidden_states if proxy_states is None else proxy_states
    for name, states in (("hidden_states", hidden_states), ("proxy_states", proxy_states)):
        if states.dim() != 2 or states.shape[-1] != weight.shape[1]:
            raise ValueError(
                f"`{name}` must be N×d with d = {weight.shape[1]} (the head's), got {tuple(states.shape)}."
            )
    if proxy_states.shape[0] != hidden_states.shape[0]:
        raise ValueError(
            f"`proxy_states` ({proxy_states.shape[0]} positions) and `hidden_states` ({hidden_states.shape[0]}) "
            "must come from the same positions."
        )
    n_held = int(eval_fraction * hidden_states.shape[0]) // 2
    if n_held < 1 or hidden_states.shape[0] - 2 * n_held < 1:
        raise ValueError(
            f"{hidden_states.shape[0]} positions with `eval_fraction` = {eval_fraction} leave an empty "
            "train, validation or test split; give more positions."
        )
    return proxy_states, n_held


def _prepare_proxy_data(
    weight: torch.Tensor,
    hidden_states: torch.Tensor | None,
    proxy_states: torch.Tensor | None,
    proxy_weight: torch.Tensor | None,
    eval_fraction: float,
    fit_kwargs: dict,
) -> _ProxyData:
    """The checked inputs of every proxy fit, with the positions split at random (seed `fit_kwargs["seed"]`).

    The splits are test / validation (`eval_fraction` of the positions, in two halves) / train. The proxies read
    `proxy_states`; their teacher is `weight` on `hidden_states`: log-probs on train, top-1 on the held-out splits.
    """
    proxy_states, n_held = _checked_proxy_states(weight, hidden_states, proxy_states, eval_fraction)
    weight = weight.detach().float()
    start = weight if proxy_weight is None else proxy_weight.detach().float()
    if start.shape != weight.shape:
        raise ValueError(f"`proxy_weight` must be V×d like `weight` {tuple(weight.shape)}, got {tuple(start.shape)}.")
    singular = singular_values(start)
    generator = torch.Generator().manual_seed(fit_kwargs["seed"])
    order = torch.randperm(hidden_states.shape[0], generator=generator)
    test_idx, val_idx, train_idx = order[:n_held], order[n_held : 2 * n_held], order[2 * n_held :]
    with torch.no_grad():
        train_logits = hidden_states[train_idx].float() @ weight.T
        token_weights = token_weights_from_logits(train_logits)
        train_teacher = F.log_softmax(train_logits, dim=-1)
        del train_logits
        val_top1 = (hidden_states[val_idx].float() @ weight.T).argmax(-1)
        test_top1 = (hidden_states[test_idx].float() @ weight.T).argmax(-1)
    x = proxy_states.float()
    splits = dict(
        train_inputs=x[train_idx],
        train_teacher_logprobs=train_teacher,
        val_inputs=x[val_idx],
        val_top1=val_top1,
        test_inputs=x[test_idx],
        test_top1=test_top1,
    )
    return _ProxyData(start, singular, token_weights, splits, fit_kwargs)


def _check_rank(rank: int, hidden_size: int) -> None:
    """Raise unless 0 < `rank` < `hidden_size`."""
    if not 0 < rank < hidden_size:
        raise ValueError(f"rank {rank} must satisfy 0 < rank < hidden_size = {hidden_size}.")


def _fitted_candidates(
    ranks: list[int],
    nu_by_rank: dict[int, float],
    kappa: float,
    data: _ProxyData,
    reference: ProxyFit,
    num_assistant_tokens: int,
    acceptance_rate: float | None,
) -> list[RankCandidate]:
    """One row per rank, ρτ(r) from its proxy's agreement relative to the full-head `reference` proxy's."""
    rows = []
    for rank in ranks:
        _check_rank(rank, data.start.shape[1])
        fit = data.fit_rank(rank)
        relative = fit.agreement / reference.agreement
        rho = rho_tau_from_agreements(fit.agreement, reference.agreement, num_assistant_tokens, acceptance_rate)
        kept = energy(data.singular, rank)
        nu_r = nu_by_rank[rank]
        rows.append(
            RankCandidate(
                rank=rank,
                energy=kept,
                nu=nu_r,
                agreement=fit.agreement,
                svd_agreement=fit.initial_agreement,
                relative_agreement=relative,
                rho_tau=rho,
                predicted_speedup=cost_model.speedup(rho, nu_r, kappa),
            )
        )
    return rows


def _assumed_candidates(
    ranks: list[int], nu_by_rank: dict[int, float], kappa: float, hidden_size: int
) -> list[RankCandidate]:
    """One row per rank, ρτ(r) the paper-anchored assumption (`assumed_rho_tau`); no energy nor agreements."""
    rows = []
    for rank in ranks:
        _check_rank(rank, hidden_size)
        rho = assumed_rho_tau(rank, hidden_size)
        nu_r = nu_by_rank[rank]
        rows.append(
            RankCandidate(
                rank=rank,
                energy=float("nan"),
                nu=nu_r,
                agreement=None,
                svd_agreement=None,
                relative_agreement=None,
                rho_tau=rho,
                predicted_speedup=cost_model.speedup(rho, nu_r, kappa),
            )
        )
    return rows


def choose_rank(
    ranks: list[int],
    nu_by_rank: dict[int, float],
    kappa: float,
    weight: torch.Tensor | None = None,
    hidden_states: torch.Tensor | None = None,
    proxy_states: torch.Tensor | None = None,
    proxy_weight: torch.Tensor | None = None,
    hidden_size: int | None = None,
    acceptance_rate: float | None = None,
    num_assistant_tokens: int = 6,
    steps: int = 60,
    lr: float = 0.15,
    batch_size: int = 128,
    eval_fraction: float = 0.35,
    seed: int = 0,
) -> tuple[RankCandidate, list[RankCandidate], ProxyFit | None]:
    """The rank with the highest predicted speed-up, the table behind the choice, and the full-head reference fit.

    With `weight` (V×d) and `hidden_states` (N×d inputs of that head) ρτ(r) comes from the proxy fits: the
    proxies read `proxy_states` (N×d, the target's state some layers below the head, default `hidden_states`)
    and are fitted to `weight`'s logits on `hidden_states`; positions are split into train / validation (picks
    the checkpoint) / test (reported), `eval_fraction` held out in two halves. The proxies start from
    `proxy_weight` (V×d, default `weight`: e.g. a drafter's own head when they read that drafter's states) and
    its token- and activation-weighted SVD. Without them, ρτ(r) is the paper-anchored assumption
    `assumed_rho_tau` (then `hidden_size` is required) and the reference is None.
    """
    if not ranks:
        raise ValueError("`ranks` is empty; give at least one candidate rank.")
    if acceptance_rate is not None and not 0 < acceptance_rate <= 1:
        raise ValueError(f"`acceptance_rate` must lie in (0, 1], got {acceptance_rate}.")
    if weight is not None:
        fit_kwargs = dict(steps=steps, lr=lr, batch_size=batch_size, seed=seed)
        data = _prepare_proxy_data(weight, hidden_states, proxy_states, proxy_weight, eval_fraction, fit_kwargs)
        reference = data.fit_full_head()
        rows = _fitted_candidates(ranks, nu_by_rank, kappa, data, reference, num_assistant_tokens, acceptance_rate)
    elif hidden_size is None:
        raise ValueError("Pass `weight` and `hidden_states`, or `hidden_size` for the assumed ρτ(r).")
    else:
        reference = None
        rows = _assumed_candidates(ranks, nu_by_rank, kappa, hidden_size)
    best = max(rows, key=lambda c: c.predicted_speedup)
    return best, rows, reference


def render_table(
    rows: list[RankCandidate], best: RankCandidate, kappa: float, hidden_size: int, reference: ProxyFit | None = None
) -> str:
    fmt = lambda v, d=3: "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{d}f}"  # noqa: E731
    lines = [f"κ = {kappa:.3f}; break-even ρτ = (1+νκ)/(1+κ)"]
    if reference is not None:
        lines += [
            "proxy top-1 = agreement with the target's top-1 on held-out positions of a state map + head fitted the",
            "same way for every head; ρτ = τ(α_full·a/a_full)/τ(α_full). It ranks heads under a short fit, it is not",
            "a trained drafter's ρτ (a trained rank-r head closes more of the gap).",
        ]
    lines += [
        "| rank | r/d | energy | ν | proxy top-1 start | proxy top-1 fitted (a) | a/a_full | ρτ | break-even ρτ "
        "| predicted speed-up |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    if reference is not None:
        lines.append(
            f"| full | 1 | 1.000 | 1.000 | {fmt(reference.initial_agreement)} | {fmt(reference.agreement)} | 1.000 "
            f"| 1.000 | 1.000 | 1.000 |"
        )
    for c in rows:
        mark = " ←" if c.rank == best.rank else ""
        lines.append(
            f"| {c.rank}{mark} | 1/{hidden_size / c.rank:.3g} | {fmt(c.energy)} | {fmt(c.nu)} | {fmt(c.svd_agreement)} "
            f"| {fmt(c.agreement)} | {fmt(c.relative_agreement)} | {fmt(c.rho_tau)} "
            f"| {fmt(cost_model.break_even_rho_tau(c.nu, kappa))} | {fmt(c.predicted_speedup)} |"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------
# inputs from a real target
# ----------------------------------------------------------------------------------------------------------------


@torch.no_grad()  # not inference_mode: the states are inputs of the autograd fits
def head_inputs_from_sequences(target, sequences, proxy_layers: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs of the target's LM head, proxy inputs), both N×d fp32, over all positions of `sequences`.

    The proxy input is the output of the decoder layer `proxy_layers` below the last one, through the target's
    final norm (`proxy_layers = 0`: the head's own input).
    """
    decoder = target.get_decoder()
    layers, norm = getattr(decoder, "layers", None), getattr(decoder, "norm", None)
    num_layers = len(layers) if layers is not None else 0
    if proxy_layers and (norm is None or not 0 <= proxy_layers < num_layers):
        raise ValueError(
            f"`proxy_layers` must lie in [0, {num_layers}) for a decoder with `layers` and a final `norm`, got "
            f"{proxy_layers}; use 0 (the head's own input) for other architectures."
        )
    if proxy_layers < 0:
        raise ValueError(f"`proxy_layers` must be ≥ 0, got {proxy_layers}.")
    captured = {}
    hooks = [
        target.get_output_embeddings().register_forward_hook(
            lambda module, args, out: captured.__setitem__("head", args[0].detach())
        )
    ]
    if proxy_layers:
        hooks.append(
            layers[num_layers - 1 - proxy_layers].register_forward_hook(
                lambda module, args, out: captured.__setitem__(
                    "proxy", (out[0] if isinstance(out, tuple) else out).detach()
                )
            )
        )
    heads, proxies = [], []
    try:
        for sequence in sequences:
            captured.clear()
            target(input_ids=sequence.to(target.device).view(1, -1), logits_to_keep=0)
            heads.append(captured["head"][0].float().cpu())
            proxies.append(norm(captured["proxy"])[0].float().cpu() if proxy_layers else heads[-1])
    finally:
        for hook in hooks:
            hook.remove()
    return torch.cat(heads), torch.cat(proxies)


@torch.no_grad()
def drafter_states_from_sequences(target, drafter, sequences) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs of the target's LM head, a trained drafter's head inputs), both N×d fp32, teacher-forced, step 0.

    At position t the drafter reads the target's fused features at t and token t+1, and its state predicts token
    t+2: the target's prediction at t+1. So row i pairs the drafter's normed state at t with the target's head
    input at t+1 (N = Σ (len − 1) over `sequences`). These are the states of a drafter that has learnt to build
    them, the realistic input of a drafter's head, which a proxy reading the target's own state is not.
    """
    from ..configuration_slimspec import validate_pairing
    from ..targets import target_features

    validate_pairing(drafter, target)
    if drafter.config.hidden_size != target.get_output_embeddings().weight.shape[1]:
        raise ValueError(
            f"`--drafter` has hidden_size {drafter.config.hidden_size} but the target's head reads "
            f"{target.get_output_embeddings().weight.shape[1]}: the proxies need both heads over the same width."
        )
    layer_ids = list(drafter.config.target_layer_ids)
    heads, states = [], []
    for sequence in sequences:
        ids = sequence.to(target.device).view(1, -1)
        if ids.shape[1] < 2:
            continue
        features, final = target_features(target, ids, layer_ids)
        drafted = drafter(input_ids=ids[:, 1:], target_features=features[:, :-1], logits_to_keep=-1).hidden_states
        heads.append(final[0, 1:].float().cpu())
        states.append(drafter.head_states(drafted)[0].float().cpu())
    if not heads:
        raise ValueError("Every sequence is shorter than 2 tokens: nothing for the drafter to predict.")
    return torch.cat(heads), torch.cat(states)


@torch.no_grad()
def generate_sequences(
    target, tokenizer, prompts: list[str], num_positions: int = 1536, max_new_tokens: int = 32
) -> list[torch.Tensor]:
    """Prompts followed by the target's own greedy answers, until they hold ≥ `num_positions` tokens."""
    from .timing import encode_prompt

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    sequences, total = [], 0
    for prompt in prompts:
        inputs = {k: v.to(target.device) for k, v in encode_prompt(tokenizer, prompt).items()}
        sequence = target.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad_id)
        sequences.append(sequence[0])
        total += sequence.shape[1]
        if total >= num_positions:
            break
    return sequences


@torch.no_grad()
def collect_head_inputs(
    target,
    tokenizer,
    prompts: list[str],
    num_positions: int = 1536,
    max_new_tokens: int = 32,
    proxy_layers: int = 1,
    drafter=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(head inputs, proxy inputs), ≤ `num_positions` each, on prompts and the target's greedy answers to them.

    The proxy inputs are the target's state `proxy_layers` below its head (`head_inputs_from_sequences`) or, with
    `drafter`, that drafter's own states (`drafter_states_from_sequences`).
    """
    sequences = generate_sequences(target, tokenizer, prompts, num_positions, max_new_tokens)
    if drafter is not None:
        heads, proxies = drafter_states_from_sequences(target, drafter, sequences)
    else:
        heads, proxies = head_inputs_from_sequences(target, sequences, proxy_layers)
    return heads[:num_positions], proxies[:num_positions]


@torch.no_grad()
def drafter_head_weight(drafter) -> torch.Tensor | None:
    """A drafter's head as a dense V×d matrix (full: its weight; low-rank: W_up·W_down), or None (trimmed, target).

    The proxies that read a drafter's states start from it: the target's own head means nothing on those states.
    """
    head = drafter.get_output_embeddings()
    if hasattr(head, "merged_weight"):
        return head.merged_weight().float()
    weight = getattr(head, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.shape[0] == drafter.config.vocab_size:
        return weight.detach().float()
    return None


def load_head_weight(path: str | os.PathLike) -> torch.Tensor:
    """A full head's V×d weight from a drafter folder (`lm_head.weight`) or a safetensors file."""
    from safetensors.torch import load_file

    path = Path(path)
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files or files[0].suffix != ".safetensors":
        raise ValueError(f"`--head` must be a drafter folder with safetensors or a .safetensors file, got {path}.")
    for file in files:
        tensors = load_file(file)
        for key in ("lm_head.weight", "weight"):
            if key in tensors and tensors[key].dim() == 2:
                return tensors[key]
    raise ValueError(f"No 2-D `lm_head.weight` (or `weight`) in {[str(f) for f in files]}; is it a full head?")


def measure_kappa(target, num_assistant_tokens: int, context_length: int = 256, repeats: int = 20) -> dict:
    """κ from the target and a (random) full-head drafter of its shape, on this machine."""
    from ..configuration_slimspec import SlimSpecDrafterConfig
    from ..modeling_slimspec import SlimSpecDrafterForCausalLM
    from .metrics import measure_round_costs

    config = SlimSpecDrafterConfig.from_target_config(target.config, head_type="full")
    drafter = SlimSpecDrafterForCausalLM(config).to(device=target.device, dtype=target.dtype).eval()
    drafter.attach_target(target)
    return measure_round_costs(target, drafter, context_length, num_assistant_tokens, repeats=repeats)


def _training_prompts(limit: int) -> list[str]:
    path = data_dir() / "train" / "prompts_balanced_4k.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"No training prompts at {path}; set SLIMSPEC_DATA to the shared data folder.")
    rows = [json.loads(line) for line in path.read_text().splitlines()[: 4 * limit] if line.strip()]
    # a fixed spread of sources: every 4th row
    return [r["turns"][0] for r in rows[::4]][:limit]


__all__ = [
    "RankCandidate",
    "default_ranks",
    "singular_values",
    "energy",
    "ProxyFit",
    "token_weights_from_logits",
    "AdaptedHead",
    "fit_proxy",
    "rho_tau_from_agreements",
    "assumed_rho_tau",
    "measure_nu",
    "choose_rank",
    "render_table",
    "head_inputs_from_sequences",
    "collect_head_inputs",
    "load_head_weight",
    "measure_kappa",
]
