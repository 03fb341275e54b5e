"""One-off measurement: dynamic-tree drafting vs chain drafting vs the target alone.

Greedy, interleaved (every method runs on a prompt before the next prompt), one MT-Bench first turn per category,
on the embedded SmolLM2-135M-Instruct target with the shipped drafter. Prints a markdown table per dtype.

    OMP_NUM_THREADS=1 .venv/bin/python experiments/tree_sizes/bench_tree.py --dtypes bfloat16 float32 --max-new-tokens 128
"""

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from slimspec_hf import load_embedded_target
from slimspec_hf.tree_slimspec import slimspec_tree_generate


ROOT = Path(__file__).resolve().parents[2]


def first_turns(path: Path, count: int) -> list[tuple[str, str]]:
    seen, prompts = set(), []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row["category"] not in seen:
            seen.add(row["category"])
            prompts.append((row["category"], row["turns"][0]))
    return prompts[:count]


def parse_tree(text: str) -> tuple[int, int, int]:
    size, depth, top_k = (int(v) for v in text.split("/"))
    return size, depth, top_k


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=6, help="categories (one first turn each)")
    parser.add_argument("--chain-k", type=int, default=3)
    parser.add_argument(
        "--trees", nargs="+", default=["8/3/4", "8/4/2", "16/4/4", "16/6/4", "32/5/8"], help="size/depth/top_k"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs per prompt and method (interleaved); the fastest one counts"
    )
    parser.add_argument(
        "--data", default=str(ROOT.parent / "shared" / "data" / "eval" / "mt_bench" / "question.jsonl")
    )
    parser.add_argument("--drafter", default=str(ROOT / "drafters" / "smollm2-135m-instruct-slimspec"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    prompts = first_turns(Path(args.data), args.prompts)
    trees = [parse_tree(t) for t in args.trees]

    for dtype_name in args.dtypes:
        dtype = getattr(torch, dtype_name)
        target, tokenizer = load_embedded_target(dtype=dtype)
        drafter = AutoModelForCausalLM.from_pretrained(args.drafter, dtype=dtype).eval()
        methods = {"target": {}, f"chain k={args.chain_k}": {"assistant_model": drafter}}
        methods[f"chain k={args.chain_k}"]["num_assistant_tokens"] = args.chain_k
        for size, depth, top_k in trees:
            methods[f"tree {size}/{depth}/{top_k}"] = dict(
                custom_generate=slimspec_tree_generate,
                drafter=drafter,
                tree_size=size,
                tree_depth=depth,
                tree_top_k=top_k,
            )
        totals = {name: {"seconds": 0.0, "tokens": 0, "rounds": 0, "accepted": 0, "same": 0} for name in methods}
        warm = tokenizer.apply_chat_template(
            [{"role": "user", "content": "Hi"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        for kwargs in methods.values():
            target.generate(**warm, max_new_tokens=8, do_sample=False, **kwargs)
        for category, question in prompts:
            inputs = tokenizer.apply_chat_template(
                [{"role": "user", "content": question}],
                add_generation_prompt=True,
                return_tensors="pt",
                return_dict=True,
            )
            reference = None
            best, outputs = {}, {}
            # On a shared machine the fastest of a few interleaved runs is the least noisy.
            for _ in range(args.repeats):
                for name, kwargs in methods.items():
                    start = time.perf_counter()
                    out = target.generate(**inputs, max_new_tokens=args.max_new_tokens, do_sample=False, **kwargs)
                    best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
                    stats = drafter.last_generation_stats if name != "target" else None
                    outputs[name] = (out[0, inputs["input_ids"].shape[1] :].tolist(), stats)
            for name in methods:
                new, stats = outputs[name]
                seconds = best[name]
                reference = new if reference is None else reference
                row = totals[name]
                row["seconds"] += seconds
                row["tokens"] += len(new)
                row["same"] += int(new == reference)
                if stats is not None:
                    row["rounds"] += stats.rounds
                    row["accepted"] += stats.accepted_tokens
                print(f"{dtype_name} {category:<12} {name:<16} {len(new) / seconds:6.1f} tok/s", flush=True)

        base = totals["target"]["tokens"] / totals["target"]["seconds"]
        print(
            f"\n### {dtype_name}, {args.threads} thread(s), {len(prompts)} prompts x {args.max_new_tokens} new tokens\n"
        )
        print("| method | τ | tok/s | vs target | same text as target |")
        print("|---|---|---|---|---|")
        for name, row in totals.items():
            speed = row["tokens"] / row["seconds"]
            tau = (row["accepted"] + row["rounds"]) / row["rounds"] if row["rounds"] else float("nan")
            tau_text = "–" if name == "target" else f"{tau:.2f}"
            print(f"| {name} | {tau_text} | {speed:.1f} | {speed / base:.2f}x | {row['same']}/{len(prompts)} |")
        print(flush=True)


if __name__ == "__main__":
    main()
