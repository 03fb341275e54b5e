"""EAGLE-3.1 drafters (`fc_norm`, `norm_before_fc`, `norm_output`) and TorchSpec low-rank drafters, in and out.

Every conversion is checked against an independent plain-torch forward of the *source* drafter (`reference_eagle31`,
built on `test_convert.reference_eagle3`, written from the formats' descriptions: speculators, vLLM's llama_eagle3,
SpecForge and TorchSpec), fp32, two drafting steps, each fed the source's own state. TorchSpec checkpoints are written
here by `write_torchspec_checkpoint`, laid out as TorchSpec's `tools/convert_to_hf.py` writes them.
"""

import json
import re

import pytest
import torch
from safetensors.torch import load_file

from slimspec_hf.interop.convert import convert_eagle3, read_eagle3_checkpoint
from slimspec_hf.interop.export import export_eagle3, export_speculators, export_torchspec

from ..testing_utils import (
    ATOL,
    PREFIX,
    convert_main,
    eagle_checkpoint,
    export_main,
    features,
    make_tiny_drafter,
    make_tiny_target,
    reference_config,
    reference_eagle3,
    rms_norm,
    speculators_checkpoint,
    write_checkpoint,
)


L = 8
FLAG_SETS = {
    "fc_norm": {"fc_norm": True},
    "norm_before_fc": {"norm_before_fc": True},
    "norm_output": {"norm_output": True},
    "fc_norm+norm_output": {"fc_norm": True, "norm_output": True},
}


@pytest.fixture
def target():
    return make_tiny_target(num_hidden_layers=L)


def eagle31_weights(sd: dict, flags: dict, d_t: int, seed: int = 5) -> dict:
    """The tensors an EAGLE-3.1 checkpoint adds: `fc_norm.{i}.weight` (d_t,) per target layer, `input_norm.weight`
    (3·d_t,)."""
    g = torch.Generator().manual_seed(seed)
    sd = dict(sd)
    if flags.get("fc_norm"):
        for i in range(3):
            sd[f"fc_norm.{i}.weight"] = 1 + 0.5 * torch.randn(d_t, generator=g)
    if flags.get("norm_before_fc"):
        sd["input_norm.weight"] = 1 + 0.5 * torch.randn(3 * d_t, generator=g)
    return sd


def fused_input(sd: dict, flags: dict, feats: torch.Tensor, eps: float) -> torch.Tensor:
    """What `fc` reads: one RMSNorm over the 3·d_t concatenation (`norm_before_fc`) or one per target layer
    (`fc_norm`), else the raw concatenation."""
    if flags.get("norm_before_fc"):
        feats = rms_norm(feats, sd["input_norm.weight"], eps)
    if flags.get("fc_norm"):
        feats = torch.cat([rms_norm(c, sd[f"fc_norm.{i}.weight"], eps) for i, c in enumerate(feats.chunk(3, -1))], -1)
    return feats


def reference_eagle31(sd, fmt, cfg, emb, feats, token_ids, vocab_size, flags, head=None):
    """Two steps of the source drafter: logits of step 1 (from the target's features) and step 2 (fed step 1's
    state: post-norm with `norm_output`, else pre-norm). `head` (down, up) replaces `lm_head.weight` (TorchSpec)."""
    eps, layer_cfg = reference_config(cfg)["rms_norm_eps"], reference_config(cfg)
    if head is not None:  # a factored head: its merged weight, computed here independently of the package
        sd = {**sd, "lm_head.weight": head[1] @ head[0]}
    logits, h = reference_eagle3(
        sd, PREFIX[fmt], layer_cfg, emb, fused_input(sd, flags, feats, eps), token_ids, vocab_size
    )
    fed = rms_norm(h, sd["norm.weight"], eps) if flags.get("norm_output") else h
    logits2, _ = reference_eagle3(sd, PREFIX[fmt], layer_cfg, emb, fed, token_ids, vocab_size)
    return logits, logits2


def two_steps(drafter, ids, feats):
    with torch.no_grad():
        out = drafter(input_ids=ids, target_features=feats)
        return out.logits, drafter(input_ids=ids, hidden_states=out.hidden_states).logits


def assert_logits_match(ours, theirs, atol=ATOL):
    assert torch.equal(torch.isinf(ours), torch.isinf(theirs))
    finite = torch.isfinite(theirs)
    torch.testing.assert_close(ours[finite], theirs[finite], atol=atol, rtol=0)


