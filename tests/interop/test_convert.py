"""EAGLE-3 interop: synthetic SafeAILab / speculators checkpoints → SlimSpec, and SlimSpec → speculators.

Every conversion is checked against `reference_eagle3` (testing_utils.py), an independent plain-torch forward of the *source*
EAGLE-3 drafter written from the format descriptions (it imports nothing from slimspec_hf). Tolerance: fp32
throughout, logits agree to atol 1e-5 (they differ only by summation order).
"""

import json
import math

import pytest
import torch

from slimspec_hf import SlimSpecDrafterForCausalLM
from slimspec_hf.interop.convert import convert_eagle3, expand_draft_head, read_eagle3_checkpoint
from slimspec_hf.interop.export import (
    DEFAULT_SPECULATIVE_TOKENS,
    export_eagle3,
    export_speculators,
    speculators_config,
)
from slimspec_hf.training.head_init import prepare_head_finetune

from ..testing_utils import (
    ATOL,
    L,
    assert_two_steps_match,
    convert_main,
    eagle_checkpoint,
    export_main,
    features,
    make_tiny_target,
    reference_config,
    reference_eagle3,
    rms_norm,
    speculators_checkpoint,
    write_checkpoint,
)


@pytest.fixture
def target():
    return make_tiny_target(num_hidden_layers=L)


# ---------------------------------------------------------------------------------------------------------------
# Convert: exactness
# ---------------------------------------------------------------------------------------------------------------


def test_eagle_trimmed_reproduces_source_drafter_exactly(tmp_path, target):
    src, cfg, sd, token_ids = eagle_checkpoint(tmp_path, target)
    drafter = convert_eagle3(src, target, head_type="trimmed")
    assert drafter.config.target_layer_ids == [2, 4, 5]  # inputs of layers {2, L//2, L-3}
    assert drafter.config.rope_parameters["rope_theta"] == 5000.0 and drafter.config.intermediate_size == 48
    ids, feats, emb = features(target, [2, 4, 5])
    with torch.no_grad():
        out = drafter(input_ids=ids, target_features=feats)
        ref, ref_h = reference_eagle3(sd, "midlayer.", cfg, emb, feats, token_ids, target.config.vocab_size)
        # second step: each model is fed its own pre-norm output
        out2 = drafter(input_ids=ids, hidden_states=out.hidden_states)
        ref2, _ = reference_eagle3(sd, "midlayer.", cfg, emb, ref_h, token_ids, target.config.vocab_size)
    for ours, theirs in ((out.logits, ref), (out2.logits, ref2)):
        assert torch.equal(torch.isinf(ours), torch.isinf(theirs))
        finite = torch.isfinite(theirs)
        torch.testing.assert_close(ours[finite], theirs[finite], atol=ATOL, rtol=0)


def test_eagle_full_head_keeps_draft_rows_and_fills_the_rest_from_target(tmp_path, target):
    src, cfg, sd, token_ids = eagle_checkpoint(tmp_path, target)
    drafter = convert_eagle3(src, target, head_type="full")
    ids, feats, emb = features(target, [2, 4, 5])
    with torch.no_grad():
        logits = drafter(input_ids=ids, target_features=feats).logits
        ref, ref_h = reference_eagle3(sd, "midlayer.", cfg, emb, feats, token_ids, target.config.vocab_size)
    torch.testing.assert_close(logits[..., token_ids], ref[..., token_ids], atol=ATOL, rtol=0)
    others = torch.ones(target.config.vocab_size, dtype=torch.bool)
    others[token_ids] = False
    from_target = rms_norm(ref_h, sd["norm.weight"], 1e-5) @ target.lm_head.weight.detach()[others].T
    torch.testing.assert_close(logits[..., others], from_target, atol=ATOL, rtol=0)


