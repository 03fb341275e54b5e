# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec prepare-data`: regenerate responses to prompts with the target (resumable)."""

import argparse
import logging
import sys
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
    parser.add_argument(
        "--target",
        default="embedded",
        help="target: Hub id, folder, .gguf, `embedded` (SmolLM2-135M-Instruct) or `gemma-3-270m`",
    )
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
    parser.add_argument(
        "--engine",
        default="transformers",
        choices=["transformers", "vllm"],
        help="who generates: `transformers` (batched generate(), this venv) or `vllm` (continuous batching, runs "
        "under the vLLM venv's python: `make install-vllm`); same shards, resumable across engines",
    )
    parser.add_argument("--vllm-python", default=None, help="python with vLLM (default: .venv-vllm/bin/python)")
    parser.add_argument("--max-num-seqs", type=int, default=128, help="vllm: answers in flight at once")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.max_seconds is not None and args.max_seconds <= 0:
        raise CommandError(f"`--max-seconds` must be > 0, got {args.max_seconds}.")
    for name in ("batch_size", "max_new_tokens", "max_num_seqs"):
        if getattr(args, name) < 1:
            raise CommandError(f"`--{name.replace('_', '-')}` must be ≥ 1, got {getattr(args, name)}.")
    if args.threads:
        torch.set_num_threads(args.threads)
    from ..targets import embedded_target, is_embedded, load_target

    target_name = check_model_source(args.target, "--target", allow_file=True)
    prompts = load_prompts(resolve_data_file(args.prompts, "--prompts"), args.max_prompts)
    out_dir = Path(args.out)
    # a base model answers in the plain question format and stops where it starts a question of its own
    stop_strings = list(embedded_target(target_name).stop_strings) if is_embedded(target_name) else []
    run_config = {
        "target": args.target,
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "seed": args.seed,
        "dtype": args.dtype,
    }
    if stop_strings:  # (absent for targets without them, so that earlier folders resume)
        run_config["stop_strings"] = stop_strings
    # what both engines take from the command line
    common = {
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "seed": args.seed,
        "max_prompt_length": args.max_prompt_length,
        "progress": not args.no_progress,
        "max_seconds": args.max_seconds,
    }
    if args.engine == "vllm":
        if stop_strings:
            raise CommandError(f"`--engine vllm` does not stop at {stop_strings} yet; use `--engine transformers`.")
        stats = _regenerate_with_vllm(args, target_name, prompts, out_dir, run_config, common)
    else:
        # the target loads before anything is written to `--out`, so that a bad target leaves nothing behind
        model, tokenizer = load_target(target_name, dtype=getattr(torch, args.dtype), device=args.device)
        _check_run_config(out_dir, run_config)
        stats = regenerate(
            model, tokenizer, prompts, out_dir, batch_size=args.batch_size, stop_strings=tuple(stop_strings), **common
        )
    rate = stats["new_tokens"] / stats["seconds"] if stats["seconds"] else 0.0
    print(
        f"prepare-data: {stats['done']} new, {stats['skipped']} already done, {stats['too_long']} too long, "
        f"{stats['left']} left; "
        f"{stats['new_tokens']} tokens in {stats['seconds']:.1f} s ({rate:.1f} tokens/s; {args.engine}, {args.dtype}, "
        f"{args.threads or 'default'} threads) -> {out_dir}"
    )
    return 0


def _regenerate_with_vllm(
    args, target_name: str, prompts: list[dict], out_dir: Path, run_config: dict, common: dict
) -> dict:
    """`--engine vllm`: the same selection of pending prompts and the same shards, generated by vLLM (its own venv).
    The engine is not part of the run config: like the batch size, it changes low-order bits of the arithmetic,
    not what is asked of the target, so a dataset may be continued by either engine."""
    from transformers import AutoTokenizer

    from ..integrations.vllm.regenerate import EngineError, find_vllm_python, regenerate_with_vllm
    from ..targets import embedded_target_dir, is_embedded

    if str(target_name).endswith(".gguf"):
        raise CommandError(
            f"`--target`: vLLM cannot load the GGUF file {target_name!r}; pass an HF folder, a Hub id or `embedded`."
        )
    if args.device != "cpu" and not args.device.startswith("cuda"):
        raise CommandError(f"`--device`: the vLLM engine runs on cpu or cuda, got {args.device!r}.")
    try:
        vllm_python = find_vllm_python(args.vllm_python)
    except ValueError as err:
        raise CommandError(str(err)) from None
    target_dir = str(embedded_target_dir(target_name)) if is_embedded(target_name) else target_name
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    _check_run_config(out_dir, run_config)
    try:
        return regenerate_with_vllm(
            target_dir,
            tokenizer,
            prompts,
            out_dir,
            vllm_python,
            dtype=args.dtype,
            max_num_seqs=args.max_num_seqs,
            threads=args.threads,
            **common,
        )
    except EngineError as err:
        print(err.log_tail.rstrip(), file=sys.stderr)
        raise CommandError(
            f"{err} (its log ends above); the answers written so far are kept: rerun the same command to go on."
        ) from None
