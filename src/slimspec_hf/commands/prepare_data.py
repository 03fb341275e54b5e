# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec prepare-data`: regenerate responses to prompts with the target (resumable)."""

import argparse
import logging
from pathlib import Path

import torch

from ..training.data import _check_run_config, load_prompts, regenerate
from .common import CommandError, check_model_source, resolve_data_file


# ----------------------------------------------------------------------------------------------------------------
# CLI: slimspec prepare-data
# ----------------------------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slimspec prepare-data",
        description="Regenerate the responses to prompts with the target (resumable: rerun to continue).",
    )
    parser.add_argument("--target", default="embedded", help="target: Hub id, folder, .gguf, or `embedded`")
    parser.add_argument(
        "--prompts",
        required=True,
        help="JSONL with `turns` (or `messages`) per line: a local file or hf://datasets/ORG/NAME/PATH",
    )
    parser.add_argument("--out", required=True, help="output folder (datasets-loadable JSONL shards)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--max-prompts", type=int, default=None, help="only the first N prompts")
    parser.add_argument("--max-prompt-length", type=int, default=2048, help="skip longer prompts (tokens)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--device", default="cpu", help="where the target runs (cpu, cuda, cuda:1, ...)")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="time box: begin no batch that would end past this many seconds of generation (rerun to continue)",
    )
    parser.add_argument("--no-progress", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.max_seconds is not None and args.max_seconds <= 0:
        raise CommandError(f"`--max-seconds` must be > 0, got {args.max_seconds}.")
    for name in ("batch_size", "max_new_tokens"):
        if getattr(args, name) < 1:
            raise CommandError(f"`--{name.replace('_', '-')}` must be ≥ 1, got {getattr(args, name)}.")
    if args.threads:
        torch.set_num_threads(args.threads)
    from ..targets import load_target

    target_name = check_model_source(args.target, "--target", allow_file=True)
    prompts = load_prompts(resolve_data_file(args.prompts, "--prompts"), args.max_prompts)
    out_dir = Path(args.out)
    # the target loads before anything is written to `--out`, so that a bad target leaves nothing behind
    model, tokenizer = load_target(target_name, dtype=getattr(torch, args.dtype), device=args.device)
    _check_run_config(
        out_dir,
        {
            "target": args.target,
            "max_new_tokens": args.max_new_tokens,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "seed": args.seed,
            "dtype": args.dtype,
        },
    )
    stats = regenerate(
        model,
        tokenizer,
        prompts,
        out_dir,
        batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
        max_prompt_length=args.max_prompt_length,
        progress=not args.no_progress,
        max_seconds=args.max_seconds,
    )
    rate = stats["new_tokens"] / stats["seconds"] if stats["seconds"] else 0.0
    print(
        f"prepare-data: {stats['done']} new, {stats['skipped']} already done, {stats['too_long']} too long, "
        f"{stats['left']} left; "
        f"{stats['new_tokens']} tokens in {stats['seconds']:.1f} s ({rate:.1f} tokens/s) -> {out_dir}"
    )
    return 0