def test_speculators_full_vocab_reproduces_source_and_drops_matching_embedding(tmp_path, target):
    src, cfg, sd, token_ids = speculators_checkpoint(tmp_path, target)
    drafter = convert_eagle3(src, target, head_type="full")
    assert drafter.config.target_layer_ids == [1, 3, 6]  # vLLM ids are hidden_states indices as they are
    assert "embed_tokens.weight" not in drafter.state_dict()
    ids, feats, emb = features(target, [1, 3, 6])
    with torch.no_grad():
        logits = drafter(input_ids=ids, target_features=feats).logits
        ref, _ = reference_eagle3(
            sd, "layers.0.", reference_config(cfg), emb, feats, token_ids, target.config.vocab_size
        )
    torch.testing.assert_close(logits, ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("draft_vocab_size, head_type", [(None, "full"), (40, "trimmed")])
def test_speculators_norm_before_residual_reproduces_source(tmp_path, target, draft_vocab_size, head_type):
    src, cfg, sd, token_ids = speculators_checkpoint(
        tmp_path, target, draft_vocab_size=draft_vocab_size, norm_before_residual=True
    )
    drafter = convert_eagle3(src, target, head_type=head_type)
    assert drafter.config.norm_before_residual is True
    ref = assert_two_steps_match(drafter, sd, cfg, target, [1, 3, 6], token_ids, norm_before_residual=True)
    # the flag changes the forward: the residual-on-h reference is far from what the drafter reproduces
    ids, feats, emb = features(target, [1, 3, 6])
    other, _ = reference_eagle3(
        sd, "layers.0.", reference_config(cfg), emb, feats, token_ids, target.config.vocab_size
    )
    finite = torch.isfinite(ref)
    assert (other[finite] - ref[finite]).abs().max() > 100 * ATOL


def test_eagle_and_speculators_false_keep_residual_on_h(tmp_path, target):
    src, *_ = eagle_checkpoint(tmp_path, target)
    assert convert_eagle3(src, target, head_type="trimmed").config.norm_before_residual is False
    with pytest.raises(ValueError, match="SafeAILab.*drop the override"):
        convert_eagle3(src, target, head_type="trimmed", norm_before_residual=True)
    assert (
        convert_eagle3(src, target, head_type="trimmed", norm_before_residual=False).config.norm_before_residual
        is False
    )
    src, *_ = speculators_checkpoint(tmp_path, target)  # norm_before_residual: false
    assert convert_eagle3(src, target, head_type="full").config.norm_before_residual is False


def test_low_rank_head_error_is_the_optimal_rank_r_error(tmp_path, target):
    src, _, sd, token_ids = eagle_checkpoint(tmp_path, target)
    r = 5
    drafter = convert_eagle3(src, target, head_type="low_rank", rank=r)
    assert drafter.lm_head.rank == r
    # expected full-vocab head, built by hand: target rows, draft rows placed at their target ids
    dense = target.lm_head.weight.detach().clone()
    dense[token_ids] = sd["lm_head.weight"]
    error = (dense - drafter.lm_head.merged_weight()).norm() ** 2
    sigma = torch.linalg.svdvals(dense.double())
    torch.testing.assert_close(error.double(), (sigma[r:] ** 2).sum(), rtol=1e-4, atol=1e-6)
    # and no worse than some other rank-r factorisation (a random one and the plain truncation of the rows)
    other = torch.randn(dense.shape[0], r) @ torch.randn(r, dense.shape[1]) * 0.01
    assert error < (dense - other).norm() ** 2


def test_head_init_random_leaves_the_backbone_converted(tmp_path, target):
    src, _, sd, _ = eagle_checkpoint(tmp_path, target)
    svd = convert_eagle3(src, target, rank=4, head_init="svd")
    rnd = convert_eagle3(src, target, rank=4, head_init="random")
    torch.testing.assert_close(rnd.fc.weight, sd["fc.weight"])
    assert not torch.allclose(rnd.lm_head.merged_weight(), svd.lm_head.merged_weight())


def test_expand_draft_head_places_rows_by_d2t():
    fill = torch.zeros(6, 2)
    draft = torch.tensor([[1.0, 1.0], [2.0, 2.0]])
    d2t = torch.tensor([1, 3])  # draft 0 → 1, draft 1 → 4
    out = expand_draft_head(draft, torch.arange(2) + d2t, fill)
    assert out[1].tolist() == [1.0, 1.0] and out[4].tolist() == [2.0, 2.0] and out[[0, 2, 3, 5]].abs().sum() == 0


# ---------------------------------------------------------------------------------------------------------------
# Layer-id conventions
# ---------------------------------------------------------------------------------------------------------------


def test_sglang_layer_ids_are_layer_outputs(tmp_path, target):
    src, *_ = eagle_checkpoint(tmp_path, target, eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 2, 5]})
    assert convert_eagle3(src, target, head_type="trimmed").config.target_layer_ids == [1, 3, 6]


