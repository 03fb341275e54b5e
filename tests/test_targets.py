# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The one target loader: dtype resolution, and the shipped drafter following its target."""

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
