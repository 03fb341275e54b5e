# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Compare training runs that share data, schedule and seed (the head alone differing) on their logged acceptance.

    slimspec compare-runs outputs/v1-full outputs/smollm2-135m-instruct-slimspec outputs/v1-rank36 \
        [--reference v1-full] [--window 50] [--curve]

Each run reads each conversation once (the recipes make one pass), so the top-1 agreement a run logs at step s is
measured on conversations it has not been trained on yet: a progressive held-out estimate, free, and from the same
batches for every run. For each run this prints, over the last `window` steps that every run has logged (so a run
still in progress is compared at equal steps), the token-weighted agreement acc_k of each TTT step k with the
target's top-1, and

    τ_tf = 1 + Σ_k Π_{j≤k} acc_j

the acceptance length those rates give if the steps were independent (teacher-forced, so an estimate of the
greedy τ, not a measurement of it), with ρ_tf = τ_tf / τ_tf(reference). `--curve` adds acc_0 per logged step.
"""

import argparse
import json
import re
from pathlib import Path


def find_state(run: Path) -> Path:
    """The trainer_state.json of a run folder: its own, else the one of its latest checkpoint."""
    if (run / "trainer_state.json").is_file():
        return run / "trainer_state.json"
    checkpoints = sorted(
        (p for p in run.glob("checkpoint-*") if re.fullmatch(r"checkpoint-\d+", p.name)),
        key=lambda p: int(p.name.split("-")[1]),
    )
    for checkpoint in reversed(checkpoints):
        if (checkpoint / "trainer_state.json").is_file():
            return checkpoint / "trainer_state.json"
    raise FileNotFoundError(
        f"run {str(run)!r} has no trainer_state.json (nor a checkpoint-N/ with one): pass a `slimspec train` "
        "output_dir that has saved at least one checkpoint."
    )


def head_label(run: Path, state_path: Path) -> str:
    for folder in (run, state_path.parent):
        config = folder / "config.json"
        if config.is_file():
            cfg = json.loads(config.read_text())
            head = cfg.get("head_type", "?")
            if head == "low_rank":
                return f"low-rank r={cfg.get('head_rank')}"
            if head == "trimmed":
                return f"trimmed K={cfg.get('draft_vocab_size')}"
            return head
    return "?"


def logged_rows(state_path: Path) -> list[dict]:
    history = json.loads(state_path.read_text())["log_history"]
    return [row for row in history if "acc_0" in row and "step" in row]


def window_acc(rows: list[dict], first: int, last: int) -> list[float]:
    """Token-weighted mean of acc_k over the logged rows with first < step ≤ last."""
    picked = [row for row in rows if first < row["step"] <= last]
    if not picked:
        raise ValueError(f"no logged acceptance between steps {first} and {last}; lower --window.")
    num_steps = len([key for key in picked[0] if re.fullmatch(r"acc_\d+", key)])
    weights = [row.get("num_tokens", 1) for row in picked]
    total = sum(weights)
    return [sum(w * row[f"acc_{k}"] for w, row in zip(weights, picked)) / total for k in range(num_steps)]


def tau_teacher_forced(acc: list[float]) -> float:
    tau, chain = 1.0, 1.0
    for rate in acc:
        chain *= rate
        tau += chain
    return tau


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slimspec compare-runs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", help="`slimspec train` output folders (NAME=PATH to rename one)")
    parser.add_argument("--reference", default=None, help="run name to divide by (default: the first run)")
    parser.add_argument("--window", type=int, default=50, help="steps, ending at the last step every run logged")
    parser.add_argument("--curve", action="store_true", help="also print acc_0 at every logged step")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.window < 1:
        parser.error(f"--window must be a positive number of steps, got {args.window}.")

    runs = {}
    for spec in args.runs:
        name, _, path = spec.rpartition("=") if "=" in spec else (Path(spec).name, "", spec)
        run = Path(path)
        state = find_state(run)
        runs[name] = {"head": head_label(run, state), "rows": logged_rows(state)}
        if not runs[name]["rows"]:
            raise ValueError(f"run {name!r} ({state}) has logged no acc_k yet.")
    reference = args.reference or next(iter(runs))
    if reference not in runs:
        parser.error(f"--reference {reference!r} is not one of the runs: {', '.join(runs)}.")

    last = min(max(row["step"] for row in run["rows"]) for run in runs.values())
    first = max(last - args.window, 0)
    for run in runs.values():
        run["acc"] = window_acc(run["rows"], first, last)
        run["tau"] = tau_teacher_forced(run["acc"])
    tau_ref = runs[reference]["tau"]

    num_steps = len(runs[reference]["acc"])
    header = ["run", "head", *[f"acc_{k}" for k in range(num_steps)], "τ_tf", f"ρ_tf vs {reference}"]
    print(f"Logged top-1 agreement, steps {first + 1}–{last} (token-weighted)\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|")
    for name, run in runs.items():
        cells = [
            name,
            run["head"],
            *[f"{a:.3f}" for a in run["acc"]],
            f"{run['tau']:.3f}",
            f"{run['tau'] / tau_ref:.3f}",
        ]
        print("| " + " | ".join(cells) + " |")

    if args.curve:
        steps = sorted({row["step"] for run in runs.values() for row in run["rows"] if row["step"] <= last})
        print("\nacc_0 per logged step\n")
        print("| step | " + " | ".join(runs) + " |")
        print("|---:|" + "---:|" * len(runs))
        for step in steps:
            cells = []
            for run in runs.values():
                value = next((row["acc_0"] for row in run["rows"] if row["step"] == step), None)
                cells.append("" if value is None else f"{value:.3f}")
            print(f"| {step} | " + " | ".join(cells) + " |")
    return 0


__all__ = ["find_state", "head_label", "logged_rows", "window_acc", "tau_teacher_forced", "build_parser", "main"]
