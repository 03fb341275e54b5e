"""Batches of MT-Bench questions decoded plain, with `draft_shape="auto"`, and plain again, interleaved per batch;
prints each call's time, the rounds of each shape `auto` used, and every choice it made: the predicted speed-up, the
acceptance calibration and the four best candidates (tokens/s) — what `auto` believed against what the wall clock says.

    OMP_NUM_THREADS=1 python experiments/draft_shape_auto/batch_rounds.py [--batch-size 8] [--temperature 0]
        [--batches 4] [--drafter drafters/smollm2-135m-instruct-slimspec] [--dtype bfloat16]
"""

import argparse
import collections
import json
import time
from pathlib import Path

import torch

import slimspec_hf
from slimspec_hf import shapes_slimspec
from slimspec_hf.commands.common import load_models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--drafter", default="drafters/smollm2-135m-instruct-slimspec")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    target, tokenizer, (drafter,) = load_models(args.target, [args.drafter], dtype=args.dtype, threads=1)
    data = Path(slimspec_hf.__file__).parent / "evaluation" / "data" / "mt_bench.jsonl"
    questions = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines() if line.strip()]

    rounds, choices = collections.Counter(), []
    next_shape = shapes_slimspec.ShapeTuner.next_shape

    def logged(tuner, rows=None):
        shape = next_shape(tuner, rows)
        rounds[str(shape)] += 1
        if tuner.choice is not None and (not choices or choices[-1][0] is not tuner.choice):
            best = sorted(tuner.choice.predictions.items(), key=lambda kv: -kv[1])[:4]
            choices.append((tuner.choice, [(k, round(v, 1)) for k, v in best], round(tuner.calibration, 3)))
        return shape

    shapes_slimspec.ShapeTuner.next_shape = logged
    tokenizer.padding_side = "left"
    sampled = args.temperature > 0
    kwargs = dict(max_new_tokens=args.max_new_tokens, do_sample=sampled)
    if sampled:
        kwargs.update(temperature=args.temperature, top_p=1.0, top_k=0)
    for b in range(args.batches):
        batch = questions[b * args.batch_size : (b + 1) * args.batch_size]
        prompts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": q["turns"][0]}], tokenize=False, add_generation_prompt=True
            )
            for q in batch
        ]
        inputs = tokenizer(prompts, return_tensors="pt", padding=True)
        auto = {"assistant_model": drafter, "draft_shape": "auto"}
        for name, extra in (("plain", {}), ("auto", auto), ("plain", {})):
            rounds.clear()
            choices.clear()
            start = time.perf_counter()
            out = target.generate(**inputs, **extra, **kwargs)
            seconds = time.perf_counter() - start
            tokens = int((out[:, inputs.input_ids.shape[1] :] != tokenizer.pad_token_id).sum())
            print(f"batch {b} ({inputs.input_ids.shape[1]} prompt tokens) {name}: {tokens} tokens in {seconds:.2f} s")
            if name == "auto":
                print("  rounds by shape:", dict(rounds))
                print("  report:", drafter.last_generation_stats.draft_shape)
                for choice, best, calibration in choices:
                    print(f"  choice {choice.shape} predicted {choice.speedup:.3f} calibration {calibration}: {best}")


if __name__ == "__main__":
    main()
