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
from ..targets import DTYPE_CHOICES, load_target, resolve_dtype
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="slimspec convert",
        description="Convert an EAGLE-3 drafter (SafeAILab EAGLE or vLLM speculators, detected from config.json) "
        "into a SlimSpec drafter with a low-rank head.",
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
    args = parser.parse_args(argv)
    residual = None if args.norm_before_residual is None else args.norm_before_residual == "true"
    target_name = check_model_source(args.target, "--target", allow_file=True)
    src = resolve_model_folder(args.src, "src", allow_patterns=["*.json", "*.safetensors"])
    ckpt = read_eagle3_checkpoint(src, norm_before_residual=residual)
    if ckpt.format not in FAMILIES[args.source_kind]:
        family = next(name for name, formats in FAMILIES.items() if ckpt.format in formats)
        raise ValueError(
            f"--from {args.source_kind} was given, but {args.src} is a {ckpt.format} checkpoint; pass --from {family}."
        )
    target, _ = load_target(target_name, dtype=torch.float32, tokenizer_required=False)
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
    _save_atomically(drafter.to(resolve_dtype(args.dtype)), Path(args.out))
    print("\n".join(summary + [f"saved: {args.out}"]))
    return 0
