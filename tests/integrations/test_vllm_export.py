"""`slimspec export --to vllm` (the plugin's checkpoint) without vLLM: files, config, refusals, lazy import.

The checkpoint served by vLLM itself is tested in `tests/test_vllm.py` (`make test-vllm`)."""

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from slimspec_hf.commands.export import main as main_export
from slimspec_hf.integrations.vllm import ARCHITECTURE
from slimspec_hf.integrations.vllm.export import export_vllm

from ..conftest import make_tiny_drafter


def test_export_vllm_keeps_the_two_factors_and_the_speculators_backbone(tmp_path, tiny_target):
    drafter = make_tiny_drafter(tiny_target, head_type="low_rank", head_rank=4)
    out = export_vllm(drafter, tmp_path / "vllm", verifier_name_or_path="some/target")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [ARCHITECTURE]
    assert ARCHITECTURE.startswith("Eagle3")  # vLLM's EAGLEConfig keeps such names for method "eagle3"
    assert config["head_rank"] == 4 and config["draft_vocab_size"] == config["vocab_size"] == 128
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5] and config["norm_before_residual"] is False
    assert config["num_hidden_layers"] == 1 and config["slimspec"]["verifier"] == "some/target"
    tensors = load_file(str(out / "model.safetensors"))
    assert torch.equal(tensors["lm_head.down.weight"], drafter.lm_head.down.weight)
    assert torch.equal(tensors["lm_head.up.weight"], drafter.lm_head.up.weight)
    assert not {"lm_head.weight", "d2t", "t2d"} & set(tensors)
    assert torch.equal(tensors["layers.0.self_attn.q_proj.weight"], drafter.layer.self_attn.q_proj.weight)
    assert torch.equal(tensors["fc.weight"], drafter.fc.weight)


def test_export_vllm_refuses_a_dense_head(tmp_path, tiny_target):
    with pytest.raises(ValueError, match="--to speculators"):
        export_vllm(make_tiny_drafter(tiny_target, head_type="full"), tmp_path / "vllm")


def test_cli_export_to_vllm(tmp_path, tiny_target, capsys):
    make_tiny_drafter(tiny_target, head_type="low_rank", head_rank=4).save_pretrained(tmp_path / "slim")
    assert main_export(["--to", "vllm", str(tmp_path / "slim"), str(tmp_path / "out"), "--dtype", "bfloat16"]) == 0
    assert "SlimSpec vLLM checkpoint" in capsys.readouterr().out
    assert load_file(str(tmp_path / "out" / "model.safetensors"))["lm_head.up.weight"].dtype == torch.bfloat16


def test_plugin_module_does_not_import_vllm():
    code = (
        "import sys, slimspec_hf.integrations.vllm, slimspec_hf.integrations.vllm.export; print('vllm' in sys.modules)"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )
