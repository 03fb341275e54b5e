"""EAGLE-3 interop on the mixture-of-experts families: `convert` (EAGLE-3 in) and `export` (speculators, SafeAILab and
vLLM layouts out) for drafters of GPT-OSS (MoE, sliding/full layers, YaRN RoPE, attention sinks) and Qwen3-MoE
targets, checked as `test_convert.py` checks them on Llama: against the independent reference forward of the source
drafter, and by round trips whose logits agree (atol 1e-5, fp32)."""

import json

import pytest
import torch
from safetensors.torch import load_file

from slimspec_hf import SlimSpecDrafterConfig, SlimSpecDrafterForCausalLM
from slimspec_hf.integrations.vllm import ARCHITECTURE
from slimspec_hf.integrations.vllm.export import export_vllm
from slimspec_hf.interop.convert import convert_eagle3
from slimspec_hf.interop.export import export_eagle3, export_speculators

from ..testing_utils import (
    ATOL,
    L,
    assert_two_steps_match,
    convert_main,
    eagle_checkpoint,
    export_main,
    features,
    make_family_target,
    rms_norm,
    speculators_checkpoint,
)


MOE_FAMILIES = ("gpt_oss", "qwen3_moe")
DEFAULT_IDS = [2, 4, 5]  # EAGLE-3's {2, L//2, L-3} for L = 8


