"""Training throughput and loss curve of short SmolLM2 runs, one variant per call, compared side by side.

    # one run per variant (each appends a JSON line to --record); any SlimSpecConfig field can be overridden:
    python experiments/training_throughput/bench_training.py --name today --record runs.jsonl
    python experiments/training_throughput/bench_training.py --name bf16 --record runs.jsonl --bf16 true --target_dtype bfloat16
    # the table (tokens/s as a ratio to the first run that trained, loss / kl_0 / acc_0 at each logged step):
    python experiments/training_throughput/bench_training.py --table runs.jsonl

Every run trains `--steps` optimiser steps on the same conversations (`--max_samples` drawn with the same seed,
same batches), warm-started from the shipped drafter unless `--drafter_model` says otherwise. The time is
`trainer.train()` alone (the target and drafter loads and any feature caching are excluded); tokens are the
batches' real tokens. To time an older version of the package, run this script with `PYTHONPATH=<checkout>/src`.
"""

import argparse
import dataclasses
import json
import os
import resource
import sys
import time
import typing


DEFAULTS = {
    "dataset_path": "data/smollm2-135m-instruct/balanced_4k",
    "target_model": "embedded",
    "drafter_model": "drafters/smollm2-135m-instruct-slimspec",
    "max_length": 1024,
    "max_samples": 64,
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 1,
    "features": "online",
    "learning_rate": 2e-4,
    "lr_scheduler_type": "constant",
    "warmup_steps": 0,
    "logging_steps": 1,
    "save_strategy": "no",
    "report_to": "none",
    "use_cpu": True,
    "cpu_threads": 1,
    "disable_tqdm": True,
    "seed": 0,
    "data_seed": 0,
    "per_device_eval_batch_size": 4,
}


def _convert(field, value: str):
    """A command-line string as the SlimSpecConfig field's type (bool, int, float, else str)."""
    kinds = typing.get_args(field.type) or (field.type,)
    if value.lower() in ("none", "null") and type(None) in kinds:
        return None
    for kind in (bool, int, float):
        if kind in kinds or field.type is kind:
            return value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return value


def run(name: str, steps: int, record: str, overrides: list[str]) -> dict:
    from slimspec_hf.training.config import SlimSpecConfig
    from slimspec_hf.training.data import load_training_dataset
    from slimspec_hf.training.trainer import SlimSpecTrainer

    fields = {f.name: f for f in dataclasses.fields(SlimSpecConfig)}
    settings = dict(DEFAULTS)
    for key, value in zip(overrides[::2], overrides[1::2]):
        key = key.lstrip("-")
        if key not in fields:
            sys.exit(f"bench_training.py: error: unknown setting `{key}` (a SlimSpecConfig field).")
        settings[key] = _convert(fields[key], value)
    settings.update(max_steps=steps, output_dir=f"/tmp/slimspec-bench-training/{name}", overwrite_output_dir=True)
    dataset = load_training_dataset(settings.pop("dataset_path"))
    eval_path = settings.pop("eval_dataset_path", None)
    eval_dataset = load_training_dataset(eval_path) if eval_path else None
    trainer = SlimSpecTrainer(args=SlimSpecConfig(**settings), train_dataset=dataset, eval_dataset=eval_dataset)
    if trainer.args.features == "offline":
        trainer.cache_features()
    start = time.perf_counter()
    if steps > 0:  # 0: evaluate the drafter as it is
        trainer.train()
    train_s = time.perf_counter() - start
    evaluation = {}
    if eval_dataset is not None:  # teacher-forced on conversations the run never trained on
        metrics = trainer.evaluate()
        evaluation = {k[5:]: round(v, 4) for k, v in metrics.items() if k.startswith(("eval_acc_", "eval_kl_"))}
    logs = [h for h in trainer.state.log_history if "acc_0" in h and "eval_acc_0" not in h]
    tokens = sum(h["num_tokens"] for h in logs)
    import torch

    result = {
        "name": name,
        "package": os.path.dirname(sys.modules["slimspec_hf"].__file__),
        "settings": {k: v for k, v in settings.items() if k not in DEFAULTS or DEFAULTS[k] != v},
        "threads": torch.get_num_threads(),
        "steps": steps,
        "train_s": round(train_s, 1),
        "tokens": tokens,
        "tokens_per_s": round(tokens / train_s, 1) if tokens else 0.0,
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "eval": evaluation,
        "curve": [{"loss": h["loss"], "kl_0": h["kl_0"], "acc_0": h["acc_0"]} for h in logs],
    }
    with open(record, "a") as f:
        f.write(json.dumps(result) + "\n")
    print(json.dumps(result))
    return result


def table(record: str) -> None:
    runs = [json.loads(line) for line in open(record) if line.strip()]
    if not runs:
        sys.exit(f"bench_training.py: error: {record} holds no runs.")
    base = next((r["tokens_per_s"] for r in runs if r["tokens_per_s"]), 1.0)  # the first run that trained
    print(
        "| run | settings | threads | steps | tokens | train s | tokens/s | × first | kl_0 first→last | "
        "acc_0 first→last | mean kl_0 (all steps) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|")
    for r in runs:
        c = r["curve"] or [{"kl_0": float("nan"), "acc_0": float("nan")}]
        settings = " ".join(f"{k}={v}" for k, v in r["settings"].items() if k != "output_dir") or "(defaults)"
        mean_kl = sum(p["kl_0"] for p in c) / max(len(c), 1)
        print(
            f"| {r['name']} | {settings} | {r['threads']} | {r['steps']} | {r['tokens']} | {r['train_s']} | "
            f"{r['tokens_per_s']} | {r['tokens_per_s'] / base:.2f} | {c[0]['kl_0']:.3f}→{c[-1]['kl_0']:.3f} | "
            f"{c[0]['acc_0']:.3f}→{c[-1]['acc_0']:.3f} | {mean_kl:.3f} |"
        )
    evaluated = [r for r in runs if r.get("eval")]
    if evaluated:
        steps = sorted({k[4:] for r in evaluated for k in r["eval"] if k.startswith("acc_")}, key=int)
        print("\nHeld-out, teacher-forced (top-1 agreement with the target at TTT step k; KL at step 0):")
        print("| run | " + " | ".join(f"acc_{k}" for k in steps) + " | kl_0 |")
        print("|---|" + "---:|" * (len(steps) + 1))
        for r in evaluated:
            accs = " | ".join(f"{r['eval'].get(f'acc_{k}', float('nan')):.4f}" for k in steps)
            print(f"| {r['name']} | {accs} | {r['eval'].get('kl_0', float('nan')):.3f} |")
    print("\nPer-step kl_0 (same batches in every run):")
    for r in (r for r in runs if r["curve"]):
        print(f"  {r['name']:>12}: " + " ".join(f"{p['kl_0']:.3f}" for p in r["curve"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", help="a label for this run")
    parser.add_argument("--steps", type=int, default=8, help="optimiser steps (default 8)")
    parser.add_argument("--record", default="/tmp/slimspec-bench-training.jsonl", help="JSONL file runs append to")
    parser.add_argument("--table", metavar="RECORD", help="print the side-by-side table of a record file and exit")
    args, overrides = parser.parse_known_args()
    if args.table:
        table(args.table)
        return
    if not args.name:
        parser.error("--name is required for a run")
    if len(overrides) % 2:
        parser.error(f"settings come as `--key value` pairs; got {overrides}")
    run(args.name, args.steps, args.record, overrides)


if __name__ == "__main__":
    main()
