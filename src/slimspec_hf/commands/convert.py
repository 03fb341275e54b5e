# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec convert`: an EAGLE-3 / EAGLE-3.1 drafter (SafeAILab EAGLE, SpecForge, vLLM speculators, TorchSpec) into a
SlimSpec drafter."""

import argparse
import shutil
import tempfile
from pathlib import Path

import torch

from ..interop.convert import (
    CONVERT_HEAD_INITS,
    CONVERT_HEAD_TYPES,
    FAMILIES,
    convert_eagle3,
    full_vocab_head,
    read_eagle3_checkpoint,
)
from ..interop.recover import RecoverSettings, recover
from ..targets import DTYPE_CHOICES, load_target, resolve_dtype
from ..training.data import load_prompts
from .common import check_model_source, resolve_model_folder


def _save_atomically(drafter, out: Path) -> None:
    """`save_pretrained` into a temporary sibling folder that replaces `out` only once complete."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        drafter.save_pretrained(tmp)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slimspec convert",
        description="Convert an EAGLE-3 / EAGLE-3.1 drafter (SafeAILab EAGLE, SpecForge, vLLM speculators, TorchSpec; "
        "detected from config.json) into a SlimSpec drafter with a low-rank head.",
    )
    parser.add_argument(
        "--from",
        dest="source_kind",
        choices=list(FAMILIES),
        required=True,
        help="source drafter family: eagle3 (SafeAILab, SpecForge, speculators; EAGLE-3.1 flags included) or "
        "torchspec (low-rank head kept as it is)",
    )
    parser.add_argument(
        "src", help="folder or Hub id (org/name[@revision]) of the EAGLE-3 drafter (config.json + safetensors)"
    )
    parser.add_argument("--target", required=True, help="target model: Hub id, local folder, .gguf, or 'embedded'")
    parser.add_argument("--out", required=True, help="output folder of the SlimSpec drafter")
    parser.add_argument("--head", choices=CONVERT_HEAD_TYPES, default="low_rank", help="head type (default low_rank)")
    parser.add_argument("--rank", type=int, default=None, help="rank of the low-rank head (default hidden_size // 8)")
    parser.add_argument(
        "--head-init", choices=CONVERT_HEAD_INITS, default="svd", help="low-rank head init (default svd)"
    )
    parser.add_argument(
        "--layer-ids",
        type=int,
        nargs=3,
        default=None,
        help="target layers as indices into hidden_states (overrides the checkpoint)",
    )
    parser.add_argument(
        "--norm-before-residual",
        choices=["true", "false"],
        default=None,
        help="speculators layer variant (residual after hidden_norm); overrides the config, and is "
        "required when the config lacks `norm_before_residual`",
    )
    parser.add_argument(
        "--dtype", choices=DTYPE_CHOICES[1:], default="float32", help="dtype of the saved drafter (default float32)"
    )
    add_recovery_arguments(parser)
    return parser


def add_recovery_arguments(parser: argparse.ArgumentParser) -> None:
    """`--recover` and its options: fitting a converted low-rank head to the source's dense head."""
    recovery = parser.add_argument_group("recovery (low-rank heads): fit the head to the source's dense head")
    recovery.add_argument(
        "--recover",
        action="store_true",
        help="after the SVD, fit the low-rank head to the source's dense head on the drafter's own states (the "
        "backbone stays frozen); resumable, its work kept in OUT.recover/",
    )
    recovery.add_argument(
        "--prompts",
        default=None,
        help="JSONL of prompts (`turns` or `messages`) the target answers for --recover (default: the packaged "
        "Spec-Bench prompts outside MT-Bench)",
    )
    recovery.add_argument(
        "--recover-seconds", type=float, default=None, help="wall-clock budget of the fit (default 1800)"
    )
    recovery.add_argument(
        "--recover-prompts", type=int, default=200, help="prompts the target answers for --recover (default 200)"
    )