@pytest.fixture(params=MOE_FAMILIES)
def target(request):
    """A tiny random MoE target with L = 8 layers (GPT-OSS alternating sliding and full attention)."""
    overrides = {"num_hidden_layers": L}
    if request.param == "gpt_oss":
        overrides["layer_types"] = ["sliding_attention", "full_attention"] * (L // 2)
    return make_family_target(request.param, **overrides)


def two_steps(drafter, ids, feats):
    """Logits of a step from the target features and of the step fed the first one's pre-norm output."""
    with torch.no_grad():
        first = drafter(input_ids=ids, target_features=feats)
        second = drafter(input_ids=ids, hidden_states=first.hidden_states)
    return first.logits, second.logits


def assert_same_drafter(a, b, target, layer_ids):
    ids, feats, _ = features(target, layer_ids)
    for ours, theirs in zip(two_steps(a, ids, feats), two_steps(b, ids, feats)):
        assert torch.equal(torch.isinf(ours), torch.isinf(theirs))
        finite = torch.isfinite(theirs)
        torch.testing.assert_close(ours[finite], theirs[finite], atol=ATOL, rtol=0)


def family_drafter(target, seed=1, **overrides):
    """A drafter as training builds one: `from_target_config` of the MoE target (its RoPE, widths, layer count)."""
    torch.manual_seed(seed)
    config = SlimSpecDrafterConfig.from_target_config(target.config, **overrides)
    drafter = SlimSpecDrafterForCausalLM(config).eval()
    for parameter in drafter.parameters():  # a spread that makes every weight show in the logits
        torch.nn.init.normal_(parameter, std=0.2)
    return drafter.attach_target(target)


# ---------------------------------------------------------------------------------------------------------------
# Convert: the converted drafter is the source drafter
# ---------------------------------------------------------------------------------------------------------------


def test_eagle_checkpoint_converts_exactly(tmp_path, target):
    src, cfg, sd, token_ids = eagle_checkpoint(tmp_path, target)
    drafter = convert_eagle3(src, target, head_type="trimmed")
    assert drafter.config.target_layer_ids == DEFAULT_IDS
    assert drafter.config.target_num_hidden_layers == L and drafter.config.vocab_size == 128
    assert drafter.config.intermediate_size == 48  # the checkpoint's, not the target's (dense or expert) width
    assert drafter.config.rope_parameters["rope_theta"] == 5000.0  # the checkpoint's, not the target's (YaRN) RoPE
    assert drafter.get_input_embeddings() is target.get_input_embeddings()
    assert_two_steps_match(drafter, sd, cfg, target, DEFAULT_IDS, token_ids, norm_before_residual=False)


def test_speculators_checkpoint_with_the_targets_embedding_converts_exactly(tmp_path, target):
    src, cfg, sd, token_ids = speculators_checkpoint(tmp_path, target)
    drafter = convert_eagle3(src, target, head_type="full")
    assert drafter.config.target_layer_ids == [1, 3, 6]
    assert "embed_tokens.weight" not in drafter.state_dict()
    assert_two_steps_match(drafter, sd, cfg, target, [1, 3, 6], token_ids, norm_before_residual=False)
    with torch.no_grad():
        target.get_input_embeddings().weight.add_(0.5)  # another embedding than the one stored: refused
    with pytest.raises(ValueError, match="`embed_tokens.weight` differs"):
        convert_eagle3(src, target, head_type="full")


def test_draft_vocabulary_is_completed_from_the_targets_head(tmp_path, target):
    """A K < V head becomes a full-vocabulary one: draft rows in place, every other row from the MoE target's head."""
    src, _, sd, token_ids = eagle_checkpoint(tmp_path, target)
    drafter = convert_eagle3(src, target, head_type="full")
    others = torch.ones(128, dtype=torch.bool)
    others[token_ids] = False
    torch.testing.assert_close(drafter.lm_head.weight[token_ids], sd["lm_head.weight"], atol=0, rtol=0)
    torch.testing.assert_close(drafter.lm_head.weight[others], target.lm_head.weight[others], atol=0, rtol=0)
    rank = 6
    low_rank = convert_eagle3(src, target, rank=rank)
    error = (drafter.lm_head.weight - low_rank.lm_head.merged_weight()).norm() ** 2
    sigma = torch.linalg.svdvals(drafter.lm_head.weight.detach().double())
    torch.testing.assert_close(error.double(), (sigma[rank:] ** 2).sum(), rtol=1e-4, atol=1e-6)  # optimal rank-r


# ---------------------------------------------------------------------------------------------------------------
# Export → convert round trips
# ---------------------------------------------------------------------------------------------------------------


def test_speculators_export_round_trip(tmp_path, target):
    src, *_ = eagle_checkpoint(tmp_path, target)
    drafter = convert_eagle3(src, target, rank=6)
    out = export_speculators(drafter, tmp_path / "spec", verifier_name_or_path=target.config.model_type)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3" and cfg["draft_vocab_size"] == 128
    assert cfg["eagle_aux_hidden_state_layer_ids"] == DEFAULT_IDS and cfg["norm_before_residual"] is False
    layer = cfg["transformer_layer_config"]
    assert layer["model_type"] == "llama" and layer["num_hidden_layers"] == 1 and layer["head_dim"] == 8
    assert cfg["speculators_config"]["verifier"]["name_or_path"] == target.config.model_type
    tensors = load_file(str(out / "model.safetensors"))
    assert tensors["lm_head.weight"].shape == (128, 32) and not {"d2t", "t2d"} & set(tensors)
    torch.testing.assert_close(tensors["lm_head.weight"], drafter.lm_head.merged_weight(), atol=0, rtol=0)
    back = convert_eagle3(out, target, head_type="full")
    assert back.config.target_layer_ids == DEFAULT_IDS
    assert_same_drafter(back, drafter, target, DEFAULT_IDS)


def test_safeailab_export_round_trip(tmp_path, target):
    src, *_ = eagle_checkpoint(tmp_path, target)
    drafter = convert_eagle3(src, target, head_type="trimmed")
    out = export_eagle3(drafter, tmp_path / "safeailab")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["draft_vocab_size"] == 40
    assert "eagle_config" not in cfg  # the default layers of an 8-layer target: nothing to write
    tensors = load_file(str(out / "model.safetensors"))
    assert any(k.startswith("midlayer.") for k in tensors) and not any(k.startswith("layers.") for k in tensors)
    assert tensors["d2t"].dtype == torch.long and tensors["t2d"].dtype == torch.bool
    back = convert_eagle3(out, target, head_type="trimmed")
    assert back.config.target_layer_ids == DEFAULT_IDS
    assert torch.equal(back.lm_head.token_ids.sort().values, drafter.lm_head.token_ids.sort().values)
    assert_same_drafter(back, drafter, target, DEFAULT_IDS)


def test_drafter_built_for_the_target_exports_and_converts_back(tmp_path, target):
    """A drafter shaped by `from_target_config` (as `slimspec train` builds it: the target's RoPE, YaRN on GPT-OSS)
    survives the speculators and SafeAILab exports and their conversion back, with the same RoPE and logits."""
    drafter = family_drafter(target, head_rank=6)
    assert drafter.config.target_layer_ids == DEFAULT_IDS
    rope = drafter.config.rope_parameters
    if target.config.model_type == "gpt_oss":
        assert rope["rope_type"] == "yarn"  # the case that matters: a RoPE other than the default
    out = export_speculators(drafter, tmp_path / "spec")
    layer = json.loads((out / "config.json").read_text())["transformer_layer_config"]
    assert layer["rope_parameters"] == rope and layer["rope_theta"] == rope["rope_theta"]
    back = convert_eagle3(out, target, head_type="full")
    assert back.config.rope_parameters == rope
    assert_same_drafter(back, drafter, target, DEFAULT_IDS)

    out = export_eagle3(drafter, tmp_path / "safeailab")
    back = convert_eagle3(out, target, head_type="full")
    assert back.config.rope_parameters == rope
    assert_same_drafter(back, drafter, target, DEFAULT_IDS)


@pytest.mark.parametrize(
    "target",
    [
        "gpt_oss",
        "qwen3_moe",
    ],
    indirect=True,
)
def test_drafter_built_for_the_target_loads_back(tmp_path, target):
    """save_pretrained → from_pretrained gives the same drafter: same RoPE (frequencies included), same logits."""
    drafter = family_drafter(target, head_rank=6)
    drafter.save_pretrained(tmp_path / "slim")
    loaded = SlimSpecDrafterForCausalLM.from_pretrained(tmp_path / "slim").eval().attach_target(target)
    assert loaded.config.rope_parameters == drafter.config.rope_parameters
    torch.testing.assert_close(loaded.rotary_emb.inv_freq, drafter.rotary_emb.inv_freq)
    assert_same_drafter(loaded, drafter, target, DEFAULT_IDS)
    out = export_speculators(tmp_path / "slim", tmp_path / "spec")  # `slimspec export` reads the folder
    assert_same_drafter(convert_eagle3(out, target, head_type="full"), drafter, target, DEFAULT_IDS)


def test_vllm_export_keeps_the_factors_of_a_drafter_built_for_the_target(tmp_path, target):
    drafter = family_drafter(target, head_rank=6)
    out = export_vllm(drafter, tmp_path / "vllm", verifier_name_or_path="some/moe-target")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == [ARCHITECTURE] and cfg["head_rank"] == 6
    assert cfg["draft_vocab_size"] == cfg["vocab_size"] == 128 and cfg["num_hidden_layers"] == 1
    assert cfg["eagle_aux_hidden_state_layer_ids"] == DEFAULT_IDS and cfg["norm_before_residual"] is False
    assert cfg["rope_parameters"] == drafter.config.rope_parameters
    assert cfg["slimspec"]["verifier"] == "some/moe-target"
    tensors = load_file(str(out / "model.safetensors"))
    assert not {"lm_head.weight", "d2t", "t2d"} & set(tensors)
    for name, value in drafter.state_dict().items():
        exported = name if name.startswith(("fc.", "norm.", "lm_head.")) else "layers.0." + name[len("layer.") :]
        assert torch.equal(tensors[exported], value), name
    # the two factors give the logits the drafter gives
    ids, feats, _ = features(target, DEFAULT_IDS)
    with torch.no_grad():
        out = drafter(input_ids=ids, target_features=feats)
        normed = rms_norm(out.hidden_states, tensors["norm.weight"], drafter.config.rms_norm_eps)
    logits = normed @ tensors["lm_head.down.weight"].T @ tensors["lm_head.up.weight"].T
    torch.testing.assert_close(logits, out.logits, atol=ATOL, rtol=0)


# ---------------------------------------------------------------------------------------------------------------
# The CLI, with the target loaded from its folder
# ---------------------------------------------------------------------------------------------------------------


def test_cli_convert_then_export_every_layout(tmp_path, target, capsys):
    target.save_pretrained(tmp_path / "target")
    src, *_ = eagle_checkpoint(tmp_path, target)
    slim = tmp_path / "slim"
    code = convert_main(["--from", "eagle3", str(src), "--target", str(tmp_path / "target"), "--out", str(slim)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert str(DEFAULT_IDS) in printed
    drafter = SlimSpecDrafterForCausalLM.from_pretrained(slim).eval().attach_target(target)
    assert drafter.config.head_type == "low_rank" and drafter.config.target_num_hidden_layers == L
    assert_same_drafter(drafter, convert_eagle3(src, target), target, DEFAULT_IDS)  # what the library converts
    for fmt in ("speculators", "eagle3", "vllm"):
        assert export_main(["--to", fmt, str(slim), str(tmp_path / fmt)]) == 0, fmt
        assert (tmp_path / fmt / "model.safetensors").is_file()
    for fmt in ("speculators", "eagle3"):
        assert_same_drafter(convert_eagle3(tmp_path / fmt, target, head_type="full"), drafter, target, DEFAULT_IDS)