def eagle31_checkpoint(tmp_path, target, fmt, flags):
    """A speculators (full vocabulary) or SpecForge-style SafeAILab (draft vocabulary 40) EAGLE-3.1 checkpoint."""
    if fmt == "speculators":
        src, cfg, sd, token_ids = speculators_checkpoint(tmp_path, target, **flags)
    else:
        src, cfg, sd, token_ids = eagle_checkpoint(tmp_path, target, **flags)
    sd = eagle31_weights(sd, flags, target.config.hidden_size)
    write_checkpoint(src, cfg, sd)
    return src, cfg, sd, token_ids


# ---------------------------------------------------------------------------------------------------------------
# EAGLE-3.1 in: every flag reproduces the source, and matters
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["speculators", "eagle"])
@pytest.mark.parametrize("name", list(FLAG_SETS))
def test_eagle31_checkpoints_convert_exactly(tmp_path, target, fmt, name):
    flags = FLAG_SETS[name]
    src, cfg, sd, token_ids = eagle31_checkpoint(tmp_path, target, fmt, flags)
    drafter = convert_eagle3(src, target, head_type="full" if fmt == "speculators" else "trimmed")
    for flag in ("fc_norm", "norm_before_fc", "norm_output"):
        assert getattr(drafter.config, flag) is bool(flags.get(flag)), flag
    layer_ids = drafter.config.target_layer_ids
    ids, feats, emb = features(target, layer_ids)
    V = target.config.vocab_size
    expected = reference_eagle31(sd, fmt, cfg, emb, feats, token_ids, V, flags)
    for ours, theirs in zip(two_steps(drafter, ids, feats), expected):
        assert_logits_match(ours, theirs)
    # the flags change the forward: read as plain EAGLE-3, the same weights give other logits
    plain = reference_eagle31(sd, fmt, cfg, emb, feats, token_ids, V, {})
    step = 1 if name == "norm_output" else 0  # `norm_output` changes only what is fed back
    finite = torch.isfinite(expected[step])
    assert (plain[step][finite] - expected[step][finite]).abs().max() > 100 * ATOL


@pytest.mark.parametrize(
    "flags, tensors, message",
    [
        ({"fc_norm": True, "norm_before_fc": True}, {"fc_norm": True, "norm_before_fc": True}, "at most one"),
        ({"fc_norm": "yes"}, {"fc_norm": True}, "`fc_norm` .* true or false"),
        ({"fc_norm": True}, {}, "missing .*fc_norm.0.weight"),
        ({}, {"fc_norm": True}, "unexpected .*fc_norm.0.weight"),
        ({}, {"norm_before_fc": True}, "unexpected .*input_norm.weight"),
    ],
)
def test_malformed_eagle31_checkpoints_are_refused_in_one_line(tmp_path, target, capsys, flags, tensors, message):
    src, cfg, sd, _ = speculators_checkpoint(tmp_path, target, **flags)
    write_checkpoint(src, cfg, eagle31_weights(sd, tensors, target.config.hidden_size))
    out = tmp_path / "out"
    assert (
        convert_main(
            ["--from", "eagle3", str(src), "--target", str(_saved(target, tmp_path, capsys)), "--out", str(out)]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()  # the target's loading bar, then the one line
    errors = [line for line in err.splitlines() if line.startswith("slimspec convert: error:")]
    assert len(errors) == 1 and err.splitlines()[-1] == errors[0] and "Traceback" not in err
    assert re.search(message, errors[0]), err
    assert not out.exists()


def _saved(target, tmp_path, capsys=None):
    """The target as a folder `--target` takes (saved before any output is read)."""
    folder = tmp_path / "target"
    if not folder.exists():
        target.save_pretrained(folder)
    if capsys is not None:
        capsys.readouterr()  # saving prints progress bars
    return folder


# ---------------------------------------------------------------------------------------------------------------
# EAGLE-3.1 out: exports write the flags and tensors; convert ∘ export is exact
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FLAG_SETS))
def test_eagle31_export_round_trips_exactly(tmp_path, target, name):
    flags = FLAG_SETS[name]
    src, *_ = eagle31_checkpoint(tmp_path, target, "speculators", flags)
    drafter = convert_eagle3(src, target, rank=6)
    ids, feats, _ = features(target, drafter.config.target_layer_ids)
    expected = two_steps(drafter, ids, feats)
    out = export_speculators(drafter, tmp_path / "speculators")
    cfg = json.loads((out / "config.json").read_text())
    for flag in ("fc_norm", "norm_before_fc", "norm_output"):
        assert cfg[flag] is bool(flags.get(flag)), flag
    tensors = load_file(str(out / "model.safetensors"))
    assert ("fc_norm.0.weight" in tensors) == bool(flags.get("fc_norm"))
    assert ("input_norm.weight" in tensors) == bool(flags.get("norm_before_fc"))
    back = convert_eagle3(out, target, head_type="full")
    for ours, theirs in zip(two_steps(back, ids, feats), expected):
        torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)
    if flags.get("norm_before_fc"):  # SpecForge, SGLang and TorchSpec have no single norm over the concatenation
        with pytest.raises(ValueError, match="norm_before_fc"):
            export_eagle3(drafter, tmp_path / "eagle3")
        return
    out = export_eagle3(drafter, tmp_path / "eagle3")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg.get("fc_norm", False) is bool(flags.get("fc_norm"))
    assert cfg.get("norm_output", False) is bool(flags.get("norm_output"))
    back = convert_eagle3(out, target, head_type="full")
    for ours, theirs in zip(two_steps(back, ids, feats), expected):
        torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=0)


