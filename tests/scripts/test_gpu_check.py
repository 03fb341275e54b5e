"""`scripts/gpu_check.py` on the CPU with tiny settings: the folder a lent GPU machine sends back, its files and
keys; each step's time box; the shell script that wraps it parses. Lab tooling, not the package: these run with
`make test-slow`, not in `make test`."""

import importlib.util
import json
import subprocess
import sys

import pytest

from ..testing_utils import REPO_ROOT, SHARED_DATA


pytestmark = pytest.mark.slow


def _load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO_ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpu_check = _load_script()
CheckSettings, Step, plan_steps = gpu_check.CheckSettings, gpu_check.Step, gpu_check.plan_steps
render_summary, run_step = gpu_check.render_summary, gpu_check.run_step


FILES = {"summary.md", "summary.json", "tests.json", "bench_head.json", "bench.json", "bench_batch.json", "logs.txt"}


@pytest.mark.integration
def test_gpu_check_runs_on_the_cpu_and_writes_one_folder(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    monkeypatch.setenv("OUT", str(out))  # the default output folder on a lent machine
    # time boxes no machine load reaches: what is tested here is the folder, not the speed
    boxes = [item for step in ("tests", "bench-head", "bench", "bench-batch") for item in (f"--timeout-{step}", "600")]
    assert gpu_check.main(["--device", "cpu", "--dtype", "float32", "--tiny", "--budget", "3000", *boxes]) == 0
    names = {p.name for p in out.iterdir()}
    assert names == FILES and len(names) <= 8  # the lent machine sends back at most 8 files
    summary = json.loads((out / "summary.json").read_text())
    assert {"settings", "environment", "steps", "seconds"} <= set(summary)
    assert summary["environment"]["device"] == "cpu" and "torch" in summary["environment"]
    steps = {s["name"]: s for s in summary["steps"]}
    assert list(steps) == ["tests", "bench_head", "bench", "bench_batch"]
    assert steps["tests"]["status"] == steps["bench_head"]["status"] == "ok"
    assert steps["bench"]["status"] == ("ok" if (SHARED_DATA / "eval" / "mt_bench").is_dir() else "skipped")
    tests = json.loads((out / "tests.json").read_text())
    assert tests["passed"] >= 1 and tests["failed"] == 0 and tests["reports"][0]["identical"] is True
    head = json.loads((out / "bench_head.json").read_text())
    assert {"device", "peak_bandwidth_gbs", "measurements"} <= set(head) and head["device"] == "cpu"
    assert {"fraction_of_limit", "bandwidth_gbs", "fraction_of_bandwidth"} <= set(head["measurements"][0])
    if steps["bench"]["status"] == "ok":
        bench = json.loads((out / "bench.json").read_text())
        systems = {r["system"] for r in bench["results"]}
        assert {"target", "slimspec", "slimspec+lookup", "prompt_lookup"} <= systems
        sweep = json.loads((out / "bench_batch.json").read_text())
        assert {(r["batch_size"], r["system"]) for r in sweep["summary"]} >= {(2, "target"), (2, "slimspec")}
    text = (out / "summary.md").read_text()
    headings = ("# SlimSpec GPU check", "## Device tests", "## LM heads", "## Speculative decoding")
    for heading in (*headings, "## Batched decoding"):
        assert heading in text
    assert "results in" in capsys.readouterr().out


def test_a_step_past_its_time_box_is_stopped_and_recorded(tmp_path):
    sleeper = Step("tests", [sys.executable, "-c", "import time; time.sleep(60)"], timeout_s=1)
    result = run_step(sleeper, tmp_path, deadline=float("inf"))
    assert result.status == "timeout" and result.seconds < 30 and "time box" in result.reason
    failing = Step("bench", [sys.executable, "-c", "raise SystemExit(3)"], timeout_s=30)
    assert run_step(failing, tmp_path, deadline=float("inf")).status == "failed"
    skipped = Step("bench", [sys.executable, "-c", "pass"], timeout_s=30, skip_reason="no data")
    assert run_step(skipped, tmp_path, deadline=float("inf")).reason == "no data"


def test_the_gpu_plan_covers_the_paper_shapes_and_the_systems(tmp_path):
    steps = {s.name: s for s in plan_steps(CheckSettings(), tmp_path)}
    head = " ".join(steps["bench_head"].argv)
    assert "--device cuda" in head and "--dtypes bfloat16" in head and "--batch-sizes 1 16 64" in head
    assert all(shape in head for shape in ("llama-3.1-8b", "gpt-oss-20b", "qwen3-30b-a3b"))
    bench = " ".join(steps["bench"].argv)
    assert "--draft-lookup --prompt-lookup" in bench and "--device cuda --dtype bfloat16" in bench
    assert "--device cuda" in " ".join(steps["tests"].argv)
    assert "--batch-sizes 1 4 16 64" in " ".join(steps["bench_batch"].argv)
    assert sum(s.timeout_s for s in steps.values()) <= 480  # within the 540 s box of scripts/gpu_check.sh


def test_the_summary_reads_a_failed_step_without_results():
    summary = {
        "settings": {"tiny": False},
        "environment": {"device": "cuda", "torch": "x", "torch_cuda": "13.0", "transformers": "y", "python": "3"},
        "steps": [{"name": "bench", "status": "timeout", "seconds": 180.0, "reason": "stopped"}],
        "results": {"bench": {}},
        "seconds": 200.0,
    }
    assert "| bench | timeout | 180 | stopped |" in render_summary(summary)


def test_bad_budget_is_a_user_error(capsys):
    assert gpu_check.main(["--budget", "0"]) == 2  # the exit code of user errors
    assert "`--budget` must be > 0" in capsys.readouterr().err


def test_the_shell_script_parses():
    script = REPO_ROOT / "scripts" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert "scripts/gpu_check.py" in script.read_text()
