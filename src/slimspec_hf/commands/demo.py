# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`make demo`: SlimSpec speculative decoding on the embedded SmolLM2-135M-Instruct, measured in the same run.

Loads the embedded target and the shipped drafter (`drafters/smollm2-135m-instruct-slimspec`), streams answers to
a few chat prompts through `target.generate(**inputs, assistant_model=drafter)`, then times each prompt with and
without the drafter (interleaved, greedy) and prints tokens/s, the speed-up and the acceptance length τ.
"""

import argparse
import statistics
import sys
import warnings

import torch


PROMPTS = [
    "Explain in three sentences why the sky is blue.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Give me a short packing list for a weekend hiking trip.",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slimspec_hf.commands.demo", description=__doc__)
    parser.add_argument("--drafter", default=None, help="drafter folder (default: the shipped embedded drafter)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2, help="timed repeats per prompt and system")
    args = parser.parse_args(argv)

    from transformers import TextStreamer

    from slimspec_hf import load_embedded_drafter, load_embedded_target
    from slimspec_hf.evaluation.timing import encode_prompt, timed_generate

    torch.set_grad_enabled(False)
    print("Loading the embedded target SmolLM2-135M-Instruct (the first run dequantises its GGUF) ...")
    target, tokenizer = load_embedded_target(dtype=torch.float32)
    try:
        drafter = load_embedded_drafter(args.drafter, target=target)
        trained = True
    except FileNotFoundError as err:
        warnings.warn(
            f"{err}\nFalling back to an UNTRAINED drafter (SVD of the target's head): expect τ ≈ 1.", stacklevel=2
        )
        from slimspec_hf import SlimSpecDrafterConfig, SlimSpecDrafterForCausalLM

        drafter = SlimSpecDrafterForCausalLM(SlimSpecDrafterConfig.from_target_config(target.config)).eval()
        drafter.lm_head.init_from_dense(target.lm_head.weight)
        trained = False
    cfg = drafter.config
    print(
        f"Drafter: head_type={cfg.head_type} rank={cfg.head_rank} k={cfg.num_speculative_tokens} "
        f"draft_confidence_threshold={getattr(cfg, 'draft_confidence_threshold', None)} "
        f"target_layer_ids={cfg.target_layer_ids}{'' if trained else ' (untrained)'}\n"
    )

    kwargs = {"max_new_tokens": args.max_new_tokens, "do_sample": False}
    streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    rows = []
    for prompt in PROMPTS:
        inputs = encode_prompt(tokenizer, prompt)
        print(f">>> {prompt}")
        first = timed_generate(target, tokenizer, inputs, drafter=drafter, streamer=streamer, **kwargs)
        fast, plain = [], []
        for _ in range(args.repeats):  # interleaved so both systems share the machine's noise
            plain.append(timed_generate(target, tokenizer, inputs, **kwargs))
            fast.append(timed_generate(target, tokenizer, inputs, drafter=drafter, **kwargs))
        identical = all(p.text == first.text for p in plain)
        rows.append(
            (
                statistics.median(p.tokens_per_second for p in plain),
                statistics.median(f.tokens_per_second for f in fast),
                statistics.mean(f.acceptance_length for f in fast),
                identical,
            )
        )
        print()

    print("| prompt | target alone tok/s | SlimSpec tok/s | speed-up | τ | identical |")
    print("|---|---|---|---|---|---|")
    for i, (plain_tps, fast_tps, tau, identical) in enumerate(rows, 1):
        print(f"| {i} | {plain_tps:.1f} | {fast_tps:.1f} | {fast_tps / plain_tps:.2f}x | {tau:.2f} | {identical} |")
    plain_all = statistics.mean(r[0] for r in rows)
    fast_all = statistics.mean(r[1] for r in rows)
    tau_all = statistics.mean(r[2] for r in rows)
    print(
        f"| mean | {plain_all:.1f} | {fast_all:.1f} | {fast_all / plain_all:.2f}x | {tau_all:.2f} | "
        f"{all(r[3] for r in rows)} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
