# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`make demo`: SlimSpec speculative decoding on an embedded target, measured in the same run.

Loads the embedded target (`--target`, default SmolLM2-135M-Instruct; dtype "auto": bf16 where this machine computes
it natively, else fp32) and its shipped drafter, streams an answer to each prompt through
`target.generate(**inputs, assistant_model=drafter)`, then times every system on every prompt, interleaved and
greedy: the target alone, the SlimSpec drafter alone (a chain of k tokens a round), SlimSpec with the drafter's
defaults (its `generation_config`), optionally the same drafter with its head merged to full size (`--merged-head`:
the same drafts at a full head's cost), and transformers' prompt-lookup decoding. It prints tokens/s, the speed-up
over the target alone and τ (tokens per target forward), and checks the outputs against the target alone: in fp32
they must be identical token for token; in bf16, batched verification rounds differently from one-token decoding,
so after a near-tie the text may change — the table then says after how many tokens.
"""

import argparse
import statistics
import sys
import warnings

import torch


# Ordinary requests whose greedy answers from the target read as normal text: none degenerates into a repeated list
# within 128 tokens, which would hand prompt lookup a copy to draft from and flatter every figure. An instruction-tuned
# target gets chat turns; a base model (no chat template of its own) gets the plain formats of `prompt_formats`:
# ("question", text) through its question-answer template, ("raw", text) as they stand.
PROMPTS = {
    "smollm2-135m-instruct": [
        ("question", "Explain in three sentences why the sky is blue."),
        ("question", "Write a Python function that checks whether a string is a palindrome."),
        ("question", "Write a short email to a colleague asking to move our meeting to Friday."),
    ],
    "gemma-3-270m": [
        ("question", "Why is the sky blue?"),
        ("code", ("def is_palindrome(text: str) -> bool:", "Return True if `text` reads the same backwards.")),
        ("raw", "The printing press changed Europe because"),
    ],
}


def encode_demo_prompt(tokenizer, kind: str, prompt, device) -> dict:
    """The token ids of one demo prompt: a question through the tokenizer's chat template, code as a signature and
    docstring (`prompt_formats.code_prompt`), raw text as it stands."""
    from ..evaluation.timing import encode_prompt
    from ..prompt_formats import code_prompt

    if kind == "question":
        return encode_prompt(tokenizer, prompt, device)
    text = code_prompt(*prompt) if kind == "code" else prompt
    return {k: v.to(device) for k, v in tokenizer(text, return_tensors="pt").items()}


def _first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first generated token where `a` and `b` differ (None if identical)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main(argv: list[str] | None = None) -> int:
    from .common import add_runtime_arguments, error_boundary

    parser = argparse.ArgumentParser(prog="python -m slimspec_hf.commands.demo", description=__doc__)
    parser.add_argument(
        "--target", default="smollm2-135m-instruct", choices=sorted(PROMPTS), help="the embedded target to run"
    )
    parser.add_argument("--drafter", default=None, help="drafter folder or Hub id (default: the target's shipped one)")
    parser.add_argument(
        "--merged-head", action="store_true", help="also time the drafter with its low-rank head merged to full size"
    )
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2, help="timed repeats per prompt and system")
    add_runtime_arguments(parser)
    args = parser.parse_args(argv)
    return error_boundary("demo")(_run)(args)


def _tree_text(settings) -> str:
    size = getattr(settings, "draft_tree_size", 0) or 0
    if size <= 0:
        return "none (a chain)"
    return f"{size} nodes, depth {getattr(settings, 'draft_tree_depth', '?')}, top-{getattr(settings, 'draft_tree_top_k', '?')}"


def _load_demo_models(args):
    """(target, tokenizer, drafter): the embedded target and `--drafter` (default: the target's shipped one)."""
    from ..targets import embedded_target
    from .common import CommandError, load_models, runtime_line

    spec = embedded_target(args.target)
    drafter_path = args.drafter or str(spec.drafter_dir)
    if args.drafter is None and not spec.drafter_dir.is_dir():
        raise CommandError(
            f"`--drafter`: {spec.name} has no shipped drafter at {spec.drafter_dir}; pass a drafter folder or Hub id."
        )
    print(f"Loading the embedded target {spec.hub_id} (the first run dequantises its GGUF) ...")
    target, tokenizer, (drafter,) = load_models(spec.name, [drafter_path], dtype=args.dtype, threads=args.threads)
    settings = drafter.generation_config
    print(
        f"Drafter: {drafter_path} (head {drafter.config.head_type}, r = {drafter.config.head_rank}); its defaults: "
        f"k = {settings.num_assistant_tokens}, draft_lookup = {getattr(settings, 'draft_lookup', False)}, "
        f"draft_tree = {_tree_text(settings)}, draft_shape = {getattr(settings, 'draft_shape', 'fixed')}"
    )
    print(runtime_line(target) + "\n")
    return target, tokenizer, drafter


def _time_systems(target, inputs, systems: dict, common: dict, repeats: int) -> dict:
    """{system: (median tokens/s, mean τ or None, first difference from the target alone, the shape
    `draft_shape="auto"` ended its last run with or "")} on one prompt.

    The systems run interleaved, `repeats` times each, so that every system shares the machine's noise.
    """
    from ..evaluation.timing import Timer

    n_prompt = inputs["input_ids"].shape[1]
    times = {name: [] for name in systems}
    taus = {name: [] for name in systems}
    outputs, shapes = {}, {}
    for _ in range(repeats):
        for name, kwargs in systems.items():
            with warnings.catch_warnings(), Timer(target.device) as timer:
                warnings.simplefilter("ignore")
                out = target.generate(**inputs, **kwargs, **common)
            new = out[0, n_prompt:].tolist()
            outputs[name] = new
            times[name].append(len(new) / timer.seconds)
            if "assistant_model" in kwargs:
                stats = kwargs["assistant_model"].last_generation_stats
                if stats.rounds:
                    taus[name].append(stats.acceptance_length)
                shapes[name] = stats.draft_shape.get("shape", "")
    reference = outputs["target alone"]
    return {
        name: (
            statistics.median(times[name]),
            statistics.mean(taus[name]) if taus[name] else None,
            _first_difference(outputs[name], reference),
            shapes.get(name, ""),
        )
        for name in systems
    }


def _print_results(results: list[dict], systems: dict, args, target) -> None:
    """The table of every prompt and system, then each system's mean speed-up over the target alone."""
    from .common import runtime_line

    exact = target.dtype == torch.float32
    print(
        f"Greedy, {args.max_new_tokens} new tokens, median of {args.repeats} interleaved runs; " + runtime_line(target)
    )
    print(
        '| prompt | system | tokens/s | speed-up | τ | shape chosen (`draft_shape="auto"`) | output vs the target alone |'
    )
    print("|---|---|---:|---:|---:|---|---|")
    for i, row in enumerate(results, 1):
        base = row["target alone"][0]
        for name, (tps, tau, diff, shape) in row.items():
            if name == "target alone":
                same = "—"
            elif diff is None:
                same = "identical"
            else:
                same = f"DIFFERS from token {diff}" + ("" if exact else " (bf16 rounding, see README)")
            tau_text = f"{tau:.2f}" if tau is not None else ""
            print(f"| {i} | {name} | {tps:.1f} | {tps / base:.2f}x | {tau_text} | {shape or '—'} | {same} |")
    print("\nMean speed-up over the target alone:")
    for name in systems:
        if name != "target alone":
            mean = statistics.mean(row[name][0] / row["target alone"][0] for row in results)
            print(f"  {name:18s} {mean:.2f}x")


def _run(args) -> int:
    from transformers import TextStreamer

    from ..heads_slimspec import with_merged_head
    from ..targets import embedded_target

    torch.set_grad_enabled(False)
    target, tokenizer, drafter = _load_demo_models(args)
    systems = {
        "target alone": {},
        "SlimSpec chain": {"assistant_model": drafter, "draft_lookup": False, "draft_tree_size": 0},
        "SlimSpec defaults": {"assistant_model": drafter},  # the drafter's generation_config
        "prompt lookup": {"prompt_lookup_num_tokens": 10},
    }
    if args.merged_head:
        systems["SlimSpec, full-size head"] = {"assistant_model": with_merged_head(drafter)}
    common = {"max_new_tokens": args.max_new_tokens, "do_sample": False}
    stops = embedded_target(args.target).stop_strings  # a base model's answer ends where it asks itself a question
    if stops:
        common.update(stop_strings=list(stops), tokenizer=tokenizer)
    streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    results = []  # per prompt: {system: (tok/s, τ, first difference)}
    for kind, prompt in PROMPTS[args.target]:
        inputs = encode_demo_prompt(tokenizer, kind, prompt, target.device)
        print(f">>> {tokenizer.decode(inputs['input_ids'][0], skip_special_tokens=True)}")
        target.generate(**inputs, assistant_model=drafter, streamer=streamer, **common)  # the drafter's defaults
        print()
        results.append(_time_systems(target, inputs, systems, common, args.repeats))

    _print_results(results, systems, args, target)
    exact = target.dtype == torch.float32
    if exact and any(row[name][2] is not None for row in results for name in row):
        print("ERROR: in fp32 speculative greedy output must equal the target's; it did not.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