def test_conflicting_layer_ids_are_refused(tmp_path, target):
    src, *_ = eagle_checkpoint(
        tmp_path,
        target,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 2, 5]},
        eagle_aux_hidden_state_layer_ids=[0, 2, 5],
    )
    with pytest.raises(ValueError, match="disagree"):
        convert_eagle3(src, target, head_type="trimmed")


def test_vllm_last_layer_id_is_refused(tmp_path, target):
    src, *_ = speculators_checkpoint(tmp_path, target, eagle_aux_hidden_state_layer_ids=[2, 4, L])
    with pytest.raises(ValueError, match="pre-norm"):
        convert_eagle3(src, target, head_type="full")


def test_default_ids_need_three_distinct_layers(tmp_path):
    small = make_tiny_target(num_hidden_layers=6)  # {2, 3, 3}
    src, *_ = eagle_checkpoint(tmp_path, small)
    with pytest.raises(ValueError, match="--layer-ids"):
        convert_eagle3(src, small, head_type="trimmed")
    assert convert_eagle3(src, small, head_type="trimmed", layer_ids=[1, 3, 5]).config.target_layer_ids == [1, 3, 5]


# ---------------------------------------------------------------------------------------------------------------
# Refusals: each names the key (and shapes)
# ---------------------------------------------------------------------------------------------------------------


def _edit(folder, config=None, drop=(), replace=None):
    from safetensors.torch import load_file

    tensors = load_file(str(folder / "model.safetensors"))
    for key in drop:
        del tensors[key]
    tensors.update(replace or {})
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(config or {})
    write_checkpoint(folder, cfg, tensors)


def test_missing_d2t(tmp_path, target):
    src, *_ = eagle_checkpoint(tmp_path, target)
    _edit(src, drop=("d2t",))
    with pytest.raises(ValueError, match=r"no `d2t`.*40 rows.*128.*\(40,\)"):
        read_eagle3_checkpoint(src)


def test_wrong_shapes(tmp_path, target):
    src, *_ = eagle_checkpoint(tmp_path, target)
    _edit(src, replace={"fc.weight": torch.zeros(32, 64)})
    with pytest.raises(ValueError, match=r"`fc.weight` has shape \(32, 64\), expected \(32, 96\)"):
        convert_eagle3(src, target, head_type="trimmed")
    src, *_ = eagle_checkpoint(tmp_path, target)
    _edit(src, replace={"midlayer.mlp.up_proj.weight": torch.zeros(40, 32)})
    with pytest.raises(ValueError, match=r"`midlayer.mlp.up_proj.weight` has shape \(40, 32\), expected \(48, 32\)"):
        convert_eagle3(src, target, head_type="trimmed")
    src, *_ = eagle_checkpoint(tmp_path, target)
    _edit(src, replace={"d2t": torch.zeros(39, dtype=torch.long)})
    with pytest.raises(ValueError, match=r"`d2t` must be an integer tensor of shape \(40,\).*\(39,\)"):
        read_eagle3_checkpoint(src)
    src, *_ = eagle_checkpoint(tmp_path, target)
    _edit(src, config={"draft_vocab_size": 50})
    with pytest.raises(ValueError, match=r"`lm_head.weight` has shape \(40, 32\).*draft_vocab_size` is 50"):
        read_eagle3_checkpoint(src)


