"""Sampled decoding with the package's `draw` (inverse CDF) against the same decoding with `torch.multinomial`'s
draws (what the loop used before), interleaved batch by batch with the target alone, every system from the same seed.

    OMP_NUM_THREADS=1 python experiments/sampling_draw/ab.py --target embedded \
        --drafter drafters/smollm2-135m-instruct-slimspec --dataset mt_bench --limit 8 --batch-sizes 1 4 --out DIR

Prints one table (tokens/s and the ratio to the target alone per system, batch size) and writes it with the per-batch
rows under `--out`. `multinomial` swaps `draw` in the two modules that call it for one that also runs `torch.multinomial(w, n,
replacement=True)` on a spare generator and discards it: the same text as `draw`, at the cost the loop paid before
(sampled texts differ by far more than the sampler's cost, so unpaired draws hide it). Everything else is the
drafter's own settings at `--draft-shape`.
"""

import argparse
import json
import time
from pathlib import Path

import torch

from slimspec_hf import decoding_slimspec, drafting_slimspec
from slimspec_hf.costs_slimspec import new_token_counts
from slimspec_hf.evaluation.batching import left_padded_batch
from slimspec_hf.evaluation.benchmark import default_questions_path, load_questions
from slimspec_hf.targets import load_embedded_drafter, load_target


SPARE = torch.Generator().manual_seed(0)
DRAW = drafting_slimspec.draw


def multinomial(weights, n=1):
    """`draw`'s tokens at `torch.multinomial`'s cost: its draws run on a spare generator and are thrown away, so both
    systems emit the same tokens and their times differ by what the loop paid for multinomial (plus 0.07 ms a draw)."""
    torch.multinomial(weights, n, replacement=True, generator=SPARE)
    return DRAW(weights, n)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--drafter", required=True)
    parser.add_argument("--dataset", default="mt_bench")
    parser.add_argument("--categories", nargs="*")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--draft-shape", default="fixed")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target, tokenizer = load_target(args.target, dtype="bfloat16")
    drafter = load_embedded_drafter(args.drafter, target=target)
    questions = load_questions(default_questions_path(args.dataset), args.categories, args.limit, args.dataset)
    prompts = [q["prompt"] for q in questions]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = target.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
    common = dict(max_new_tokens=args.max_new_tokens, pad_token_id=pad, do_sample=True,
                  temperature=args.temperature, top_p=1.0, top_k=0)  # fmt: skip
    drafting = dict(assistant_model=drafter, draft_shape=args.draft_shape, draft_max_batch_size=0)
    systems = {
        "target": ({}, None),
        "draw": (drafting, DRAW),
        "multinomial": (drafting, multinomial),
    }

    def run(inputs, name):
        kwargs, sampler = systems[name]
        if sampler is not None:
            drafting_slimspec.draw = decoding_slimspec.draw = sampler
        start = time.perf_counter()
        with torch.inference_mode():
            out = target.generate(**inputs, **common, **kwargs)
        seconds = time.perf_counter() - start
        return sum(new_token_counts(out, inputs["input_ids"].shape[1], eos_ids)), seconds

    warm = left_padded_batch(tokenizer, prompts[:1], target.device)
    for name in systems:
        run(warm, name)
    rows = []
    for size in args.batch_sizes:
        batches = [prompts[i : i + size] for i in range(0, len(prompts) - size + 1, size)]
        for index, batch in enumerate(batches):
            inputs = left_padded_batch(tokenizer, batch, target.device)
            names = list(systems)
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                torch.manual_seed(index)
                tokens, seconds = run(inputs, name)
                rows.append({"batch_size": size, "batch": index, "system": name, "tokens": tokens, "seconds": seconds})
    lines = ["| B | system | tok/s | × target |", "|---:|---|---:|---:|"]
    for size in args.batch_sizes:
        rate = {}
        for name in systems:
            picked = [r for r in rows if r["batch_size"] == size and r["system"] == name]
            rate[name] = sum(r["tokens"] for r in picked) / sum(r["seconds"] for r in picked)
        lines += [f"| {size} | {n} | {rate[n]:.1f} | {rate[n] / rate['target']:.2f}× |" for n in systems]
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(table + "\n")
    (out / "rows.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
