# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec compare-runs`: logged acceptance of runs compared at equal steps."""

import json
import subprocess
import sys
from pathlib import Path

import pytest


COMMAND = [sys.executable, "-m", "slimspec_hf.cli", "compare-runs"]


def _load():
    from slimspec_hf.commands import compare_runs

    return compare_runs


def _run_dir(root: Path, name: str, rows: list[tuple[int, int, list[float]]], head: dict, checkpoint: int | None):
    run = root / name
    folder = run / f"checkpoint-{checkpoint}" if checkpoint else run
    folder.mkdir(parents=True)
    history = [{"step": s, "num_tokens": n, **{f"acc_{k}": a for k, a in enumerate(acc)}} for s, n, acc in rows]
    history.append({"step": rows[-1][0], "train_runtime": 1.0})  # rows without acc_k are ignored
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    (run / "config.json").write_text(json.dumps(head))
    return run


def test_tau_teacher_forced():
    module = _load()
    assert module.tau_teacher_forced([]) == 1.0
    assert module.tau_teacher_forced([0.5, 0.5]) == pytest.approx(1 + 0.5 + 0.25)
    assert module.tau_teacher_forced([1.0] * 6) == 7.0


def test_window_is_token_weighted_and_bounded():
    module = _load()
    rows = [
        {"step": 10, "num_tokens": 100, "acc_0": 0.0},
        {"step": 20, "num_tokens": 300, "acc_0": 1.0},
        {"step": 30, "num_tokens": 100, "acc_0": 0.0},
    ]
    assert module.window_acc(rows, 10, 30) == [pytest.approx(0.75)]
    assert module.window_acc(rows, 0, 10) == [0.0]
    with pytest.raises(ValueError, match="--window"):
        module.window_acc(rows, 30, 40)


def test_compares_at_the_last_common_step(tmp_path):
    full = _run_dir(
        tmp_path,
        "full",
        [(10, 100, [0.2, 0.1]), (20, 100, [0.4, 0.2]), (30, 100, [0.9, 0.9])],
        {"head_type": "full"},
        checkpoint=None,
    )
    # still running: only step 20 is logged, in its latest checkpoint
    rank = _run_dir(
        tmp_path, "r36", [(10, 100, [0.1, 0.1]), (20, 100, [0.2, 0.1])], {"head_type": "low_rank", "head_rank": 36}, 20
    )
    out = subprocess.run(
        [*COMMAND, str(full), f"small={rank}", "--window", "10", "--curve"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "steps 11–20" in out
    full_row = next(line for line in out.splitlines() if line.startswith("| full |"))
    small_row = next(line for line in out.splitlines() if line.startswith("| small |"))
    assert "| 0.400 | 0.200 | 1.480 | 1.000 |" in full_row  # step 30 is outside the common horizon
    assert "low-rank r=36" in small_row and "| 0.200 | 0.100 | 1.220 |" in small_row
    assert f"| {1.22 / 1.48:.3f} |" in small_row
    assert "| 30 |" not in out  # the curve stops at the common horizon too


def test_missing_state_names_the_run(tmp_path):
    (tmp_path / "empty").mkdir()
    result = subprocess.run([*COMMAND, str(tmp_path / "empty")], capture_output=True, text=True)
    assert result.returncode != 0
    assert "has no trainer_state.json" in result.stderr