def test_inconsistent_t2d(tmp_path, target):
    src, _, sd, _ = eagle_checkpoint(tmp_path, target)
    t2d = sd["t2d"].clone()
    t2d[int(torch.nonzero(~t2d)[0])] = True
    _edit(src, replace={"t2d": t2d})
    with pytest.raises(ValueError, match="`t2d`.*disagrees with `d2t`"):
        read_eagle3_checkpoint(src)


def test_unknown_format(tmp_path, target):
    src, *_ = eagle_checkpoint(tmp_path, target, architectures=["LlamaForCausalLM"])
    with pytest.raises(ValueError, match=r"Unknown drafter format.*LlamaForCausalLM.*speculators_model_type"):
        read_eagle3_checkpoint(src)
    src, *_ = speculators_checkpoint(tmp_path, target, speculators_model_type="mlp_speculator")
    with pytest.raises(ValueError, match="speculators_model_type"):
        read_eagle3_checkpoint(src)


def test_missing_norm_before_residual_is_ambiguous(tmp_path, target):
    src, cfg, sd, token_ids = speculators_checkpoint(tmp_path, target)
    del cfg["norm_before_residual"]
    write_checkpoint(src, cfg, sd)
    with pytest.raises(
        ValueError, match="no `norm_before_residual`.*vLLM reads a missing value as true.*--norm-before"
    ):
        read_eagle3_checkpoint(src)
    with pytest.raises(ValueError, match="no `norm_before_residual`"):
        convert_eagle3(src, target, head_type="full")
    # an explicit override settles it, either way
    for value in (True, False):
        drafter = convert_eagle3(src, target, head_type="full", norm_before_residual=value)
        assert drafter.config.norm_before_residual is value
        assert_two_steps_match(drafter, sd, cfg, target, [1, 3, 6], token_ids, norm_before_residual=value)
    ckpt = read_eagle3_checkpoint(src, norm_before_residual=True)
    assert ckpt.norm_before_residual is True and "override" in ckpt.norm_before_residual_origin


def test_norm_before_residual_override_and_bad_values(tmp_path, target):
    src, cfg, sd, token_ids = speculators_checkpoint(tmp_path, target, norm_before_residual=True)
    drafter = convert_eagle3(read_eagle3_checkpoint(src), target, head_type="full", norm_before_residual=False)
    assert drafter.config.norm_before_residual is False  # the override wins over the config
    assert_two_steps_match(drafter, sd, cfg, target, [1, 3, 6], token_ids, norm_before_residual=False)
    with pytest.raises(TypeError, match="must be a bool or None, got 'true'"):
        read_eagle3_checkpoint(src, norm_before_residual="true")
    _edit(src, config={"norm_before_residual": "yes"})
    with pytest.raises(ValueError, match="`norm_before_residual` in the speculators config is 'yes'"):
        read_eagle3_checkpoint(src)


def test_speculators_layer_config_refusals(tmp_path, target):
    for key, value, message in (
        ("num_hidden_layers", 2, "num_hidden_layers` is 2"),
        ("model_type", "qwen3", "model_type` is 'qwen3'"),
        ("mlp_bias", True, "mlp_bias"),
    ):
        src, cfg, sd, _ = speculators_checkpoint(tmp_path, target)
        cfg["transformer_layer_config"][key] = value
        write_checkpoint(src, cfg, sd)
        with pytest.raises(ValueError, match=message):
            read_eagle3_checkpoint(src)


def test_unexpected_weight_is_named(tmp_path, target):
    src, *_ = speculators_checkpoint(tmp_path, target)
    _edit(src, replace={"layers.0.self_attn.q_norm.weight": torch.ones(8)})
    with pytest.raises(ValueError, match=r"q_norm.weight \(8,\)"):
        convert_eagle3(src, target, head_type="full")


def test_foreign_embedding_is_refused(tmp_path, target):
    src, *_ = speculators_checkpoint(tmp_path, target)
    _edit(src, replace={"embed_tokens.weight": torch.randn(128, 32)})
    with pytest.raises(ValueError, match=r"`embed_tokens.weight` differs.*relative error"):
        convert_eagle3(src, target, head_type="full")


