# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec choose-rank`: pick the head rank that maximises the predicted speed-up."""

import argparse
import logging
import sys
import time
from dataclasses import asdict

import torch

from ..evaluation.metrics import acceptance_rate_from_tau
from ..evaluation.rank_selection import (
    PAPER_RHO_TAU,
    _training_prompts,
    choose_rank,
    collect_head_inputs,
    default_ranks,
    drafter_head_weight,
    load_head_weight,
    measure_kappa,
    measure_nu,
    render_table,
)
from ..utils import atomic_write_json
from .common import add_draft_length_argument


logger = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="slimspec choose-rank", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="embedded", help="target whose LM head and hidden states are used")
    p.add_argument("--head", default=None, help="a trained full head instead of the target's (drafter folder)")
    p.add_argument(
        "--shape",
        nargs=2,
        type=int,
        action="append",
        default=None,
        metavar=("D", "V"),
        help="no target: a d×V head shape; ν timed on random matrices, ρτ(r) assumed (repeatable)",
    )
    p.add_argument("--ranks", type=int, nargs="+", default=None, help="candidates (default d/32 … d/2)")
    p.add_argument(
        "--kappa", type=float, default=None, help="κ (default: measured with the target; required with --shape)"
    )
    p.add_argument("--nu", choices=["time", "macs"], default="time", help="ν(r) timed here or counted in MACs")
    p.add_argument(
        "--tau-full",
        type=float,
        default=None,
        help="measured τ of a full-head drafter: sets α_full (default: the full-head proxy's top-1)",
    )
    p.add_argument(
        "--acceptance-rate",
        type=float,
        default=None,
        help="α_full given directly instead of --tau-full (default: the full-head proxy's top-1)",
    )
    p.add_argument(
        "--proxy-layers",
        type=int,
        default=1,
        help="the proxies read the target's state this many layers below the head (0: the head's input)",
    )
    p.add_argument(
        "--drafter",
        default=None,
        help="a trained drafter (ideally full-head) whose own states the proxies read, instead of the target's",
    )
    add_draft_length_argument(p, 6, "tokens drafted per round (k) in the cost model and the chain model of ρτ")
    p.add_argument(
        "--num-positions",
        type=int,
        default=1536,
        help="cached hidden states (65%% fit, 17.5%% validation, 17.5%% test)",
    )
    p.add_argument("--num-prompts", type=int, default=64, help="at most this many training prompts")
    p.add_argument("--max-new-tokens", type=int, default=32, help="target answer length per prompt (positions)")
    p.add_argument("--steps", type=int, default=60, help="fit steps per proxy (the full head's and each rank's)")
    p.add_argument("--lr", type=float, default=0.15, help="relative Adam step (scaled per matrix by RMS/√fan-in)")
    p.add_argument("--batch-size", type=int, default=128, help="positions per fit step")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is fastest on a busy machine)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the table as JSON here")
    return p


def _shape_report(args, d: int, v: int) -> dict:
    """Choose a rank for a bare d×V head (ν measured, ρτ(r) assumed, κ given); print the table, return its JSON."""
    ranks = args.ranks or default_ranks(d, v)
    nu_by_rank = measure_nu(d, v, ranks, args.nu)
    best, rows, _ = choose_rank(ranks, nu_by_rank, args.kappa, hidden_size=d)
    header = (
        f"## head {d}×{v}: ν {'timed here' if args.nu == 'time' else 'in MACs'}, κ = {args.kappa} "
        f"(given), ρτ(r) ASSUMED from the paper's trained drafters {list(PAPER_RHO_TAU)} (r/d, ρτ)"
    )
    report = {
        "shape": [d, v],
        "kappa": args.kappa,
        "rho_tau_source": "assumed (paper anchors)",
        "best_rank": best.rank,
        "rows": [asdict(r) for r in rows],
    }
    print(header, "", render_table(rows, best, args.kappa, d), f"\nchosen rank: {best.rank}\n", sep="\n")
    return report


def _load_models(args):
    """(target, tokenizer, drafter or None, the drafter's dense head or None) in fp32, from `--target`/`--drafter`."""
    from ..targets import load_target
    from .common import check_model_source

    drafter_path = check_model_source(args.drafter, "--drafter") if args.drafter else None
    target, tokenizer = load_target(check_model_source(args.target, "--target", allow_file=True), dtype=torch.float32)
    drafter = proxy_weight = None
    if drafter_path:
        from ..modeling_slimspec import SlimSpecDrafterForCausalLM

        drafter = SlimSpecDrafterForCausalLM.from_pretrained(drafter_path, dtype=torch.float32)
        drafter.to(target.device).eval().attach_target(target)
        proxy_weight = drafter_head_weight(drafter)
    return target, tokenizer, drafter, proxy_weight


