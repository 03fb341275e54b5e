"""Old decoding core against the current one, and the sampling shapes, side by side in one run.

The old core is the shipped drafter folder of an earlier commit loaded as remote code (`trust_remote_code=True`):
its files install their own `generate()` hooks, which coexist with the current wrapper (each drafter decodes with
its own code). Every prompt runs every system in turn (interleaved, the order rotating from prompt to prompt), with
the same seed per prompt.

    OMP_NUM_THREADS=1 python experiments/decoding_core/compare_cores.py --old-commit 7f49308 \
        --dataset mt_bench --limit 1 --max-new-tokens 128 --temperature 0.7 --top-p 0.95 --dtype float32

`--batch-size B` generates left-padded batches of B questions instead (every system each batch in turn; tokens
counted per row up to its EOS, as `slimspec bench --batch-sizes` does).
"""

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM
from transformers.dynamic_module_utils import get_class_from_dynamic_module

import slimspec_hf
from slimspec_hf.evaluation.batching import left_padded_batch, new_token_counts
from slimspec_hf.evaluation.benchmark import default_questions_path, load_questions
from slimspec_hf.evaluation.timing import encode_prompt, sampling_kwargs
from slimspec_hf.paths import embedded_drafter_dir


REPO = Path(__file__).resolve().parents[2]


def old_drafter_folder(commit: str, into: Path) -> Path:
    folder = "drafters/smollm2-135m-instruct-slimspec"
    archive = subprocess.run(["git", "archive", commit, folder], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / folder


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-commit", default=None, help="also run the shipped drafter of this commit (old core)")
    parser.add_argument("--dataset", default="mt_bench")
    parser.add_argument("--limit", type=int, default=1, help="questions per category")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=1, help="questions per generate() call (left padded)")
    parser.add_argument(
        "--systems",
        default="default",
        help="semicolon-separated NAME=JSON of generate() settings for the current drafter; 'default' = its defaults",
    )
    parser.add_argument("--output", default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    target, tokenizer = slimspec_hf.load_embedded_target(dtype=args.dtype)
    new = AutoModelForCausalLM.from_pretrained(embedded_drafter_dir(), dtype=target.dtype)
    systems = {"target": (None, {})}
    for spec in args.systems.split(";"):
        name, _, settings = spec.partition("=")
        systems[name] = (new, json.loads(settings) if settings else {})
    if args.old_commit:
        folder = old_drafter_folder(args.old_commit, Path(tempfile.mkdtemp()))
        # the folder's own code (remote code), not the registered class of the installed package
        old_class = get_class_from_dynamic_module("modeling_slimspec.SlimSpecDrafterForCausalLM", str(folder))
        old = old_class.from_pretrained(folder, dtype=target.dtype)
        assert type(old).__module__.startswith("transformers_modules"), type(old).__module__
        systems[f"old@{args.old_commit}"] = (old, {})

    questions, seen = [], {}
    for question in load_questions(default_questions_path(args.dataset), dataset=args.dataset):
        seen[question["subcategory"]] = seen.get(question["subcategory"], 0) + 1
        if seen[question["subcategory"]] <= args.limit:  # the first `limit` of each category (MT-Bench: 8)
            questions.append(question)
    sample = sampling_kwargs(args.temperature, top_p=args.top_p, top_k=0 if args.temperature else None)
    totals = {name: {"tokens": 0, "seconds": 0.0, "rounds": 0, "accepted": 0} for name in systems}
    batches = [questions[i : i + args.batch_size] for i in range(0, len(questions), args.batch_size)]
    eos = {tokenizer.eos_token_id}
    for i, batch in enumerate(batches):
        if args.batch_size == 1:
            inputs = encode_prompt(tokenizer, batch[0]["prompt"])
        else:
            inputs = left_padded_batch(tokenizer, [q["prompt"] for q in batch], target.device)
        names = list(systems)
        for name in names[i % len(names) :] + names[: i % len(names)]:  # the order rotates from batch to batch
            drafter, settings = systems[name]
            torch.manual_seed(1000 + i)
            kwargs = dict(
                max_new_tokens=args.max_new_tokens, pad_token_id=tokenizer.eos_token_id, **sample, **settings
            )
            if drafter is not None:
                kwargs["assistant_model"] = drafter
            start = time.perf_counter()
            out = target.generate(**inputs, **kwargs)
            seconds = time.perf_counter() - start
            row = totals[name]
            row["tokens"] += sum(new_token_counts(out, inputs["input_ids"].shape[1], eos))
            row["seconds"] += seconds
            if drafter is not None:
                stats = drafter.last_generation_stats
                row["rounds"] += stats.rounds
                row["accepted"] += stats.accepted_tokens
        print(f"batch {i + 1}/{len(batches)} done", flush=True)
    base = totals["target"]["tokens"] / totals["target"]["seconds"]
    print(
        f"\n{args.dataset}, {len(questions)} prompts × {args.max_new_tokens} tokens, batches of {args.batch_size}, "
        f"T {args.temperature}, top-p {args.top_p}, {args.dtype}, {args.threads} thread(s)\n"
    )
    print("| system | tok/s | vs target | τ |\n|---|---:|---:|---:|")
    for name, row in totals.items():
        speed = row["tokens"] / row["seconds"]
        tau = (row["accepted"] + row["rounds"]) / row["rounds"] if row["rounds"] else float("nan")
        row.update(tokens_per_second=speed, speedup=speed / base, tau=tau)
        print(f"| {name} | {speed:.1f} | {speed / base:.2f}× | {tau:.2f} |")
    if args.output:
        Path(args.output).write_text(json.dumps({"args": vars(args), "rows": totals}, indent=2) + "\n")


if __name__ == "__main__":
    main()