def test_bf16_copy_of_target_embedding_is_accepted(tmp_path, target):
    """A stored embedding that is the target's rounded to bf16 (how speculators checkpoints ship) is the target's:
    accepted and dropped; the drafter borrows the target's own fp32 embedding and reproduces the source drafter."""
    src, cfg, sd, token_ids = speculators_checkpoint(tmp_path, target)
    own = target.get_input_embeddings().weight.detach()
    stored = own.bfloat16()
    error = float((stored.float() - own).norm() / own.norm())
    assert 1e-4 < error < 1e-2, error  # rounded, not equal: accepted by the check's tolerance, not by equality
    _edit(src, replace={"embed_tokens.weight": stored})
    drafter = convert_eagle3(src, target, head_type="full")
    assert drafter.get_input_embeddings() is target.get_input_embeddings()
    assert drafter.get_input_embeddings().weight.dtype == torch.float32
    assert not any("embed" in key for key in drafter.state_dict())
    assert_two_steps_match(drafter, sd, cfg, target, [1, 3, 6], token_ids, norm_before_residual=False)


def test_pickled_weights_are_refused(tmp_path, target):
    src, *_ = eagle_checkpoint(tmp_path, target)
    (src / "model.safetensors").unlink()
    (src / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ValueError, match="safetensors only"):
        read_eagle3_checkpoint(src)


def test_vocab_mismatch_with_target(tmp_path, target):
    src, *_ = eagle_checkpoint(tmp_path, target)
    other = make_tiny_target(num_hidden_layers=L, vocab_size=256)
    with pytest.raises(ValueError, match=r"vocabulary \(128\) differs from the target's \(256\)"):
        convert_eagle3(src, other, head_type="trimmed")


# ---------------------------------------------------------------------------------------------------------------
# Export → convert round trip
# ---------------------------------------------------------------------------------------------------------------


