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

from ..testing_utils import make_tiny_drafter, make_tiny_target


def vllm_reads(config: dict) -> dict:
    """What vLLM builds from a plain (non-speculators) EAGLE-3 config.json such as `export --to vllm` writes, read as
    its `llama_eagle3` model (which the plugin's class extends) reads it: the EAGLE-3.1 flags at the top level, a
    missing one false (`norm_before_fc` also from `eagle_config`, which wins); `norm_before_residual` true when
    missing; `eagle_aux_hidden_state_layer_ids` as inputs of target layers (SlimSpec's `target_layer_ids` as they
    are); the plugin's `head_rank`; and the norm weights that model then loads."""
    eagle = config.get("eagle_config") or {}
    flags = {
        "fc_norm": config.get("fc_norm", False),
        "norm_before_fc": eagle.get("norm_before_fc", config.get("norm_before_fc", False)),
        "norm_output": config.get("norm_output", False),
        "norm_before_residual": config.get("norm_before_residual", True),
    }
    weights = [f"fc_norm.{i}.weight" for i in range(3)] if flags["fc_norm"] else []
    weights += ["input_norm.weight"] if flags["norm_before_fc"] else []
    return {
        **{name: value is True for name, value in flags.items()},
        "layer_ids": config.get("eagle_aux_hidden_state_layer_ids"),
        "rank": config.get("head_rank"),
        "norm_weights": sorted(weights),
    }


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


@pytest.mark.parametrize(
    "flags",
    [{}, {"fc_norm": True}, {"norm_before_fc": True}, {"norm_output": True, "norm_before_residual": True}],
    ids=["plain", "fc_norm", "norm_before_fc", "norm_output+norm_before_residual"],
)
def test_export_vllm_flags_read_back_as_vllm_reads_them(tmp_path, flags):
    """The config and weights `export --to vllm` writes, read as vLLM reads them, give back the drafter's EAGLE-3.1
    flags, residual variant, layer ids and rank, and exactly the norms those flags make vLLM load (a `fc_norm: false`
    next to `fc_norm.{i}.weight` would serve another drafter)."""
    target = make_tiny_target(num_hidden_layers=8)
    drafter = make_tiny_drafter(target, head_type="low_rank", head_rank=4, target_layer_ids=[1, 4, 6], **flags)
    out = export_vllm(drafter, tmp_path / "vllm")
    read = vllm_reads(json.loads((out / "config.json").read_text()))
    cfg = drafter.config
    for name in ("fc_norm", "norm_before_fc", "norm_output", "norm_before_residual"):
        assert read[name] is getattr(cfg, name), name
    assert read["layer_ids"] == [1, 4, 6] and read["rank"] == 4
    tensors = load_file(str(out / "model.safetensors"))
    assert read["norm_weights"] == sorted(k for k in tensors if k.startswith(("fc_norm.", "input_norm.")))


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
