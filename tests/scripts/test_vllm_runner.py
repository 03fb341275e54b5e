"""`scripts/vllm_runner.py` without vLLM: its process handling and its command line. The engines themselves run in
`make test-vllm` (tests/integrations/test_vllm.py). Lab tooling, not the package: these run with `make test-slow`."""

import importlib.util
import os
import subprocess
import sys
import time

import pytest

from ..testing_utils import REPO_ROOT


pytestmark = pytest.mark.slow

RUNNER = REPO_ROOT / "scripts" / "vllm_runner.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("vllm_runner", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vllm_runner = _load_script()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_run_in_own_session_returns_the_finished_process():
    proc = vllm_runner.run_in_own_session([sys.executable, "-c", "print('engine done')"], timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "engine done"


def test_run_in_own_session_kills_the_whole_group_at_its_timeout(tmp_path):
    """An engine past its time box is killed with every process it started (vLLM's workers): none is left."""
    pid_file = tmp_path / "worker.pid"
    worker = "import time; time.sleep(120)"
    engine = (
        "import subprocess, sys, time\n"
        f"worker = subprocess.Popen([sys.executable, '-c', {worker!r}])\n"
        f"open({str(pid_file)!r}, 'w').write(str(worker.pid))\n"
        "time.sleep(120)\n"
    )
    with pytest.raises(RuntimeError, match="ran past 3 s and was killed"):
        vllm_runner.run_in_own_session([sys.executable, "-c", engine], timeout=3)
    worker_pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(worker_pid) and time.monotonic() < deadline:  # killed; reaped by init once orphaned
        time.sleep(0.1)
    assert not _alive(worker_pid)


def test_the_script_runs_from_scripts_without_vllm_installed():
    """Its command line parses with no vLLM around (vLLM is imported only when an engine starts)."""
    proc = subprocess.run([sys.executable, str(RUNNER), "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--interleave" in proc.stdout and "scripts/vllm_runner.py" in proc.stdout