def _kappa(args, target) -> tuple[float, dict | None]:
    """(κ, its measured breakdown): `--kappa` as given (breakdown None), else measured with the target."""
    if args.kappa is not None:
        return args.kappa, None
    kappa_info = measure_kappa(target, args.num_assistant_tokens)
    return kappa_info["kappa"], kappa_info


def _collect_states(args, target, tokenizer, drafter) -> tuple[torch.Tensor, torch.Tensor]:
    """(head inputs, proxy inputs) on the training prompts and the target's greedy answers to them."""
    return collect_head_inputs(
        target,
        tokenizer,
        _training_prompts(args.num_prompts),
        args.num_positions,
        args.max_new_tokens,
        proxy_layers=args.proxy_layers,
        drafter=drafter,
    )


def _target_header(args, alpha: float | None, d: int, vocab: int, num_positions: int, kappa: float, reference) -> str:
    """The heading of a target's table: what the proxies read, where α_full and κ come from."""
    if args.tau_full is not None:
        source = f"α_full = {alpha:.3f} from τ_full = {args.tau_full} (measured)"
    elif alpha is not None:
        source = f"α_full = {alpha:.3f} (given)"
    else:
        source = f"α_full = a_full = {reference.agreement:.3f} (the full-head proxy's)"
    reads = (
        f"the step-0 states of the drafter {args.drafter}"
        if args.drafter
        else f"the target's state {args.proxy_layers} layer(s) below the head"
    )
    return (
        f"## {args.head or args.target}: head {d}×{vocab}, {num_positions} positions, proxies read {reads}, "
        f"{args.steps} fit steps each, k = {args.num_assistant_tokens}, {source}, "
        f"κ = {kappa:.3f} ({'given' if args.kappa is not None else 'measured'})"
    )


def _target_report(args, alpha: float | None) -> dict:
    """Choose a rank for the target's head (or `--head`) from proxy fits; print the table, return its JSON."""
    k = args.num_assistant_tokens
    target, tokenizer, drafter, proxy_weight = _load_models(args)
    weight = load_head_weight(args.head) if args.head else target.get_output_embeddings().weight.detach()
    vocab, d = weight.shape
    ranks = args.ranks or default_ranks(d, vocab)
    start = time.perf_counter()
    kappa, kappa_info = _kappa(args, target)
    nu_by_rank = measure_nu(d, vocab, ranks, args.nu)
    states, proxy_states = _collect_states(args, target, tokenizer, drafter)
    logger.info("κ, ν and %d hidden states in %.1fs", states.shape[0], time.perf_counter() - start)
    best, rows, reference = choose_rank(
        ranks,
        nu_by_rank,
        kappa,
        weight=weight,
        hidden_states=states,
        proxy_states=proxy_states,
        proxy_weight=proxy_weight,
        acceptance_rate=alpha,
        num_assistant_tokens=k,
        steps=args.steps,
        lr=args.lr,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    print(
        _target_header(args, alpha, d, vocab, states.shape[0], kappa, reference),
        "",
        render_table(rows, best, kappa, d, reference),
        f"\nchosen rank: {best.rank}\n",
        sep="\n",
    )
    return {
        "target": args.target,
        "head": args.head,
        "shape": [d, vocab],
        "kappa": kappa,
        "kappa_breakdown": kappa_info,
        "acceptance_rate": alpha,
        "num_positions": states.shape[0],
        "proxy_layers": None if args.drafter else args.proxy_layers,
        "drafter": args.drafter,
        "steps": args.steps,
        "full_head_proxy": asdict(reference),
        "rho_tau_source": "proxy fits (rank-r vs full head, same map and budget)",
        "best_rank": best.rank,
        "rows": [asdict(r) for r in rows],
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", force=True)
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    alpha = args.acceptance_rate
    if args.tau_full is not None:
        alpha = acceptance_rate_from_tau(args.tau_full, args.num_assistant_tokens)
    if args.shape:
        if args.kappa is None:
            print(
                "slimspec choose-rank: --shape needs --kappa (κ cannot be measured without the target).",
                file=sys.stderr,
            )
            return 2
        reports = [_shape_report(args, d, v) for d, v in args.shape]
    else:
        reports = [_target_report(args, alpha)]
    if args.json:
        atomic_write_json(args.json, reports)
    return 0