def engine_reads(fmt: str, config: dict, num_target_layers: int) -> dict:
    """What the engines that read an export build from its config.json, as they read it (JSON keys only):

    - `speculators`, vLLM's speculators reader and the speculators library: the EAGLE-3.1 flags at the top level, a
      missing one false; `norm_before_residual` true when missing (vLLM's reading); `eagle_aux_hidden_state_layer_ids`
      as inputs of target layers; a dense head (no rank).
    - `eagle3` and `torchspec`, SpecForge, SGLang and TorchSpec: `fc_norm` and `norm_output` at the top level (a
      missing one false), no `norm_before_fc` and no residual variant (the SafeAILab layer); the layer ids of
      SGLang's `eagle_config.eagle_aux_hidden_state_layer_ids` (layer outputs: + 1), else EAGLE-3's default inputs
      {2, L//2, L-3}; TorchSpec's rank hidden_size // `lm_head_rank_divisor`.

    Also the norm weights such a model then loads."""
    if fmt == "speculators":
        flags = {name: config.get(name, False) for name in ("fc_norm", "norm_before_fc", "norm_output")}
        flags["norm_before_residual"] = config.get("norm_before_residual", True)
        layer_ids, rank = config.get("eagle_aux_hidden_state_layer_ids"), None
    else:
        flags = {name: config.get(name, False) for name in ("fc_norm", "norm_output")}
        flags.update(norm_before_fc=False, norm_before_residual=False)
        outputs = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        L = num_target_layers
        layer_ids = [i + 1 for i in outputs] if outputs is not None else sorted({2, L // 2, L - 3})
        divisor = config.get("lm_head_rank_divisor")
        rank = config["hidden_size"] // divisor if fmt == "torchspec" else None
    weights = [f"fc_norm.{i}.weight" for i in range(3)] if flags["fc_norm"] is True else []
    weights += ["input_norm.weight"] if flags["norm_before_fc"] is True else []
    return {
        **{name: value is True for name, value in flags.items()},
        "layer_ids": layer_ids,
        "rank": rank,
        "norm_weights": sorted(weights),
    }


EXPORTS = {"speculators": export_speculators, "eagle3": export_eagle3, "torchspec": export_torchspec}
# every flag set each format can hold (SpecForge, SGLang and TorchSpec have no norm over the concatenation)
EXPORT_CASES = [
    (fmt, name)
    for fmt in EXPORTS
    for name in ["plain", *FLAG_SETS]
    if fmt == "speculators" or name != "norm_before_fc"
]


@pytest.mark.parametrize("layer_ids", [[2, 4, 5], [1, 4, 6]], ids=["default-layers", "other-layers"])
@pytest.mark.parametrize("fmt, name", EXPORT_CASES)
def test_every_export_reads_back_as_its_engines_read_it(tmp_path, target, fmt, name, layer_ids):
    """Each export's config.json, read as the engines of its format read it, gives back the drafter's EAGLE-3.1
    flags, residual variant, layer ids and (where the format keeps the factors) rank, and its weights hold exactly
    the norms those flags make the engine load. (vLLM reading `export --to vllm`: tests/integrations.)"""
    flags = dict(FLAG_SETS.get(name, {}))
    if fmt == "speculators":
        flags["norm_before_residual"] = True  # the value vLLM assumes when the key is missing, so it must be written
    drafter = make_tiny_drafter(target, head_type="low_rank", head_rank=4, target_layer_ids=layer_ids, **flags)
    out = EXPORTS[fmt](drafter, tmp_path / fmt)
    read = engine_reads(fmt, json.loads((out / "config.json").read_text()), L)
    cfg = drafter.config
    for flag in ("fc_norm", "norm_before_fc", "norm_output", "norm_before_residual"):
        assert read[flag] is getattr(cfg, flag), flag
    assert read["layer_ids"] == layer_ids
    assert read["rank"] == (4 if fmt == "torchspec" else None)
    tensors = load_file(str(out / "model.safetensors"))
    assert read["norm_weights"] == sorted(k for k in tensors if k.startswith(("fc_norm.", "input_norm.")))


def test_eagle31_drafter_greedy_is_plain_greedy_through_generate():
    """fp32: `target.generate(..., assistant_model=drafter)` with an EAGLE-3.1-shaped drafter (per-layer fc norms,
    post-norm state fed back) is plain greedy decoding, token for token, chains and trees."""
    target = make_tiny_target(seed=3)
    drafter = make_tiny_drafter(target, fc_norm=True, norm_output=True)
    with torch.no_grad():  # norms away from one, so that they matter
        for norm in drafter.fc_norm:
            norm.weight.uniform_(0.5, 1.5)
    ids = torch.randint(0, target.config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    plain = target.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False)
    for settings in (
        {"num_assistant_tokens": 4},
        {"draft_tree_size": 8, "draft_tree_depth": 3, "draft_tree_top_k": 2},
    ):
        spec = target.generate(
            ids, attention_mask=mask, max_new_tokens=24, do_sample=False, assistant_model=drafter, **settings
        )
        assert torch.equal(spec, plain), settings
        assert drafter.last_generation_stats.rounds > 0


# ---------------------------------------------------------------------------------------------------------------
# TorchSpec: low-rank draft heads in and out
# ---------------------------------------------------------------------------------------------------------------


def write_torchspec_checkpoint(folder, target, *, divisor=4, flags=None, vllm_names=False, seed=0):
    """A TorchSpec EAGLE-3 drafter with a low-rank head as `tools/convert_to_hf.py` writes it: the draft config
    (LlamaForCausalLMEagle3, `lm_head_rank_divisor`, `draft_vocab_size` = `vocab_size`, no d2t/t2d), one
    `model.safetensors` with `midlayer.*` (or `layers.0.*` with `--vllm`), `fc`, optional `fc_norm.{i}`, `norm`,
    `embed_tokens` and `lm_head.down` (r, H) / `lm_head.up` (V, r)."""
    flags = dict(flags or {})
    src, cfg, sd, token_ids = eagle_checkpoint(folder, target, draft_vocab_size=target.config.vocab_size, seed=seed)
    d, V = target.config.hidden_size, target.config.vocab_size
    r = d // divisor
    g = torch.Generator().manual_seed(seed + 11)
    del sd["lm_head.weight"]
    sd["lm_head.down.weight"] = torch.randn(r, d, generator=g) * 0.3
    sd["lm_head.up.weight"] = torch.randn(V, r, generator=g) * 0.3
    sd["embed_tokens.weight"] = target.get_input_embeddings().weight.detach().clone()
    sd = eagle31_weights(sd, flags, d)
    if vllm_names:
        sd = {k.replace("midlayer.", "layers.0."): v for k, v in sd.items()}
    cfg = {
        **cfg,
        "lm_head_rank_divisor": divisor,
        "draft_vocab_size": V,
        "fc_norm": bool(flags.get("fc_norm")),
        "norm_output": bool(flags.get("norm_output")),
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]},  # SpecForge/TorchSpec: layer outputs
        "_torchspec_version": "0.0.0",
        "torch_dtype": "float32",
    }
    write_checkpoint(src, cfg, sd)
    return src, cfg, sd, token_ids


