"""Side-by-side decoding settings of one drafter on the embedded target: tok/s, speed-up over the target alone, τ.

    OMP_NUM_THREADS=1 python experiments/draft_settings/bench_draft_settings.py [--dtype bfloat16] [--dataset mt_bench] [--per-category 1]
        [--max-new-tokens 128] [--systems target,k1,k2,k3,hk1,pld]

A one-off for choosing the shipped drafter's `generation_config` (docs/results.md): every system runs on every
prompt, interleaved prompt by prompt, greedy, one thread. Systems (all with the shipped drafter unless named):
`target` alone; `kN` a chain of N (`draft_lookup=False`); `hkN` hybrid with lookup at k = N (`draft_lookup=True`);
`hyb` the drafter's own defaults; `hyb_m1`/`hyb_m2`/`hyb_m3` hybrid trusting 1/2/3-token matches; `hyb_noext`
without extending chains by lookup; `tree8`/`tree16` dynamic trees 8/3/4 and 16/4/4, `htree8`/`htree16` the same with
the lookup draft grafted on; `tree:S/D/K`, `htree:S/D/K` any tree shape; `hyb+KEY=N+...` the defaults with lookup settings changed
(min, max, num, ext, branch: `draft_lookup_{min,max}_ngram`, `_num_tokens`, `_extend_ngram`, `_branch_ngram`); `pld` transformers' prompt lookup
(`prompt_lookup_num_tokens=10`).

`--temperature T` samples instead (every system on a prompt draws with the same seed); `--record FILE` appends the
run (per-category tokens and seconds of every system) as one JSON line.
"""

