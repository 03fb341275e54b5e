"""Side-by-side decoding settings of one drafter on the embedded target: tok/s, speed-up over the target alone, τ.

    OMP_NUM_THREADS=1 python experiments/draft_settings/bench_draft_settings.py [--dtype bfloat16] [--dataset mt_bench] [--per-category 1]
        [--max-new-tokens 128] [--systems target,k1,k2,k3,hk1,pld]

A one-off for choosing the shipped drafter's `generation_config` (docs/results.md): every system runs on every
prompt, interleaved prompt by prompt, greedy, one thread. Systems (all with the shipped drafter unless named):
`target` alone; `kN` a chain of N (`draft_lookup=False`); `hkN` hybrid with lookup at k = N (`draft_lookup=True`);
`hyb` the drafter's own defaults; `hyb_m1`/`hyb_m2`/`hyb_m3` hybrid trusting 1/2/3-token matches; `hyb_noext`
without extending chains by lookup; `tree8`/`tree16` dynamic trees 8/3/4 and 16/4/4, `htree8`/`htree16` the same with
the lookup draft grafted on; `tree:S/D/K`, `htree:S/D/K` any tree shape; `pld` transformers' prompt lookup
(`prompt_lookup_num_tokens=10`).

`--tree-baseline REV` also runs every tree system with `tree_slimspec.py` as of git revision REV (rows NAME@REV), in
the same run, for before/after comparisons of the tree decoder.
"""

import argparse
import contextlib
import json

import torch


def _tree_decoding_at(revision: str):
    """`tree_decoding` of `src/slimspec_hf/tree_slimspec.py` at git `revision`, loaded inside the package (its
    relative imports resolve to the installed siblings)."""
    import importlib.util
    import subprocess
    import tempfile
    from pathlib import Path

    source = subprocess.run(
        ["git", "show", f"{revision}:src/slimspec_hf/tree_slimspec.py"], check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "tree_slimspec_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("slimspec_hf._tree_slimspec_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tree_decoding


@contextlib.contextmanager
def _tree_decoder(decoding):
    """Routes `generate()`'s tree decoding to `decoding` (the hook imports `tree_decoding` at each call)."""
    import slimspec_hf.tree_slimspec as tree_module

    installed = tree_module.tree_decoding
    tree_module.tree_decoding = decoding or installed
    try:
        yield
    finally:
        tree_module.tree_decoding = installed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--dataset", default="mt_bench", choices=["mt_bench", "spec_bench"])
    parser.add_argument("--per-category", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--systems", default="target,k1,k2,k3,hk1,pld")
    parser.add_argument("--drafter", default=None, help="default: the shipped embedded drafter")
    parser.add_argument("--tree-baseline", default=None, metavar="REV", help="also run trees as of git revision REV")
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
    decoders = {}  # system -> tree_decoding to run it with (default: the installed one)
    if args.tree_baseline:
        baseline = _tree_decoding_at(args.tree_baseline)
        for name in [n for n in names if "tree" in n]:
            systems[f"{name}@{args.tree_baseline}"] = systems[name]
            decoders[f"{name}@{args.tree_baseline}"] = baseline
            names.insert(names.index(name) + 1, f"{name}@{args.tree_baseline}")
    unknown = [n for n in names if n not in systems]
    if unknown or "target" not in names:
        raise SystemExit(f"--systems: unknown {unknown} (or no `target`); choose from {sorted(systems)}")

    by_category: dict[str, list[str]] = {}
    with open(default_questions_path(args.dataset), encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            kept = by_category.setdefault(row["category"], [])
            if len(kept) < args.per_category:
                kept.append(row["turns"][0])
    totals = {n: [0, 0.0, 0, 0] for n in names}  # tokens, seconds, accepted, rounds
    per_category: dict[str, dict[str, list]] = {}
    for category, prompts in by_category.items():
        for prompt in prompts:
            inputs = encode_prompt(tokenizer, prompt, target.device)
            for name in names:
                with torch.inference_mode(), _tree_decoder(decoders.get(name)), Timer(target.device) as timer:
                    out = target.generate(
                        **inputs, max_new_tokens=args.max_new_tokens, do_sample=False, **systems[name]
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
        f"{args.dataset}, {sum(map(len, by_category.values()))} prompts, {args.max_new_tokens} new tokens, "
        f"dtype {args.dtype}, 1 thread, greedy, interleaved"
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


if __name__ == "__main__":
    main()
