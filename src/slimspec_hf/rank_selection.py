# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec choose-rank`: pick the head rank r that maximises the predicted speed-up, without training drafters.

For each candidate r the acceptance–cost model needs ν(r) and ρτ(r):

- ν(r) is measured on this machine (a random d→r→V head timed against a random dense V×d head, round-robin),
  or counted in multiply–accumulates with `--nu macs`.
- ρτ(r) must account for adaptation. A plain rank-r SVD of the head (even the activation-aware one, SVD of
  W·C^½ with C the second moment of the head's inputs) keeps the teacher's top-1 on few positions, yet trained
  drafters reach ρτ ≈ 0.99 at r = d/8 because the drafter learns the hidden state its head needs. So each rank is
  given a short fit: rank-r factors (initialised activation-aware) plus a residual d×d map φ(h) = h + W₂·silu(W₁·h)
  in front of them, standing in for the drafter's freedom to move its state, trained on cached hidden states of
  the target against the full head's logits (KL). The top-1 agreement a(r) on held-out positions is turned into
  ρτ with the chain model τ(α) = Σ_{i=0..k} α^i: α(r) = α_full·a(r), ρτ(r) = τ(α(r)) / τ(α_full), where α_full is
  the full-head drafter's per-token acceptance (from `--tau-full` when known, else an explicit assumption).

The predicted speed-up over the full head is ρτ·(1+κ)/(1+ν·κ) (`cost_model.speedup`), with κ measured on this
machine from the target and a drafter of its shape, or given with `--kappa`.
"""

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import cost_model
from .metrics import acceptance_rate_from_tau, low_rank_head, nu_macs, tau_from_acceptance_rate, time_heads


logger = logging.getLogger(__name__)

DEFAULT_ACCEPTANCE_RATE = 0.8  # α_full assumed when no measured τ of a full-head drafter is given
# Where a head and its hidden states cannot be loaded, ρτ(r) is assumed from the paper's trained Llama-3.1-8B
# drafters (SlimSpec d/16: 0.98, d/8: 0.99) and ρτ = 1 from d/4 up, linear in log2(r/d) in between and below.
PAPER_RHO_TAU = ((1 / 16, 0.98), (1 / 8, 0.99), (1 / 4, 1.0))


@dataclass
class RankCandidate:
    rank: int
    energy: float  # fraction of Σσ² kept by the first r singular values
    nu: float
    agreement: float | None  # adapted rank-r head's top-1 agreement with the full head (held out)
    svd_agreement: float | None  # the same for the plain activation-aware SVD, before the fit
    rho_tau: float
    predicted_speedup: float


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


def activation_aware_factors(weight: torch.Tensor, hidden_states: torch.Tensor, rank: int, eps: float = 1e-6):
    """(down r×d, up V×r) minimising E‖(W − up·down)h‖² over the hidden states: SVD of W·C^½, C = E[hhᵀ].

    fp32 throughout: C's small eigenvalues set the inverse square root.
    """
    w = weight.detach().float()
    h = hidden_states.detach().float()
    cov = h.T @ h / h.shape[0]  # (d, d)
    evals, evecs = torch.linalg.eigh(cov)
    evals = evals.clamp_min(eps * float(evals.max()))
    sqrt_c = (evecs * evals.sqrt()) @ evecs.T
    inv_sqrt_c = (evecs * evals.rsqrt()) @ evecs.T
    u, s, vh = torch.linalg.svd(w @ sqrt_c, full_matrices=False)  # (V, d), (d,), (d, d)
    root = s[:rank].sqrt()
    up = u[:, :rank] * root  # (V, r)
    down = (root[:, None] * vh[:rank]) @ inv_sqrt_c  # (r, d)
    return down, up


class AdaptedLowRankHead(nn.Module):
    """up·down·φ(h), φ(h) = h + W₂·silu(W₁·h) with W₂ = 0 at start: the rank-r head plus a learnable state map."""

    def __init__(self, down: torch.Tensor, up: torch.Tensor):
        super().__init__()
        d = down.shape[1]
        self.down = nn.Parameter(down.clone())
        self.up = nn.Parameter(up.clone())
        self.map_in = nn.Linear(d, d, bias=False)
        self.map_out = nn.Linear(d, d, bias=False)
        nn.init.normal_(self.map_in.weight, std=d**-0.5)
        nn.init.zeros_(self.map_out.weight)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.map_out(F.silu(self.map_in(h)))
        return (h @ self.down.T) @ self.up.T  # (N, V)


def _top1_agreement(logits: torch.Tensor, teacher_top1: torch.Tensor) -> float:
    return float((logits.argmax(-1) == teacher_top1).float().mean())


def adapted_agreement(
    weight: torch.Tensor,
    train_states: torch.Tensor,
    eval_states: torch.Tensor,
    rank: int,
    steps: int = 60,
    lr: float = 2e-3,
    batch_size: int = 256,
    seed: int = 0,
) -> tuple[float, float]:
    """(top-1 agreement after the fit, before it) of a rank-r head with the full head `weight` on `eval_states`."""
    weight = weight.detach().float()
    train_states, eval_states = train_states.float(), eval_states.float()
    down, up = activation_aware_factors(weight, train_states, rank)
    model = AdaptedLowRankHead(down, up)
    with torch.no_grad():
        eval_top1 = (eval_states @ weight.T).argmax(-1)
        before = _top1_agreement(model(eval_states), eval_top1)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    n = train_states.shape[0]
    for _ in range(steps):
        idx = torch.randint(n, (min(batch_size, n),), generator=generator)
        h = train_states[idx]
        with torch.no_grad():
            teacher = F.log_softmax(h @ weight.T, dim=-1)  # (B, V)
        student = F.log_softmax(model(h), dim=-1)
        loss = F.kl_div(student, teacher, log_target=True, reduction="batchmean")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        after = _top1_agreement(model(eval_states), eval_top1)
    return after, before


def rho_tau_from_agreement(agreement: float, acceptance_rate: float, num_speculative_tokens: int) -> float:
    """ρτ = τ(α_full·a) / τ(α_full) under the chain model τ(α) = Σ_{i=0..k} α^i."""
    k = num_speculative_tokens
    return tau_from_acceptance_rate(acceptance_rate * agreement, k) / tau_from_acceptance_rate(acceptance_rate, k)


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


def choose_rank(
    ranks: list[int],
    nu_by_rank: dict[int, float],
    kappa: float,
    weight: torch.Tensor | None = None,
    hidden_states: torch.Tensor | None = None,
    hidden_size: int | None = None,
    acceptance_rate: float = DEFAULT_ACCEPTANCE_RATE,
    num_speculative_tokens: int = 6,
    steps: int = 60,
    eval_fraction: float = 0.25,
    lr: float = 2e-3,
    batch_size: int = 256,
    seed: int = 0,
) -> tuple[RankCandidate, list[RankCandidate]]:
    """The rank with the highest predicted speed-up, and the table behind the choice.

    With `weight` (V×d) and `hidden_states` (N×d), ρτ(r) comes from the adapted fit; without them, from the
    paper-anchored assumption `assumed_rho_tau` (then `hidden_size` is required).
    """
    if not ranks:
        raise ValueError("`ranks` is empty; give at least one candidate rank.")
    if not 0 < acceptance_rate <= 1:
        raise ValueError(f"`acceptance_rate` must lie in (0, 1], got {acceptance_rate}.")
    rows = []
    if weight is not None:
        if hidden_states is None:
            raise ValueError("`hidden_states` (N×d inputs of the head) are required with `weight`.")
        if hidden_states.shape[-1] != weight.shape[1]:
            raise ValueError(
                f"`hidden_states` width ({hidden_states.shape[-1]}) differs from the head's d ({weight.shape[1]})."
            )
        singular = singular_values(weight)
        generator = torch.Generator().manual_seed(seed)
        order = torch.randperm(hidden_states.shape[0], generator=generator)
        n_eval = max(1, int(eval_fraction * len(order)))
        eval_states, train_states = hidden_states[order[:n_eval]], hidden_states[order[n_eval:]]
        hidden_size = weight.shape[1]
    elif hidden_size is None:
        raise ValueError("Pass `weight` and `hidden_states`, or `hidden_size` for the assumed ρτ(r).")
    for rank in ranks:
        if not 0 < rank < hidden_size:
            raise ValueError(f"rank {rank} must satisfy 0 < rank < hidden_size = {hidden_size}.")
        if weight is not None:
            start = time.perf_counter()
            agreement, before = adapted_agreement(
                weight, train_states, eval_states, rank, steps=steps, lr=lr, batch_size=batch_size, seed=seed
            )
            logger.info("rank %d: agreement %.3f (SVD %.3f) in %.1fs", rank, agreement, before, time.perf_counter() - start)
            rho = rho_tau_from_agreement(agreement, acceptance_rate, num_speculative_tokens)
            kept = energy(singular, rank)
        else:
            agreement = before = kept = None
            rho = assumed_rho_tau(rank, hidden_size)
        nu_r = nu_by_rank[rank]
        rows.append(
            RankCandidate(
                rank=rank, energy=kept if kept is not None else float("nan"), nu=nu_r, agreement=agreement,
                svd_agreement=before, rho_tau=rho, predicted_speedup=cost_model.speedup(rho, nu_r, kappa),
            )
        )
    best = max(rows, key=lambda c: c.predicted_speedup)
    return best, rows


def render_table(rows: list[RankCandidate], best: RankCandidate, kappa: float, hidden_size: int) -> str:
    lines = [
        f"κ = {kappa:.3f}; break-even ρτ = (1+νκ)/(1+κ)",
        "| rank | r/d | energy | ν | SVD top-1 | adapted top-1 | ρτ | break-even ρτ | predicted speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    fmt = lambda v, d=3: "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{d}f}"  # noqa: E731
    for c in rows:
        mark = " ←" if c.rank == best.rank else ""
        lines.append(
            f"| {c.rank}{mark} | 1/{hidden_size / c.rank:.3g} | {fmt(c.energy)} | {fmt(c.nu)} | {fmt(c.svd_agreement)} "
            f"| {fmt(c.agreement)} | {fmt(c.rho_tau)} | {fmt(cost_model.break_even_rho_tau(c.nu, kappa))} "
            f"| {fmt(c.predicted_speedup)} |"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------
# inputs from a real target
# ----------------------------------------------------------------------------------------------------------------


@torch.inference_mode()
def collect_head_inputs(
    target, tokenizer, prompts: list[str], num_positions: int = 1536, max_new_tokens: int = 48
) -> torch.Tensor:
    """Inputs of the target's LM head (N×d) on prompts and the target's own greedy answers to them."""
    head = target.get_output_embeddings()
    captured = []
    handle = head.register_forward_hook(lambda module, args, out: captured.append(args[0].detach()))
    from .benchmark import encode_prompt

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    states, total = [], 0
    try:
        for prompt in prompts:
            inputs = {k: v.to(target.device) for k, v in encode_prompt(tokenizer, prompt).items()}
            sequence = target.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad_id)
            captured.clear()
            target(input_ids=sequence, logits_to_keep=0)
            h = captured[-1][0]  # (T, d)
            states.append(h.float().cpu())
            total += h.shape[0]
            if total >= num_positions:
                break
    finally:
        handle.remove()
    return torch.cat(states)[:num_positions]


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


def measure_kappa(target, num_speculative_tokens: int, context_length: int = 256, repeats: int = 20) -> dict:
    """κ from the target and a (random) full-head drafter of its shape, on this machine."""
    from .configuration_slimspec import SlimSpecDrafterConfig
    from .metrics import measure_round_costs
    from .modeling_slimspec import SlimSpecDrafterForCausalLM

    config = SlimSpecDrafterConfig.from_target_config(target.config, head_type="full")
    drafter = SlimSpecDrafterForCausalLM(config).to(device=target.device, dtype=target.dtype).eval()
    drafter.attach_target(target)
    return measure_round_costs(target, drafter, context_length, num_speculative_tokens, repeats=repeats)


def _training_prompts(limit: int) -> list[str]:
    from .benchmark import shared_data_dir

    path = shared_data_dir() / "train" / "prompts_balanced_4k.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"No training prompts at {path}; set SLIMSPEC_DATA to the shared data folder.")
    rows = [json.loads(line) for line in path.read_text().splitlines()[: 4 * limit] if line.strip()]
    # a fixed spread of sources: every 4th row
    return [r["turns"][0] for r in rows[::4]][:limit]


# ----------------------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="slimspec choose-rank", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="embedded", help="target whose LM head and hidden states are used")
    p.add_argument("--head", default=None, help="a trained full head instead of the target's (drafter folder)")
    p.add_argument("--shape", nargs=2, type=int, action="append", default=None, metavar=("D", "V"),
                   help="no target: a d×V head shape; ν timed on random matrices, ρτ(r) assumed (repeatable)")
    p.add_argument("--ranks", type=int, nargs="+", default=None, help="candidates (default d/32 … d/2)")
    p.add_argument("--kappa", type=float, default=None, help="κ (default: measured with the target; required with --shape)")
    p.add_argument("--nu", choices=["time", "macs"], default="time", help="ν(r) timed here or counted in MACs")
    p.add_argument("--tau-full", type=float, default=None, help="measured τ of a full-head drafter (sets α_full)")
    p.add_argument("--acceptance-rate", type=float, default=DEFAULT_ACCEPTANCE_RATE,
                   help="α_full assumed when --tau-full is not given")
    p.add_argument("--num-speculative-tokens", "-k", type=int, default=6)
    p.add_argument("--num-positions", type=int, default=1024, help="cached hidden states for the fit")
    p.add_argument("--num-prompts", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=32, help="target answer length per prompt (positions)")
    p.add_argument("--steps", type=int, default=30, help="fit steps per rank")
    p.add_argument("--batch-size", type=int, default=128, help="positions per fit step")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is fastest on a busy machine)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the table as JSON here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    k = args.num_speculative_tokens
    alpha = args.acceptance_rate
    if args.tau_full is not None:
        alpha = acceptance_rate_from_tau(args.tau_full, k)
    reports = []
    if args.shape:
        if args.kappa is None:
            print("slimspec choose-rank: --shape needs --kappa (κ cannot be measured without the target).", file=sys.stderr)
            return 2
        for d, v in args.shape:
            ranks = args.ranks or default_ranks(d, v)
            nu_by_rank = measure_nu(d, v, ranks, args.nu)
            best, rows = choose_rank(ranks, nu_by_rank, args.kappa, hidden_size=d)
            header = (f"## head {d}×{v}: ν {'timed here' if args.nu == 'time' else 'in MACs'}, κ = {args.kappa} "
                      f"(given), ρτ(r) ASSUMED from the paper's trained drafters {list(PAPER_RHO_TAU)} (r/d, ρτ)")
            reports.append({"shape": [d, v], "kappa": args.kappa, "rho_tau_source": "assumed (paper anchors)",
                            "best_rank": best.rank, "rows": [asdict(r) for r in rows]})
            print(header, "", render_table(rows, best, args.kappa, d), f"\nchosen rank: {best.rank}\n", sep="\n")
    else:
        from .targets import load_target

        target, tokenizer = load_target(args.target)
        weight = load_head_weight(args.head) if args.head else target.get_output_embeddings().weight.detach()
        vocab, d = weight.shape
        ranks = args.ranks or default_ranks(d, vocab)
        start = time.perf_counter()
        kappa_info = None
        kappa = args.kappa
        if kappa is None:
            kappa_info = measure_kappa(target, k)
            kappa = kappa_info["kappa"]
        nu_by_rank = measure_nu(d, vocab, ranks, args.nu)
        states = collect_head_inputs(
            target, tokenizer, _training_prompts(args.num_prompts), args.num_positions, args.max_new_tokens
        )
        logger.info("κ, ν and %d hidden states in %.1fs", states.shape[0], time.perf_counter() - start)
        best, rows = choose_rank(
            ranks, nu_by_rank, kappa, weight=weight, hidden_states=states, acceptance_rate=alpha,
            num_speculative_tokens=k, steps=args.steps, batch_size=args.batch_size, seed=args.seed,
        )
        source = f"τ_full = {args.tau_full} measured" if args.tau_full is not None else "ASSUMED"
        print(
            f"## {args.head or args.target}: head {d}×{vocab}, {states.shape[0]} positions, k = {k}, "
            f"α_full = {alpha:.3f} ({source}), κ = {kappa:.3f} ({'given' if args.kappa is not None else 'measured'})",
            "", render_table(rows, best, kappa, d), f"\nchosen rank: {best.rank}\n", sep="\n",
        )
        reports.append({"target": args.target, "head": args.head, "shape": [d, vocab], "kappa": kappa,
                        "kappa_breakdown": kappa_info, "acceptance_rate": alpha, "num_positions": states.shape[0],
                        "rho_tau_source": "adapted fit", "best_rank": best.rank, "rows": [asdict(r) for r in rows]})
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(reports, f, indent=2)
        os.replace(tmp, path)
    return 0


__all__ = [
    "RankCandidate",
    "default_ranks",
    "singular_values",
    "energy",
    "activation_aware_factors",
    "AdaptedLowRankHead",
    "adapted_agreement",
    "rho_tau_from_agreement",
    "assumed_rho_tau",
    "measure_nu",
    "choose_rank",
    "render_table",
    "collect_head_inputs",
    "load_head_weight",
    "measure_kappa",
    "main",
]