@pytest.mark.parametrize(
    "flags, vllm_names", [({}, False), ({"fc_norm": True, "norm_output": True}, False), ({}, True)]
)
def test_torchspec_low_rank_drafters_convert_exactly_without_svd(tmp_path, target, capsys, flags, vllm_names):
    src, cfg, sd, token_ids = write_torchspec_checkpoint(tmp_path, target, flags=flags, vllm_names=vllm_names)
    out = tmp_path / "slimspec"
    assert (
        convert_main(
            ["--from", "torchspec", str(src), "--target", str(_saved(target, tmp_path, capsys)), "--out", str(out)]
        )
        == 0
    )
    from slimspec_hf import SlimSpecDrafterForCausalLM

    drafter = SlimSpecDrafterForCausalLM.from_pretrained(out).attach_target(target)
    assert drafter.config.head_type == "low_rank" and drafter.config.head_rank == target.config.hidden_size // 4
    assert drafter.config.target_layer_ids == [2, 4, 6]  # layer outputs 1, 3, 5 = hidden_states 2, 4, 6
    torch.testing.assert_close(drafter.lm_head.down.weight, sd["lm_head.down.weight"], atol=0, rtol=0)
    torch.testing.assert_close(drafter.lm_head.up.weight, sd["lm_head.up.weight"], atol=0, rtol=0)
    ids, feats, emb = features(target, [2, 4, 6])
    fmt = "eagle"
    plain_sd = {k.replace("layers.0.", "midlayer."): v for k, v in sd.items()}
    head = (plain_sd["lm_head.down.weight"], plain_sd["lm_head.up.weight"])
    expected = reference_eagle31(plain_sd, fmt, cfg, emb, feats, token_ids, target.config.vocab_size, flags, head=head)
    for ours, theirs in zip(two_steps(drafter, ids, feats), expected):
        assert_logits_match(ours, theirs)


