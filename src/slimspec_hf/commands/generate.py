# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec generate`: answer a prompt with the target, drafted by a SlimSpec drafter, streaming the answer."""

import argparse
import contextlib
import sys
import time
from dataclasses import dataclass

import torch


@dataclass
class TimedGeneration:
    text: str
    new_tokens: int
    seconds: float
    acceptance_length: float | None = None

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else float("nan")


def chat_inputs(tokenizer, prompt: str, device="cpu") -> dict:
    """Token ids of `prompt` as a user turn through the tokenizer's chat template (plain text without one)."""
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": prompt}]
        inputs = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
    else:
        inputs = tokenizer(prompt, return_tensors="pt")
    return {k: v.to(device) for k, v in inputs.items()}


def timed_generate(target, tokenizer, inputs: dict, drafter=None, streamer=None, **generate_kwargs) -> TimedGeneration:
    """One `generate` call, timed; τ is read from the drafter's `last_generation_stats`."""
    start = time.perf_counter()
    with torch.no_grad():
        out = target.generate(**inputs, assistant_model=drafter, streamer=streamer, **generate_kwargs)
    seconds = time.perf_counter() - start
    new = out[0, inputs["input_ids"].shape[1] :]
    tau = drafter.last_generation_stats.acceptance_length if drafter is not None else None
    return TimedGeneration(tokenizer.decode(new, skip_special_tokens=True), int(new.numel()), seconds, tau)


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
    remaining time — transformers' assisted-decoding loop plus the SlimSpec candidate generator's own Python.

    Returns per-round and per-step milliseconds; rounds = target forwards (the prefill included).
    """
    totals: dict = {}
    with (
        _timed_forward(target, totals, "target"),
        _timed_forward(drafter, totals, "drafter"),
        _timed_forward(drafter.lm_head, totals, "head"),
    ):
        result = timed_generate(target, tokenizer, inputs, drafter=drafter, **generate_kwargs)
    target_s, target_calls = totals["target"]
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


def sampling_kwargs(args) -> dict:
    kwargs = {"max_new_tokens": args.max_new_tokens}
    if args.temperature and args.temperature > 0:
        kwargs.update(do_sample=True, temperature=args.temperature, top_p=args.top_p)
    else:
        kwargs.update(do_sample=False)
    if args.num_assistant_tokens is not None:
        kwargs["num_assistant_tokens"] = args.num_assistant_tokens
    return kwargs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slimspec generate", description=__doc__)
    parser.add_argument("prompt", help="the user message")
    parser.add_argument("--drafter", required=True, help="folder or Hub id of a SlimSpec drafter")
    parser.add_argument("--target", default=None, help="target name or path (default: embedded SmolLM2-135M-Instruct)")
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.max_new_tokens <= 0:
        print(f"slimspec generate: --max-new-tokens must be positive, got {args.max_new_tokens}", file=sys.stderr)
        return 2
    from transformers import AutoModelForCausalLM, TextStreamer

    import slimspec_hf  # noqa: F401  (registers the drafter classes and the generate() hook)
    from slimspec_hf.targets import load_target

    target, tokenizer = load_target(args.target)
    drafter = AutoModelForCausalLM.from_pretrained(args.drafter).eval()
    inputs = chat_inputs(tokenizer, args.prompt, target.device)
    kwargs = sampling_kwargs(args)

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


if __name__ == "__main__":
    sys.exit(main())
