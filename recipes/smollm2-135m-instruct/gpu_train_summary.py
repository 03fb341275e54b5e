"""Summary of a `recipes/*/gpu.sh` run: the data phase (conversations regenerated) and the training phase (steps,
tokens, tokens/s, the logged loss/accuracy curve), as summary.json and summary.md.

    python recipes/smollm2-135m-instruct/gpu_train_summary.py --out DIR --data-dir DATA --new-shards S1 [S2 ...] --output-dir DRAFTER \
        --seconds setup=40 data=200 train=250 --status data=0 train=0 [--setting key=value ...]
"""

import argparse
import json
import re
from collections import Counter
from pathlib import Path


def _pairs(items: list[str]) -> dict:
    pairs = {}
    for item in items or []:
        key, _, value = item.partition("=")
        try:
            pairs[key] = json.loads(value)
        except json.JSONDecodeError:
            pairs[key] = value
    return pairs


def data_summary(data_dir: Path, new_shards: list[Path], seconds: float | None) -> dict:
    from slimspec_hf.training.data import completed_ids

    rows = []
    for shard in new_shards:
        for line in shard.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a truncated last line of a stopped run: not a conversation
                pass
    return {
        "new_conversations": len(rows),
        "finish_reasons": dict(Counter(row.get("finish_reason") for row in rows)),
        "conversations_per_s": round(len(rows) / seconds, 2) if seconds else None,  # loading included
        "conversations_in_folder": len(completed_ids(data_dir)) if data_dir.is_dir() else 0,
        "new_shards": [{"name": s.name, "bytes": s.stat().st_size} for s in new_shards],
    }


def train_summary(output_dir: Path) -> dict:
    from slimspec_hf.commands.compare_runs import tau_teacher_forced

    state_path = output_dir / "trainer_state.json"
    if not state_path.is_file():
        return {"error": f"no {state_path}"}
    state = json.loads(state_path.read_text())
    results = output_dir / "train_results.json"
    results = json.loads(results.read_text()) if results.is_file() else {}
    curve = [row for row in state["log_history"] if "loss" in row and "step" in row]
    tokens = sum(row.get("num_tokens", 0) for row in state["log_history"])
    runtime = results.get("train_runtime")
    last = curve[-1] if curve else {}
    acc = [last[key] for key in sorted((k for k in last if re.fullmatch(r"acc_\d+", k)), key=lambda k: int(k[4:]))]
    return {
        "steps": state.get("global_step"),
        "max_steps": state.get("max_steps"),
        "stopped_by_time": bool(state.get("max_steps")) and state.get("global_step", 0) < state["max_steps"],
        "tokens": tokens,
        "train_runtime_s": runtime,
        "tokens_per_s": round(tokens / runtime, 1) if runtime else None,
        "s_per_step": round(runtime / state["global_step"], 3) if runtime and state.get("global_step") else None,
        "train_loss": round(results["train_loss"], 4) if "train_loss" in results else None,
        "last_logged": last,
        "tau_tf_last": round(tau_teacher_forced(acc), 3) if acc else None,
        "curve": curve,
    }


def render(summary: dict) -> str:
    lines = ["# GPU run: regenerate data, train the drafter", ""]
    lines += ["| phase | seconds | exit status |", "|---|---:|---:|"]
    for phase, seconds in summary["seconds"].items():
        lines.append(f"| {phase} | {seconds} | {summary['status'].get(phase, '')} |")
    lines += ["", "Settings: " + ", ".join(f"`{k}={v}`" for k, v in summary["settings"].items()), ""]
    data = summary["data"]
    lines += [
        f"**Data**: {data['new_conversations']} new conversations ({data['conversations_per_s']} /s), "
        f"finish reasons {data['finish_reasons']}; {data['conversations_in_folder']} in the folder now.",
        "",
    ]
    train = summary["train"]
    if "error" in train:
        lines.append(f"**Training**: {train['error']}")
        return "\n".join(lines) + "\n"
    lines += [
        f"**Training**: {train['steps']} steps (max_steps {train['max_steps']}, stopped by the clock: "
        f"{train['stopped_by_time']}), {train['tokens']} tokens in {train['train_runtime_s']} s = "
        f"{train['tokens_per_s']} tokens/s, {train['s_per_step']} s/step; mean train loss {train['train_loss']}; "
        f"τ_tf of the last logged window {train['tau_tf_last']}.",
        "",
    ]
    curve = train["curve"]
    if curve:
        accs = sorted((k for k in curve[-1] if re.fullmatch(r"acc_\d+", k)), key=lambda k: int(k[4:]))
        lines += ["| step | loss | " + " | ".join(accs) + " | tokens |", "|---:|---:|" + "---:|" * (len(accs) + 1)]
        for row in curve:
            cells = [str(row["step"]), f"{row['loss']:.4f}", *[f"{row.get(k, float('nan')):.3f}" for k in accs]]
            lines.append("| " + " | ".join(cells) + f" | {row.get('num_tokens', '')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="where summary.json and summary.md go")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--new-shards", nargs="*", default=[])
    parser.add_argument("--output-dir", required=True, help="the drafter's training output folder")
    parser.add_argument("--seconds", nargs="*", default=[], help="phase=seconds")
    parser.add_argument("--status", nargs="*", default=[], help="phase=exit status")
    parser.add_argument("--setting", nargs="*", default=[], help="key=value, reported as given")
    args = parser.parse_args(argv)
    seconds = _pairs(args.seconds)
    summary = {
        "settings": _pairs(args.setting),
        "seconds": seconds,
        "status": _pairs(args.status),
        "data": data_summary(Path(args.data_dir), [Path(s) for s in args.new_shards], seconds.get("data")),
        "train": train_summary(Path(args.output_dir)),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(render(summary))
    print(render(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