def test_export_round_trip_low_rank(tmp_path, target):
    src, *_ = eagle_checkpoint(tmp_path, target)
    drafter = convert_eagle3(src, target, rank=6)
    out = export_speculators(drafter, tmp_path / "export", verifier_name_or_path="tiny-llama")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3" and cfg["norm_before_residual"] is False
    assert cfg["draft_vocab_size"] == 128 and cfg["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
    assert cfg["transformer_layer_config"]["num_hidden_layers"] == 1
    assert cfg["speculators_config"]["verifier"]["name_or_path"] == "tiny-llama"
    assert drafter.config.ttt_steps is None  # a converted drafter records no training depth: the default length
    assert cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == DEFAULT_SPECULATIVE_TOKENS
    drafter.config.ttt_steps = 4  # a trained drafter: its training depth
    trained = speculators_config(drafter, 128, torch.float32)
    assert trained["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 4
    from safetensors.torch import load_file

    tensors = load_file(str(out / "model.safetensors"))
    assert tensors["lm_head.weight"].shape == (128, 32) and not any(k.startswith("embed") for k in tensors)
    # a full-vocabulary head carries no token maps: vLLM refuses a `d2t` when draft_vocab_size == vocab_size
    assert "d2t" not in tensors and "t2d" not in tensors
    # transformers reads the same RoPE from the exported layer config
    from transformers import LlamaConfig

    assert LlamaConfig(**cfg["transformer_layer_config"]).rope_parameters["rope_theta"] == 5000.0

    back = convert_eagle3(out, target, head_type="full")
    ids, feats, _ = features(target, [2, 4, 5])
    with torch.no_grad():
        a = drafter(input_ids=ids, target_features=feats)
        b = back(input_ids=ids, target_features=feats)
        a2 = drafter(input_ids=ids, hidden_states=a.hidden_states).logits
        b2 = back(input_ids=ids, hidden_states=b.hidden_states).logits
    torch.testing.assert_close(b.logits, a.logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(b2, a2, atol=ATOL, rtol=0)


def test_export_round_trip_norm_before_residual(tmp_path, target):
    src, *_ = speculators_checkpoint(tmp_path, target, norm_before_residual=True)
    drafter = convert_eagle3(src, target, rank=6)
    assert drafter.config.norm_before_residual is True
    out = export_speculators(drafter, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["norm_before_residual"] is True
    back = convert_eagle3(out, target, head_type="full")
    assert back.config.norm_before_residual is True
    ids, feats, _ = features(target, [1, 3, 6])
    with torch.no_grad():
        a = drafter(input_ids=ids, target_features=feats)
        b = back(input_ids=ids, target_features=feats)
        a2 = drafter(input_ids=ids, hidden_states=a.hidden_states).logits
        b2 = back(input_ids=ids, hidden_states=b.hidden_states).logits
    torch.testing.assert_close(b.logits, a.logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(b2, a2, atol=ATOL, rtol=0)


def test_export_round_trip_trimmed(tmp_path, target):
    src, *_ = eagle_checkpoint(tmp_path, target)
    drafter = convert_eagle3(src, target, head_type="trimmed")
    perm = torch.randperm(40)  # rows in any order: export writes them in token order
    drafter.lm_head.weight.data = drafter.lm_head.weight.data[perm]
    drafter.lm_head.token_ids.copy_(drafter.lm_head.token_ids[perm])
    out = export_speculators(drafter, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["draft_vocab_size"] == 40
    back = convert_eagle3(out, target, head_type="trimmed")
    ids, feats, _ = features(target, [2, 4, 5])
    with torch.no_grad():
        a, b = drafter(input_ids=ids, target_features=feats).logits, back(input_ids=ids, target_features=feats).logits
    assert torch.equal(torch.isinf(a), torch.isinf(b))
    torch.testing.assert_close(b[torch.isfinite(b)], a[torch.isfinite(a)], atol=ATOL, rtol=0)


@pytest.mark.parametrize("head_type", ["low_rank", "trimmed"])
def test_export_eagle3_safeailab_round_trip(tmp_path, target, head_type):
    src, *_ = eagle_checkpoint(tmp_path, target)
    drafter = convert_eagle3(src, target, head_type=head_type, **({"rank": 6} if head_type == "low_rank" else {}))
    out = export_eagle3(drafter, tmp_path / "export")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert "eagle_config" not in cfg  # EAGLE-3's default layers {2, L//2, L-3}: every reader assumes them
    from safetensors.torch import load_file

    tensors = load_file(str(out / "model.safetensors"))
    assert any(k.startswith("midlayer.") for k in tensors) and not any(k.startswith("layers.") for k in tensors)
    assert tensors["d2t"].dtype == torch.long and tensors["t2d"].dtype == torch.bool  # SafeAILab always has both
    back = convert_eagle3(out, target, head_type="trimmed")
    assert back.config.target_layer_ids == [2, 4, 5]
    ids, feats, _ = features(target, [2, 4, 5])
    with torch.no_grad():
        a, b = drafter(input_ids=ids, target_features=feats).logits, back(input_ids=ids, target_features=feats).logits
    assert torch.equal(torch.isinf(a), torch.isinf(b))
    torch.testing.assert_close(b[torch.isfinite(b)], a[torch.isfinite(a)], atol=ATOL, rtol=0)


def test_export_eagle3_writes_other_layer_ids_as_sglang_layer_outputs(tmp_path, target):
    from ..testing_utils import make_tiny_drafter

    drafter = make_tiny_drafter(target, head_type="full", target_layer_ids=[1, 3, 6])
    cfg = json.loads((export_eagle3(drafter, tmp_path / "export") / "config.json").read_text())
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 5]
    assert convert_eagle3(tmp_path / "export", target, head_type="full").config.target_layer_ids == [1, 3, 6]


def test_export_eagle3_refuses_norm_before_residual(tmp_path, target):
    src, *_ = speculators_checkpoint(tmp_path, target, norm_before_residual=True)
    with pytest.raises(ValueError, match="norm_before_residual"):
        export_eagle3(convert_eagle3(src, target, rank=6), tmp_path / "export")


def test_export_refuses_last_layer_id(tmp_path, target):
    from ..testing_utils import make_tiny_drafter

    drafter = make_tiny_drafter(target, head_type="full", target_layer_ids=[2, 4, L])
    with pytest.raises(ValueError, match="post-norm"):
        export_speculators(drafter, tmp_path / "export")


def test_export_refuses_target_head(tmp_path, target):
    from ..testing_utils import make_tiny_drafter

    drafter = make_tiny_drafter(target, head_type="target")
    with pytest.raises(ValueError, match="head_type='target'"):
        export_speculators(drafter, tmp_path / "export")


# ---------------------------------------------------------------------------------------------------------------
# CLI and fine-tune helper
# ---------------------------------------------------------------------------------------------------------------


def test_cli_convert_then_export(tmp_path, target, capsys):
    target.save_pretrained(tmp_path / "target")
    src, *_ = eagle_checkpoint(tmp_path, target)
    out = tmp_path / "slim"
    code = convert_main(
        ["--from", "eagle3", str(src), "--target", str(tmp_path / "target"), "--out", str(out), "--rank", "4"]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "relative head error" in printed and "[2, 4, 5]" in printed
    drafter = SlimSpecDrafterForCausalLM.from_pretrained(out)
    assert drafter.config.head_type == "low_rank" and drafter.config.head_rank == 4
    assert export_main(["--to", "speculators", str(out), str(tmp_path / "spec")]) == 0
    assert (tmp_path / "spec" / "model.safetensors").is_file()
    assert export_main(["--to", "eagle3", str(out), str(tmp_path / "safeailab")]) == 0
    assert "SafeAILab EAGLE-3" in capsys.readouterr().out


def test_cli_norm_before_residual_override(tmp_path, target, capsys):
    target.save_pretrained(tmp_path / "target")
    src, cfg, sd, _ = speculators_checkpoint(tmp_path, target)
    del cfg["norm_before_residual"]
    write_checkpoint(src, cfg, sd)
    args = ["--from", "eagle3", str(src), "--target", str(tmp_path / "target"), "--out", str(tmp_path / "slim")]
    assert convert_main(args) == 2
    assert "--norm-before-residual" in capsys.readouterr().err
    assert convert_main(args + ["--norm-before-residual", "true", "--head", "full"]) == 0
    assert "norm_before_residual: true (--norm-before-residual override)" in capsys.readouterr().out
    assert SlimSpecDrafterForCausalLM.from_pretrained(tmp_path / "slim").config.norm_before_residual is True
    assert export_main(["--to", "speculators", str(tmp_path / "slim"), str(tmp_path / "spec")]) == 0
    assert json.loads((tmp_path / "spec" / "config.json").read_text())["norm_before_residual"] is True


def test_cli_reports_errors(tmp_path, target, capsys):
    target.save_pretrained(tmp_path / "target")
    src, *_ = eagle_checkpoint(tmp_path, target)
    _edit(src, drop=("d2t",))
    code = convert_main(
        ["--from", "eagle3", str(src), "--target", str(tmp_path / "target"), "--out", str(tmp_path / "o")]
    )
    assert code == 2 and "`d2t`" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing half-written


def test_prepare_head_finetune(tmp_path, target):
    src, *_ = eagle_checkpoint(tmp_path, target)
    drafter = convert_eagle3(src, target, rank=4)
    prepare_head_finetune(drafter)
    trainable = {n for n, p in drafter.named_parameters() if p.requires_grad}
    assert trainable == {"lm_head.down.weight", "lm_head.up.weight"}


def test_prepare_head_finetune_with_lora(tmp_path, target):
    peft = pytest.importorskip("peft")
    src, *_ = eagle_checkpoint(tmp_path, target)
    drafter = convert_eagle3(src, target, rank=4)
    ids, feats, _ = features(target, [2, 4, 5])
    with torch.no_grad():
        before = drafter(input_ids=ids, target_features=feats).logits
    config = peft.LoraConfig(r=2)
    model = prepare_head_finetune(drafter, lora_config=config)
    assert config.target_modules is None  # the caller's config is untouched
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any("lora_A" in n for n in trainable) and any("lm_head" in n and n.endswith("up.weight") for n in trainable)
    assert not any(n.endswith("q_proj.base_layer.weight") for n in trainable)
    with torch.no_grad():
        after = model(input_ids=ids, target_features=feats).logits
    torch.testing.assert_close(after, before)  # LoRA starts at zero
    with pytest.raises(TypeError, match="LoraConfig"):
        prepare_head_finetune(drafter, lora_config={"r": 2})


# ---------------------------------------------------------------------------------------------------------------
# The real target (SmolLM2-135M-Instruct): sizes d = 576, 30 layers, V = 49152, GQA 9/3 heads
# ---------------------------------------------------------------------------------------------------------------


def smollm2_sized_checkpoint(tmp_path, target):
    """A speculators drafter at SmolLM2's sizes with a random backbone and the target's real LM head (K = V)."""
    tc = target.config
    d, V, H, Hkv, inter = tc.hidden_size, tc.vocab_size, tc.num_attention_heads, tc.num_key_value_heads, 1536
    hd = d // H
    g = torch.Generator().manual_seed(0)

    def w(*shape):
        return torch.randn(*shape, generator=g) / math.sqrt(shape[-1])

    p = "layers.0."
    sd = {
        "fc.weight": w(d, 3 * d),
        p + "input_layernorm.weight": torch.ones(d),
        p + "hidden_norm.weight": torch.ones(d),
        p + "self_attn.q_proj.weight": w(H * hd, 2 * d),
        p + "self_attn.k_proj.weight": w(Hkv * hd, 2 * d),
        p + "self_attn.v_proj.weight": w(Hkv * hd, 2 * d),
        p + "self_attn.o_proj.weight": w(d, H * hd),
        p + "post_attention_layernorm.weight": torch.ones(d),
        p + "mlp.gate_proj.weight": w(inter, d),
        p + "mlp.up_proj.weight": w(inter, d),
        p + "mlp.down_proj.weight": w(d, inter),
        "norm.weight": torch.ones(d),
        "lm_head.weight": target.lm_head.weight.detach().clone(),
    }
    layer = {
        "model_type": "llama",
        "hidden_size": d,
        "intermediate_size": inter,
        "num_attention_heads": H,
        "num_key_value_heads": Hkv,
        "num_hidden_layers": 1,
        "vocab_size": V,
        "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0,
        "max_position_embeddings": 8192,
        "hidden_act": "silu",
    }
    cfg = {
        "speculators_model_type": "eagle3",
        "transformer_layer_config": layer,
        "draft_vocab_size": V,
        "norm_before_residual": False,
        "eagle_aux_hidden_state_layer_ids": None,
    }
    return write_checkpoint(tmp_path / "spec", cfg, sd), layer, sd


@pytest.mark.integration
def test_smollm2_sized_speculators_drafter(tmp_path, embedded_target):
    target, _ = embedded_target
    src, layer, sd = smollm2_sized_checkpoint(tmp_path, target)
    V = target.config.vocab_size
    ids, feats, emb = features(target, [2, 15, 27], T=6)
    full = convert_eagle3(src, target, head_type="full")
    assert full.config.target_layer_ids == [2, 15, 27]  # {2, L//2, L-3} for L = 30
    with torch.no_grad():
        logits = full(input_ids=ids, target_features=feats).logits
        ref, _ = reference_eagle3(sd, "layers.0.", layer, emb, feats, torch.arange(V), V)
    torch.testing.assert_close(logits, ref, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_smollm2_head_at_rank_d_over_8_is_optimal(tmp_path, embedded_target):
    target, _ = embedded_target
    src, _, sd = smollm2_sized_checkpoint(tmp_path, target)
    r = target.config.hidden_size // 8
    slim = convert_eagle3(src, target, rank=r)
    dense = sd["lm_head.weight"].double()
    error = (dense - slim.lm_head.merged_weight().detach().double()).norm() ** 2  # fp64: fp32 sums drift ~0.4 %
    sigma = torch.linalg.svdvals(dense)
    torch.testing.assert_close(error, (sigma[r:] ** 2).sum(), rtol=1e-6, atol=0)
