"""`slimspec train`'s process set-up."""

import os

import pytest

from slimspec_hf.commands.train import AMX_SAFE_ISA, limit_onednn_isa_on_amx


@pytest.fixture
def no_isa_choice(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)


def _cpuinfo(tmp_path, flags: str) -> str:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 avx512f {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    return str(path)


def test_an_amx_cpu_trains_with_the_avx512_bf16_kernels(tmp_path, no_isa_choice, caplog):
    assert limit_onednn_isa_on_amx(_cpuinfo(tmp_path, "avx512_bf16 amx_bf16 amx_tile")) is True
    assert os.environ["ONEDNN_MAX_CPU_ISA"] == AMX_SAFE_ISA == "AVX512_CORE_BF16"
    assert "ONEDNN_MAX_CPU_ISA" in caplog.text


def test_other_cpus_and_a_users_choice_are_left_alone(tmp_path, no_isa_choice, monkeypatch):
    assert limit_onednn_isa_on_amx(_cpuinfo(tmp_path, "avx512_bf16")) is False
    assert "ONEDNN_MAX_CPU_ISA" not in os.environ
    assert limit_onednn_isa_on_amx(str(tmp_path / "missing")) is False
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX10_1_512_AMX")
    assert limit_onednn_isa_on_amx(_cpuinfo(tmp_path, "amx_bf16")) is False
    assert os.environ["ONEDNN_MAX_CPU_ISA"] == "AVX10_1_512_AMX"


def test_train_saves_the_drafter_with_its_rendered_card(tmp_path):
    """`slimspec train` ends with the drafter, the inputs of its card and the card rendered from them."""
    from slimspec_hf.commands.train import main

    from ..testing_utils import make_tiny_target, tiny_rows

    make_tiny_target().save_pretrained(tmp_path / "target")
    tiny_rows(8).to_json(tmp_path / "rows.jsonl")
    args = ["--target_model", str(tmp_path / "target"), "--dataset_path", str(tmp_path / "rows.jsonl")]
    args += ["--output_dir", str(tmp_path / "out"), "--max_steps", "1", "--per_device_train_batch_size", "2"]
    args += ["--target_layer_ids", "1", "3", "5", "--ttt_steps", "2", "--use_cpu", "true", "--report_to", "none"]
    with pytest.warns(UserWarning, match="target_model_name_or_path"):  # a local target: placeholder snippets
        assert main([*args, "--save_strategy", "no", "--disable_tqdm", "true"]) == 0
    card = (tmp_path / "out" / "README.md").read_text()
    assert "ttt_steps" in card and (tmp_path / "out" / "slimspec_card.json").is_file()