import argparse
import json
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--dataset", default="mt_bench", choices=["mt_bench", "spec_bench"])
    parser.add_argument("--prompts", default=None, help="a question jsonl of your own (default: --dataset's)")
    parser.add_argument("--per-category", type=int, default=1)
    parser.add_argument("--skip", type=int, default=0, help="skip the first N questions of each category")
    parser.add_argument("--categories", nargs="+", default=None, help="keep only these categories")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--systems", default="target,k1,k2,k3,hk1,pld")
    parser.add_argument("--drafter", default=None, help="default: the shipped embedded drafter")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy; else sampled at this temperature")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--record", default=None, help="JSONL file the run is appended to")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from slimspec_hf.commands.common import load_models
    from slimspec_hf.evaluation.benchmark import default_questions_path
    from slimspec_hf.evaluation.timing import Timer, encode_prompt
    from slimspec_hf.paths import embedded_drafter_dir

    drafter_path = args.drafter or str(embedded_drafter_dir())
    target, tokenizer, (drafter,) = load_models("embedded", [drafter_path], dtype=args.dtype, threads=1)
    systems = {"target": {}, "pld": {"prompt_lookup_num_tokens": 10}, "hyb": {"assistant_model": drafter}}
    for k in range(1, 7):
        systems[f"k{k}"] = {"assistant_model": drafter, "num_assistant_tokens": k, "draft_lookup": False}
        systems[f"hk{k}"] = {"assistant_model": drafter, "num_assistant_tokens": k, "draft_lookup": True}
    for n in (1, 2, 3):
        systems[f"hyb_m{n}"] = {"assistant_model": drafter, "draft_lookup": True, "draft_lookup_min_ngram": n}
    systems["hyb_noext"] = {"assistant_model": drafter, "draft_lookup": True, "draft_lookup_extend_ngram": 99}
    for size, depth, top_k in ((8, 3, 4), (16, 4, 4)):
        tree = {"draft_tree_size": size, "draft_tree_depth": depth, "draft_tree_top_k": top_k}
        systems[f"tree{size}"] = {"assistant_model": drafter, "draft_lookup": False, **tree}
        systems[f"htree{size}"] = {"assistant_model": drafter, "draft_lookup": True, **tree}
    names = args.systems.split(",")
    for name in names:  # any tree shape: tree:S/D/K, htree:S/D/K
        kind, _, shape = name.partition(":")
        if kind in ("tree", "htree") and shape.count("/") == 2:
            size, depth, top_k = map(int, shape.split("/"))
            tree = {"draft_tree_size": size, "draft_tree_depth": depth, "draft_tree_top_k": top_k}
            systems[name] = {"assistant_model": drafter, "draft_lookup": kind == "htree", **tree}
    keys = {
        "min": "min_ngram",
        "max": "max_ngram",
        "num": "num_tokens",
        "ext": "extend_ngram",
        "branch": "branch_ngram",
    }
    for name in names:  # the defaults with lookup settings changed: hyb+min=8+branch=1
        if name.startswith("hyb+"):
            changed = dict(pair.split("=") for pair in name.split("+")[1:])
            systems[name] = {"assistant_model": drafter, "draft_lookup": True}
            systems[name].update({f"draft_lookup_{keys[k]}": int(v) for k, v in changed.items()})
    unknown = [n for n in names if n not in systems]
    if unknown or "target" not in names:
        raise SystemExit(f"--systems: unknown {unknown} (or no `target`); choose from {sorted(systems)}")

    by_category: dict[str, list[str]] = {}
    seen: dict[str, int] = {}
    with open(args.prompts or default_questions_path(args.dataset), encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if args.categories and row["category"] not in args.categories:
                continue
            kept = by_category.setdefault(row["category"], [])
            seen[row["category"]] = seen.get(row["category"], 0) + 1
            if seen[row["category"]] > args.skip and len(kept) < args.per_category:
                kept.append(row["turns"][0])
    totals = {n: [0, 0.0, 0, 0] for n in names}  # tokens, seconds, accepted, rounds
    per_category: dict[str, dict[str, list]] = {}
    index = 0
    for category, prompts in by_category.items():
        for prompt in prompts:
            index += 1
            inputs = encode_prompt(tokenizer, prompt, target.device)
            for name in names:
                sampling = {"do_sample": True, "temperature": args.temperature, "top_k": 0, "top_p": 1.0}
                torch.manual_seed(args.seed + index)  # the same draws for every system
                with torch.inference_mode(), Timer(target.device) as timer:
                    out = target.generate(
                        **inputs,
                        max_new_tokens=args.max_new_tokens,
                        **(sampling if args.temperature > 0 else {"do_sample": False}),
                        **systems[name],
                    )
                new = out.shape[1] - inputs["input_ids"].shape[1]
                row = per_category.setdefault(category, {}).setdefault(name, [0, 0.0])
                row[0] += new
                row[1] += timer.seconds
                totals[name][0] += new
                totals[name][1] += timer.seconds
                if "assistant_model" in systems[name]:
                    stats = drafter.last_generation_stats
                    totals[name][2] += stats.accepted_tokens
                    totals[name][3] += stats.rounds
    base = totals["target"][0] / totals["target"][1]
    print(
        f"{args.prompts or args.dataset}, {sum(map(len, by_category.values()))} prompts, {args.max_new_tokens} new tokens, "
        f"dtype {args.dtype}, 1 thread, {f'T {args.temperature}' if args.temperature else 'greedy'}, interleaved"
    )
    print("| system | tok/s | speed-up | τ |\n|---|---:|---:|---:|")
    for name in names:
        tokens, seconds, accepted, rounds = totals[name]
        tau = f"{(accepted + rounds) / rounds:.2f}" if rounds else "–"
        print(f"| {name} | {tokens / seconds:.1f} | {tokens / seconds / base:.2f} | {tau} |")
    print("\n| category | " + " | ".join(names[1:]) + " |\n|---|" + "---:|" * (len(names) - 1))
    for category, rows in per_category.items():
        plain = rows["target"][0] / rows["target"][1]
        print(f"| {category} | " + " | ".join(f"{rows[n][0] / rows[n][1] / plain:.2f}" for n in names[1:]) + " |")
    if args.record:
        with open(args.record, "a", encoding="utf-8") as handle:
            run = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **vars(args)}
            handle.write(json.dumps({**run, "totals": totals, "per_category": per_category}) + "\n")


if __name__ == "__main__":
    main()