def recover_prompts(args) -> list[str] | None:
    """Checks the `--recover` options; the prompts of `--prompts` (None: the packaged default)."""
    if (args.prompts is not None or args.recover_seconds is not None) and not args.recover:
        raise ValueError("--prompts and --recover-seconds set up --recover; add --recover (or drop them).")
    if args.recover and args.head != "low_rank":
        raise ValueError(f"--recover fits a low-rank head; got --head {args.head}. Drop --recover or use low_rank.")
    args.recover_seconds = 1800.0 if args.recover_seconds is None else args.recover_seconds
    if args.recover_seconds <= 0 or args.recover_prompts < 1:
        raise ValueError(
            f"--recover-seconds must be > 0 and --recover-prompts >= 1; got {args.recover_seconds} and "
            f"{args.recover_prompts}."
        )
    if args.prompts is None:
        return None
    return [row["messages"][-1]["content"] for row in load_prompts(args.prompts, args.recover_prompts)]


def recover_head(drafter, dense, target, tokenizer, args, prompts) -> str:
    """Runs `--recover` on `drafter` (in place) against the source's dense head; returns its summary line."""
    settings = RecoverSettings(seconds=args.recover_seconds, num_prompts=args.recover_prompts)
    record = recover(drafter, dense, target, tokenizer, f"{args.out}.recover", settings, prompts=prompts)
    agreement = {key: record[key]["top1_agreement"] for key in ("svd", "activation_svd", "recovered")}
    return (
        f"recovered: {record['steps']} steps, {record['seconds']:.0f} s on {record['states']} states; top-1 "
        "agreement with the source head on held-out states: SVD {svd:.3f}, activation-aware SVD "
        "{activation_svd:.3f}, recovered {recovered:.3f} (KL {kl:.3f})".format(
            **agreement, kl=record["recovered"]["kl"]
        )
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prompts = recover_prompts(args)
    residual = None if args.norm_before_residual is None else args.norm_before_residual == "true"
    target_name = check_model_source(args.target, "--target", allow_file=True)
    src = resolve_model_folder(args.src, "src", allow_patterns=["*.json", "*.safetensors"])
    ckpt = read_eagle3_checkpoint(src, norm_before_residual=residual)
    if ckpt.format not in FAMILIES[args.source_kind]:
        family = next(name for name, formats in FAMILIES.items() if ckpt.format in formats)
        raise ValueError(
            f"--from {args.source_kind} was given, but {args.src} is a {ckpt.format} checkpoint; pass --from {family}."
        )
    target, tokenizer = load_target(target_name, dtype=torch.float32, tokenizer_required=args.recover)
    drafter = convert_eagle3(
        ckpt, target, head_type=args.head, rank=args.rank, head_init=args.head_init, layer_ids=args.layer_ids
    )
    summary = [
        f"source format: {ckpt.format} ({ckpt.path})",
        f"target layers (hidden_states indices): {drafter.config.target_layer_ids} from {ckpt.layer_ids_origin}",
        f"norm_before_residual: {str(ckpt.norm_before_residual).lower()} ({ckpt.norm_before_residual_origin})",
        f"draft vocabulary: {ckpt.draft_vocab_size} of {drafter.config.vocab_size} tokens",
        "EAGLE-3.1: " + (", ".join(flag for flag, on in ckpt.flags.items() if on) or "none"),
        f"head: {args.head}" + (f", rank {drafter.config.head_rank}" if args.head == "low_rank" else ""),
    ]
    if args.head == "low_rank":
        dense = full_vocab_head(ckpt, target, drafter.config.hidden_size)
        error = float((dense - drafter.lm_head.merged_weight().detach()).norm() / dense.norm())
        summary.append(f"relative head error ||W - W_up W_down||_F / ||W||_F: {error:.4f} ({args.head_init})")
    if args.recover:
        summary.append(recover_head(drafter, dense, target, tokenizer, args, prompts))
    _save_atomically(drafter.to(resolve_dtype(args.dtype)), Path(args.out))
    print("\n".join(summary + [f"saved: {args.out}"]))
    return 0
