"""The target alone, the drafter's fixed shape and `draft_shape="auto"`, interleaved per prompt (greedy); prints each
call and the tokens/s of the last pass, checking every output against the target alone.

    OMP_NUM_THREADS=1 python experiments/draft_shape_auto/compare.py [--target embedded]
        [--drafter drafters/smollm2-135m-instruct-slimspec] [--dtype auto] [--max-new-tokens 96] [--passes 2]
"""

import argparse
import time

import torch

from slimspec_hf.commands.common import load_models
from slimspec_hf.evaluation.timing import encode_prompt


PROMPTS = [
    "Explain in three sentences why the sky is blue.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Give me three tips for writing a good email.",
    "What is the capital of France and why is it famous?",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--drafter", default="drafters/smollm2-135m-instruct-slimspec")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--passes", type=int, default=2, help="the last pass is the one reported")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    target, tokenizer, (drafter,) = load_models(args.target, [args.drafter], dtype=args.dtype, threads=1)
    systems = {
        "target alone": {},
        "fixed": {"assistant_model": drafter, "draft_shape": "fixed"},
        "auto": {"assistant_model": drafter, "draft_shape": "auto"},
    }
    totals = {name: [0, 0.0] for name in systems}
    for last in [False] * (args.passes - 1) + [True]:
        for prompt in PROMPTS:
            inputs = encode_prompt(tokenizer, prompt)
            reference = None
            for name, kwargs in systems.items():
                start = time.perf_counter()
                out = target.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=False, **kwargs)
                seconds = time.perf_counter() - start
                new = out.shape[1] - inputs["input_ids"].shape[1]
                reference = out if reference is None else reference
                shape = drafter.last_generation_stats.draft_shape if name == "auto" else ""
                same = "identical" if torch.equal(out, reference) else "DIFFERS"
                print(f"{prompt[:24]!r} {name}: {new / seconds:.1f} tokens/s, {same} {shape}", flush=True)
                if last:
                    totals[name][0] += new
                    totals[name][1] += seconds
    base = totals["target alone"][0] / totals["target alone"][1]
    print(f"dtype {target.dtype}, 1 thread; last pass:")
    for name, (tokens, seconds) in totals.items():
        print(f"  {name:12s} {tokens / seconds:6.2f} tokens/s  {tokens / seconds / base:.2f}x")


if __name__ == "__main__":
    main()