def test_torchspec_export_round_trips_exactly_in_torchspec_layout(tmp_path, target):
    src, cfg, sd, _ = write_torchspec_checkpoint(tmp_path, target, flags={"fc_norm": True, "norm_output": True})
    drafter = convert_eagle3(read_eagle3_checkpoint(src), target)
    out = export_torchspec(drafter, tmp_path / "torchspec")
    written = json.loads((out / "config.json").read_text())
    for key in ("architectures", "model_type", "lm_head_rank_divisor", "draft_vocab_size", "fc_norm", "norm_output"):
        assert written[key] == cfg[key], key
    assert written["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]
    tensors = load_file(str(out / "model.safetensors"))
    assert set(tensors) == set(sd) - {"embed_tokens.weight"}  # the embedding is the target's: not written
    for key, value in tensors.items():
        torch.testing.assert_close(value, sd[key], atol=0, rtol=0)
    back = convert_eagle3(read_eagle3_checkpoint(out), target)
    ids, feats, _ = features(target, [2, 4, 6])
    for ours, theirs in zip(two_steps(back, ids, feats), two_steps(drafter, ids, feats)):
        torch.testing.assert_close(ours, theirs, atol=0, rtol=0)


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"lm_head_rank_divisor": 1}, "lm_head_rank_divisor"),
        ({"lm_head_rank_divisor": 8}, "lm_head.down.weight"),  # r = d // 8 does not fit the stored factors
        ({"draft_vocab_size": 40}, "draft_vocab_size"),
    ],
)
def test_malformed_torchspec_checkpoints_are_refused(tmp_path, target, capsys, edit, message):
    src, cfg, sd, _ = write_torchspec_checkpoint(tmp_path, target)
    (src / "config.json").write_text(json.dumps({**cfg, **edit}))
    out = tmp_path / "out"
    assert (
        convert_main(
            ["--from", "torchspec", str(src), "--target", str(_saved(target, tmp_path, capsys)), "--out", str(out)]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and err.startswith("slimspec convert: error:"), err
    assert not out.exists()


def test_from_names_the_family_the_checkpoint_is(tmp_path, target, capsys):
    src, *_ = write_torchspec_checkpoint(tmp_path, target)
    folder = str(_saved(target, tmp_path, capsys))
    assert convert_main(["--from", "eagle3", str(src), "--target", folder, "--out", str(tmp_path / "a")]) == 2
    assert "--from torchspec" in capsys.readouterr().err
    plain, *_ = speculators_checkpoint(tmp_path, target)
    assert convert_main(["--from", "torchspec", str(plain), "--target", folder, "--out", str(tmp_path / "b")]) == 2
    assert "--from eagle3" in capsys.readouterr().err


def test_torchspec_export_refuses_what_torchspec_cannot_hold(tmp_path, target, capsys):
    drafter = make_tiny_drafter(target, head_type="low_rank", head_rank=5)  # 32 // 5 is not a divisor
    with pytest.raises(ValueError, match="lm_head_rank_divisor"):
        export_torchspec(drafter, tmp_path / "a")
    with pytest.raises(ValueError, match="low-rank"):
        export_torchspec(make_tiny_drafter(target, head_type="full"), tmp_path / "b")
    with pytest.raises(ValueError, match="norm_before_fc"):
        export_torchspec(make_tiny_drafter(target, head_rank=4, norm_before_fc=True), tmp_path / "c")
    folder = tmp_path / "drafter"
    make_tiny_drafter(target, head_rank=5).save_pretrained(folder)
    assert export_main(["--to", "torchspec", str(folder), str(tmp_path / "d")]) == 2
    assert "lm_head_rank_divisor" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
