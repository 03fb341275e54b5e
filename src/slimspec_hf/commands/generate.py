# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec generate`: answer a prompt with the target, drafted by a SlimSpec drafter, streaming the answer."""

import argparse

import torch

from ..evaluation.timing import encode_prompt, format_profile, profile_generation, sampling_kwargs, timed_generate
from .common import CommandError, add_runtime_arguments, load_models, runtime_line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slimspec generate", description=__doc__)
    parser.add_argument("prompt", help="the user message")
    parser.add_argument("--drafter", required=True, help="folder or Hub id of a SlimSpec drafter")
    parser.add_argument(
        "--target",
        default=None,
        help="target: Hub id, local folder, .gguf path (default: embedded SmolLM2-135M-Instruct)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--num-assistant-tokens", type=int, default=None, help="draft length k (default: config)")
    parser.add_argument("--compare", action="store_true", help="also run the target alone; print tokens/s and τ")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="rerun once split into target verification, drafter steps (head/rest) and overhead",
    )
    parser.add_argument("--seed", type=int, default=0)
    add_runtime_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.max_new_tokens <= 0:
        raise CommandError(f"`--max-new-tokens` must be positive, got {args.max_new_tokens}.")
    from transformers import TextStreamer

    target, tokenizer, drafters = load_models(args.target, [args.drafter], args.dtype, threads=args.threads)
    drafter = drafters[0]
    print(runtime_line(target))
    inputs = encode_prompt(tokenizer, args.prompt, target.device)
    kwargs = {"max_new_tokens": args.max_new_tokens, **sampling_kwargs(args.temperature, args.top_p)}
    if args.num_assistant_tokens is not None:
        kwargs["num_assistant_tokens"] = args.num_assistant_tokens

    torch.manual_seed(args.seed)
    streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    fast = timed_generate(target, tokenizer, inputs, drafter=drafter, streamer=streamer, **kwargs)
    print(
        f"\n[slimspec] {fast.new_tokens} tokens in {fast.seconds:.2f} s = {fast.tokens_per_second:.1f} tokens/s, "
        f"acceptance length τ = {fast.acceptance_length:.2f}"
    )
    if args.compare:
        torch.manual_seed(args.seed)
        plain = timed_generate(target, tokenizer, inputs, **kwargs)
        print(
            f"[target alone] {plain.new_tokens} tokens in {plain.seconds:.2f} s = "
            f"{plain.tokens_per_second:.1f} tokens/s"
        )
        print(
            f"[speed-up] {fast.tokens_per_second / plain.tokens_per_second:.2f}x"
            + ("  (identical text)" if plain.text == fast.text else "")
        )
    if args.profile:
        torch.manual_seed(args.seed)
        print(format_profile(profile_generation(target, tokenizer, inputs, drafter, **kwargs)))
    return 0


__all__ = ["build_parser", "main"]
