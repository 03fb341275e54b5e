"""SlimSpecTrainer: TTT semantics, training on a tiny target, PEFT, offline features, resume, bad input."""

import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from slimspec_hf import low_rank_factors
from slimspec_hf.training.config import SlimSpecConfig
from slimspec_hf.training.head_init import activation_aware_factors
from slimspec_hf.training.trainer import SlimSpecTrainer, SlimSpecTTTModel, emulated_bf16_warning

from ..testing_utils import make_tiny_drafter, make_tiny_target, naive_ttt_loss, tiny_args, tiny_rows


@pytest.fixture(autouse=True)
def _one_thread():
    # The CPU is shared: OpenMP threads spin-waiting under oversubscription make tiny ops 30× slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def peaked_target(seed=0):
    """A tiny random target whose next-token distributions are peaked (a random tiny model's are near uniform)."""
    target = make_tiny_target(seed)
    with torch.no_grad():
        target.lm_head.weight.mul_(12.0)
    return target


# ---------------------------------------------------------------------------------------------------------------
# TTT semantics: the unroll equals step-by-step drafting at inference (brute force over every position and step)
# ---------------------------------------------------------------------------------------------------------------


def test_ttt_unroll_matches_inference_drafting():
    target = make_tiny_target()
    drafter = make_tiny_drafter(target).double()
    target.double()
    steps, seq_len = 3, 9
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 128, (1, seq_len), generator=g)
    features = torch.randn(1, seq_len, 3 * 32, generator=g, dtype=torch.float64)
    embeds = drafter.embed(ids)
    positions = torch.arange(seq_len)[None]
    context, states = [], []
    with torch.no_grad():
        for k in range(steps):
            shifted = torch.zeros_like(embeds)
            shifted[:, : seq_len - k - 1] = embeds[:, k + 1 :]
            fed = {"target_features": features} if k == 0 else {"hidden_states": states[-1]}
            states.append(drafter.ttt_step(shifted, positions, k, context, **fed))
        for t in range(seq_len - steps):
            # brute force: the drafter's own cached forward, exactly as at inference
            from slimspec_hf import SlimSpecDrafterCache

            cache = SlimSpecDrafterCache()
            out = drafter(
                input_ids=ids[:, 1 : t + 2],
                target_features=features[:, : t + 1],
                position_ids=positions[:, : t + 1],
                cache=cache,
                use_cache=True,
            )
            state = out.hidden_states[:, -1:]
            torch.testing.assert_close(state[0, 0], states[0][0, t])
            for k in range(1, steps):
                out = drafter(
                    input_ids=ids[:, t + k + 1 : t + k + 2],
                    hidden_states=state,
                    position_ids=torch.tensor([[t + k]]),
                    cache=cache,
                    use_cache=True,
                )
                state = out.hidden_states
                torch.testing.assert_close(state[0, 0], states[k][0, t], msg=f"step {k} position {t}")


def padded_batch(seed=0, vocab=128, width=96):
    """Three rows of 12 slots: full, left-padded by 3, right-padded after 9; loss masks with holes; random target
    features and final states (a peaked teacher needs no real target here)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, :3] = 0
    mask[2, 9:] = 0
    loss_mask = (torch.rand(3, 12, generator=g) > 0.25).long() * mask
    features = torch.randn(3, 12, width, generator=g)
    final = torch.randn(3, 12, width // 3, generator=g)
    return ids, mask, loss_mask, features, final


TTT_VARIANTS = {
    "low_rank": dict(head_type="low_rank", head_rank=8),
    "full": dict(head_type="full"),
    "trimmed": dict(head_type="trimmed", draft_vocab_size=40),
    "target": dict(head_type="target"),
    "low_rank+hass": dict(head_type="low_rank", head_rank=8, distill_top_k=4, distill_top_k_weight=0.5),
    "low_rank+lk_alpha": dict(head_type="low_rank", head_rank=8, loss_type="lk_alpha", lk_kl_weight=0.2),
    "low_rank+lk_lambda": dict(head_type="low_rank", head_rank=8, loss_type="lk_lambda", lk_eta=2.0),
    "trimmed+lk_greedy": dict(head_type="trimmed", draft_vocab_size=40, loss_type="lk_greedy"),
    # EAGLE-3.1: norms before `fc`, the post-norm state fed back between steps
    "low_rank+fc_norm+norm_output": dict(head_type="low_rank", fc_norm=True, norm_output=True),
    "full+norm_before_fc": dict(head_type="full", norm_before_fc=True),
}


@pytest.mark.parametrize("variant", list(TTT_VARIANTS))
def test_ttt_loss_equals_drafting_position_by_position(variant):
    """The whole training forward (unroll, targets, teacher, weights, loss) against `naive_ttt_loss`, for every head
    and loss the trainer trains, in fp32: loss, per-step KL and agreement, and every drafter parameter's gradient."""
    settings = dict(TTT_VARIANTS[variant])
    top_k, top_w = settings.pop("distill_top_k", 0), settings.pop("distill_top_k_weight", 0.0)
    lk = {name: settings.pop(name) for name in ("loss_type", "lk_kl_weight", "lk_eta") if name in settings}
    target = peaked_target().requires_grad_(False)
    drafter = make_tiny_drafter(target, **settings)
    if settings["head_type"] == "trimmed":
        drafter.lm_head.set_token_ids(torch.arange(40) * 3, dense_weight=target.lm_head.weight)
    with torch.no_grad():  # a drafter that is not near-uniform: its states and logits vary with what it reads
        for parameter in drafter.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0, 0.3)
    args = tiny_args(
        Path("/tmp"), ttt_steps=3, step_loss_decay=0.7, distill_top_k=top_k, distill_top_k_weight=top_w, **lk
    )
    model = SlimSpecTTTModel(drafter, target.get_output_embeddings(), args)
    ids, mask, loss_mask, features, final = padded_batch()
    out = model(ids, mask, loss_mask, features, final)
    out.loss.backward()
    grads = {name: p.grad.clone() for name, p in drafter.named_parameters() if p.grad is not None}
    drafter.zero_grad()

    teacher = final @ target.lm_head.weight.T  # (B, T, V)
    ref, ref_kl, ref_correct, ref_count = naive_ttt_loss(
        drafter,
        teacher,
        ids,
        mask,
        loss_mask,
        features,
        3,
        0.7,
        top_k,
        top_w,
        lk=(args.loss_type, args.lk_kl_weight, args.lk_eta) if lk else None,
    )
    ref.backward()
    assert out.step_count.tolist() == ref_count and min(ref_count) > 0
    assert out.step_correct.tolist() == ref_correct
    torch.testing.assert_close(out.step_kl.double(), ref_kl.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.loss.double(), ref.detach(), rtol=1e-5, atol=1e-6)
    assert ref.item() > 0.5  # a loss far from zero, so a wrong pairing moves it
    assert grads.keys() == {name for name, p in drafter.named_parameters() if p.grad is not None}
    for name, grad in grads.items():
        expected = drafter.get_parameter(name).grad.float()
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-6, msg=name)


def test_ttt_padding_keys_are_masked():
    """Left padding: real positions' states do not depend on what sits in the padded positions."""
    target = make_tiny_target()
    drafter = make_tiny_drafter(target)
    model = SlimSpecTTTModel(drafter, target.get_output_embeddings(), tiny_args(Path("/tmp"), ttt_steps=2))
    ids = torch.randint(0, 128, (1, 10))
    mask = torch.ones(1, 10, dtype=torch.long)
    mask[:, :3] = 0
    final = torch.randn(1, 10, 32)
    results = []
    for seed in (0, 1):
        features = torch.randn(1, 10, 96, generator=torch.Generator().manual_seed(seed))
        features[:, 3:] = torch.randn(1, 7, 96, generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            results.append(model(ids, mask, mask, features, final).loss)
    torch.testing.assert_close(results[0], results[1])


def test_ttt_left_padding_gives_finite_gradients():
    target = make_tiny_target()
    drafter = make_tiny_drafter(target).train()
    model = SlimSpecTTTModel(drafter, target.get_output_embeddings(), tiny_args(Path("/tmp"), ttt_steps=3))
    ids = torch.randint(0, 128, (1, 10))
    mask = torch.ones(1, 10, dtype=torch.long)
    mask[:, :3] = 0
    model(ids, mask, mask, torch.randn(1, 10, 96), torch.randn(1, 10, 32)).loss.backward()
    bad = [n for n, p in drafter.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    assert not bad, bad


def test_rows_shorter_than_the_unroll_train():
    """Rows of 5 tokens under a 6-step unroll: the steps that reach past the row carry no loss, the others are the
    position-by-position reference."""
    target = peaked_target()
    drafter = make_tiny_drafter(target)
    model = SlimSpecTTTModel(drafter, target.get_output_embeddings(), tiny_args(Path("/tmp"), ttt_steps=6))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 128, (2, 5), generator=g)
    mask = torch.ones(2, 5, dtype=torch.long)
    features, final = torch.randn(2, 5, 96, generator=g), torch.randn(2, 5, 32, generator=g)
    with torch.no_grad():
        out = model(ids, mask, mask, features, final)
        ref, ref_kl, _, ref_count = naive_ttt_loss(
            drafter, final @ target.lm_head.weight.T, ids, mask, mask, features, 6, 0.8
        )
    assert out.step_count.tolist() == ref_count == [6, 4, 2, 0, 0, 0]
    torch.testing.assert_close(out.loss.double(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.step_kl.double(), ref_kl, rtol=1e-5, atol=1e-6)


def test_pretokenised_rows_with_misaligned_loss_mask_are_refused():
    from datasets import Dataset

    from slimspec_hf.training.data import prepare_dataset

    rows = Dataset.from_list([{"input_ids": [1, 2, 3, 4, 5], "loss_mask": [0, 0, 1, 1, 1, 1, 1]}])
    with pytest.raises(ValueError, match="row 0: `loss_mask` has 7 entries but `input_ids` has 5"):
        prepare_dataset(rows, None, 16)


# ---------------------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------------------


def test_tiny_training_lowers_loss_and_changes_only_the_drafter(tmp_path):
    target = peaked_target()
    target_before = {k: v.clone() for k, v in target.state_dict().items()}
    args = tiny_args(tmp_path, logging_steps=1, max_steps=40, learning_rate=1e-2, head_rank=16, ttt_steps=2)
    trainer = SlimSpecTrainer(args=args, target=target, train_dataset=tiny_rows())
    drafter_before = {k: v.clone() for k, v in trainer.drafter.state_dict().items()}
    trainer.train()
    logs = [h for h in trainer.state.log_history if "acc_0" in h]
    mean = lambda rows, key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
    first, last = logs[:5], logs[-5:]
    assert mean(last, "loss") < 0.9 * mean(first, "loss"), (first, last)
    assert mean(last, "acc_0") > mean(first, "acc_0") + 0.03, (first, last)
    assert {"acc_0", "acc_1", "kl_0", "kl_1"} <= set(last[-1])
    changed = [k for k, v in trainer.drafter.state_dict().items() if not torch.equal(v, drafter_before[k])]
    for name in ("fc.weight", "lm_head.down.weight", "lm_head.up.weight", "norm.weight", "layer.mlp.up_proj.weight"):
        assert name in changed
    for k, v in target.state_dict().items():
        assert torch.equal(v, target_before[k]), k
    trainer.save_model()
    saved = os.listdir(tmp_path / "out")
    assert {"config.json", "model.safetensors", "slimspec_card.json"} <= set(saved)  # the card's inputs
    recorded = json.loads((tmp_path / "out" / "slimspec_card.json").read_text())
    assert recorded["recipe"]["ttt_steps"] == args.ttt_steps
    from safetensors.torch import load_file

    assert not any("embed" in key for key in load_file(tmp_path / "out" / "model.safetensors"))


def test_peft_trains_only_adapters_and_head(tmp_path):
    from peft import LoraConfig

    target = peaked_target()
    config = LoraConfig(r=4, lora_alpha=8, target_modules=None)
    trainer = SlimSpecTrainer(
        args=tiny_args(tmp_path, max_steps=4), target=target, train_dataset=tiny_rows(8), peft_config=config
    )
    assert config.target_modules is None and config.modules_to_save is None  # caller's config untouched
    peft_model = trainer.model.drafter
    before = {k: v.clone() for k, v in peft_model.state_dict().items()}
    trainer.train()
    changed = {k for k, v in peft_model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed, "nothing was trained"
    assert all("lora_" in k or "lm_head.modules_to_save" in k for k in changed), sorted(changed)
    assert any("lora_" in k for k in changed) and any("lm_head" in k for k in changed)


def test_freeze_backbone_trains_only_the_head(tmp_path):
    target = peaked_target()
    trainer = SlimSpecTrainer(
        args=tiny_args(tmp_path, max_steps=3, freeze_backbone=True), target=target, train_dataset=tiny_rows(8)
    )
    drafter = trainer.drafter
    before = {k: v.clone() for k, v in drafter.state_dict().items()}
    trainer.train()
    changed = {k for k, v in drafter.state_dict().items() if not torch.equal(v, before[k])}
    assert changed and all(k.startswith("lm_head.") for k in changed), sorted(changed)


def test_offline_features_are_cached_and_match_online(tmp_path):
    target = peaked_target()
    rows = tiny_rows(8)
    losses = {}
    for mode in ("online", "offline"):
        args = tiny_args(tmp_path / mode, features=mode, max_steps=1, learning_rate=0.0, logging_steps=1)
        trainer = SlimSpecTrainer(args=args, target=target, train_dataset=rows)
        trainer.train()
        losses[mode] = trainer.state.log_history[0]["loss"]
    cached = list((tmp_path / "offline" / "cache").rglob("*.safetensors"))
    assert len(cached) == 8
    assert abs(losses["online"] - losses["offline"]) < 0.02 * losses["online"]  # bf16 cache


@pytest.mark.parametrize(
    "head_type,head_init", [("full", "svd"), ("trimmed", "svd"), ("target", "random"), ("low_rank", "activation_svd")]
)
def test_other_heads_train(tmp_path, head_type, head_init):
    target = peaked_target()
    args = tiny_args(
        tmp_path, head_type=head_type, head_init=head_init, draft_vocab_size=64, max_steps=2, logging_steps=1
    )
    trainer = SlimSpecTrainer(args=args, target=target, train_dataset=tiny_rows(8))
    if head_type == "full":
        torch.testing.assert_close(trainer.drafter.lm_head.weight, target.lm_head.weight)
    if head_type == "trimmed":
        assert trainer.drafter.lm_head.has_token_set
    trainer.train()
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in trainer.state.log_history if "loss" in h)


def test_activation_svd_beats_plain_svd_on_its_own_data():
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(200, 16, generator=g, dtype=torch.float64)
    scales = torch.logspace(0, -2, 16, dtype=torch.float64)
    states = torch.randn(5000, 16, generator=g, dtype=torch.float64) * scales  # anisotropic hidden states
    moment = states.T @ states / states.shape[0]
    errors = {}
    for name, (down, up) in {
        "svd": low_rank_factors(weight, 4),
        "activation": activation_aware_factors(weight, moment, 4),
    }.items():
        errors[name] = ((states @ (weight - up @ down).T) ** 2).mean()
    assert errors["activation"] < 0.5 * errors["svd"], errors


# ---------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------


def test_bad_input_is_refused(tmp_path):
    import datasets

    target = peaked_target()
    other = make_tiny_target(vocab_size=96)
    with pytest.raises(ValueError, match="vocab_size"):
        SlimSpecTrainer(make_tiny_drafter(other), args=tiny_args(tmp_path), target=target, train_dataset=tiny_rows(4))
    no_assistant = datasets.Dataset.from_list([{"input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 0, 0]}])
    with pytest.raises(ValueError, match="no assistant tokens"):
        SlimSpecTrainer(args=tiny_args(tmp_path), target=target, train_dataset=no_assistant)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "config.json").write_text("{}")
    trainer = SlimSpecTrainer(args=tiny_args(tmp_path), target=target, train_dataset=tiny_rows(4))
    with pytest.raises(ValueError, match="already holds a run"):
        trainer.train()


# ---------------------------------------------------------------------------------------------------------------
# Resume after a kill, and multi-process (subprocesses through the real CLI)
# ---------------------------------------------------------------------------------------------------------------


def _cli_setup(tmp_path):
    target_dir = tmp_path / "target"
    peaked_target().save_pretrained(target_dir)
    data = tmp_path / "data.jsonl"
    with open(data, "w") as f:
        for row in tiny_rows(24):
            f.write(json.dumps(row) + "\n")
    return target_dir, data


def _cli_args(target_dir, data, out, cache, max_steps=12):
    return [
        "--target_model",
        str(target_dir),
        "--dataset_path",
        str(data),
        "--output_dir",
        str(out),
        "--max_steps",
        str(max_steps),
        "--per_device_train_batch_size",
        "2",
        "--save_steps",
        "3",
        "--ttt_steps",
        "3",
        "--target_layer_ids",
        "1",
        "3",
        "5",
        "--kl_chunk_size",
        "8",
        "--learning_rate",
        "3e-3",
        "--use_cpu",
        "true",
        "--report_to",
        "none",
        "--logging_steps",
        "1",
        "--disable_tqdm",
        "true",
        "--cpu_threads",
        "1",
        "--feature_cache_dir",
        str(cache),
        "--seed",
        "3",
        "--data_seed",
        "4",
    ]


def _run(args, env=None, **kwargs):
    cmd = [sys.executable, "-m", "slimspec_hf.commands.train", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, **kwargs)


def test_resume_after_kill_gives_the_same_weights(tmp_path):
    from safetensors.torch import load_file

    target_dir, data = _cli_setup(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    full = _run(_cli_args(target_dir, data, tmp_path / "full", tmp_path / "c"), env=env, timeout=300)
    assert full.returncode == 0, full.stderr[-3000:]

    out = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "slimspec_hf.commands.train", *_cli_args(target_dir, data, out, tmp_path / "c")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 240
    while not (out / "checkpoint-6" / "trainer_state.json").exists() and proc.poll() is None:
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    assert (out / "checkpoint-3").is_dir()
    import shutil

    # The kill lands wherever the run was; keep it mid-run: drop anything written after checkpoint-3.
    for later in out.glob("checkpoint-*"):
        if int(later.name.split("-")[1]) > 3:
            shutil.rmtree(later)
    for name in ("model.safetensors", "config.json"):
        (out / name).unlink(missing_ok=True)
    resumed = _run(
        [*_cli_args(target_dir, data, out, tmp_path / "c"), "--resume_from_checkpoint", "true"], env=env, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a = load_file(tmp_path / "full" / "model.safetensors")
    b = load_file(out / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=key)


@pytest.mark.slow
def test_two_process_training_under_accelerate(tmp_path):
    """Two processes of 2 rows a step train the weights that one process trains accumulating the gradients of the
    same two 2-row batches (DDP averages the processes' gradients; accumulation averages the micro-batches'); the
    saved weights load into a drafter.

    Launched with `torch.distributed.run` (the trainer's accelerate state picks it up): `accelerate launch --cpu
    --num_processes 2` on one machine starts a single process (its simple launcher; multi-CPU needs MPI), which is
    not what this test needs."""
    from safetensors.torch import load_file

    from slimspec_hf import SlimSpecDrafterForCausalLM

    target_dir, data = _cli_setup(tmp_path)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "-m",
        "slimspec_hf.commands.train",
        *_cli_args(target_dir, data, tmp_path / "ddp", tmp_path / "c", max_steps=4),
    ]
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert result.returncode == 0, result.stderr[-4000:]
    state = json.loads((tmp_path / "ddp" / "checkpoint-4" / "trainer_state.json").read_text())
    logs = [h for h in state["log_history"] if "acc_0" in h]
    assert len(logs) == 4
    # the logs count both processes' rows: 4 rows of 14–29 tokens a step
    assert all(h["num_tokens"] >= 4 * 14 for h in logs), [h["num_tokens"] for h in logs]
    saved = load_file(tmp_path / "ddp" / "model.safetensors")

    # The same run in this process (the CLI's settings, hence its initial drafter and its batches).
    import datasets
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(target_dir).eval()
    args = tiny_args(
        tmp_path / "single",
        max_steps=4,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        learning_rate=3e-3,
        lr_scheduler_type=SlimSpecConfig.lr_scheduler_type,
        max_grad_norm=SlimSpecConfig.max_grad_norm,
        kl_chunk_size=8,
        seed=3,
        data_seed=4,
        logging_steps=1,
    )
    trainer = SlimSpecTrainer(args=args, target=target, train_dataset=datasets.Dataset.from_json(str(data)))
    start = {k: v.clone() for k, v in trainer.drafter.state_dict().items()}
    trainer.train()
    single = trainer.drafter.state_dict()
    assert [h["num_tokens"] for h in trainer.state.log_history if "acc_0" in h] == [h["num_tokens"] for h in logs]
    assert saved.keys() == {k for k in single if "embed" not in k}
    for key, value in saved.items():
        assert not torch.equal(value, start[key]), key  # trained (updates ≈ 7e-3; bit-equal here, measured)
        torch.testing.assert_close(value, single[key], rtol=1e-5, atol=1e-6, msg=key)
    drafter = SlimSpecDrafterForCausalLM.from_pretrained(tmp_path / "ddp")
    for key, value in drafter.state_dict().items():
        torch.testing.assert_close(value, saved[key], rtol=0, atol=0, msg=key)


def test_max_samples_draws_a_seeded_random_subset(tmp_path):
    target = peaked_target()
    rows = tiny_rows(24)
    picked = []
    for seed in (0, 0, 1):
        args = tiny_args(tmp_path, max_samples=6, data_seed=seed, max_steps=1)
        trainer = SlimSpecTrainer(args=args, target=target, train_dataset=rows)
        picked.append([tuple(r["input_ids"]) for r in trainer.train_dataset])
    first_six = [tuple(r["input_ids"]) for r in rows.select(range(6))]
    assert len(picked[0]) == 6 and picked[0] == picked[1]  # deterministic for a seed
    assert picked[0] != first_six and picked[0] != picked[2]  # random, not the (length-sorted) head of the file


def test_training_from_a_half_precision_drafter_uses_fp32_master_weights(tmp_path):
    target = peaked_target()
    source = make_tiny_drafter(target, head_rank=16)
    source.to(torch.bfloat16).save_pretrained(tmp_path / "bf16-drafter")
    args = tiny_args(tmp_path, max_steps=2, drafter_model=str(tmp_path / "bf16-drafter"))
    trainer = SlimSpecTrainer(args=args, target=target, train_dataset=tiny_rows(8))
    assert {p.dtype for p in trainer.drafter.parameters()} == {torch.float32}
    expected = source.state_dict()["lm_head.up.weight"].float()
    assert torch.equal(trainer.drafter.state_dict()["lm_head.up.weight"], expected)  # the saved weights, upcast
    trainer.train()


def test_ttt_steps_do_not_set_the_drafters_draft_length(tmp_path):
    from slimspec_hf.training.head_init import build_drafter

    target = make_tiny_target()
    default = build_drafter(target, tiny_args(tmp_path, ttt_steps=2))
    assert default.generation_config.num_assistant_tokens == 6 and default.config.ttt_steps == 2
    chosen = build_drafter(target, tiny_args(tmp_path, ttt_steps=2, num_assistant_tokens=3))
    assert chosen.generation_config.num_assistant_tokens == 3 and chosen.config.ttt_steps == 2


def test_target_last_layer_init_reproduces_the_targets_last_layer(tmp_path):
    """With `layer_init="target_last_layer"` the drafter's layer on [0 ; h] is the target's last layer on h."""
    target = peaked_target()
    args = tiny_args(tmp_path, layer_init="target_last_layer", max_steps=1)
    drafter = SlimSpecTrainer(args=args, target=target, train_dataset=tiny_rows(4)).drafter
    layer = drafter.layer
    assert torch.count_nonzero(layer.self_attn.q_proj.weight[:, : drafter.config.hidden_size]) == 0
    last = target.model.layers[-1]
    torch.testing.assert_close(layer.mlp.down_proj.weight, last.mlp.down_proj.weight)
    torch.testing.assert_close(drafter.norm.weight, target.model.norm.weight)
    # fc passes the deepest fused layer through
    width = drafter.config.hidden_size
    features = torch.randn(1, 5, 3 * width)
    deepest = max(range(3), key=lambda i: drafter.config.target_layer_ids[i])
    torch.testing.assert_close(drafter.fc(features), features[..., deepest * width : (deepest + 1) * width])
    # the attention on [embedding ; h] ignores the embedding half
    h = torch.randn(1, 5, width)
    x1 = torch.cat([torch.randn(1, 5, width), layer.hidden_norm(h)], -1)
    x2 = torch.cat([torch.randn(1, 5, width), layer.hidden_norm(h)], -1)
    torch.testing.assert_close(layer.self_attn.q_proj(x1), layer.self_attn.q_proj(x2))
    torch.testing.assert_close(layer.self_attn.q_proj(x1), last.self_attn.q_proj(last.input_layernorm(h)))


def test_hass_top_k_term_trains(tmp_path):
    target = peaked_target()
    args = tiny_args(tmp_path, distill_top_k=4, distill_top_k_weight=0.5, max_steps=4, logging_steps=1)
    trainer = SlimSpecTrainer(args=args, target=target, train_dataset=tiny_rows(16))
    trainer.train()
    logs = [h for h in trainer.state.log_history if "acc_0" in h]
    assert len(logs) == 4 and all(math.isfinite(h["loss"]) for h in logs)
    # the loss includes the top-k term: it exceeds the weighted KL the logs report
    weighted_kl = sum(0.8**k * logs[0][f"kl_{k}"] for k in range(3))
    assert logs[0]["loss"] > weighted_kl + 0.01


def test_evaluation_conversations_are_not_trained_on():
    import datasets

    from slimspec_hf.training.trainer import drop_eval_conversations

    train = datasets.Dataset.from_list([{"id": f"c{i}", "input_ids": [1, 2]} for i in range(5)])
    held_out = datasets.Dataset.from_list([{"id": "c1", "input_ids": [1]}, {"id": "c3", "input_ids": [1]}])
    assert drop_eval_conversations(train, held_out)["id"] == ["c0", "c2", "c4"]
    no_ids = datasets.Dataset.from_list([{"input_ids": [1]}])
    assert len(drop_eval_conversations(train, no_ids)) == 5


def test_layer_init_auto_falls_back_where_the_target_does_not_fit(tmp_path):
    from slimspec_hf.training.head_init import initialise_layer_from_target

    target = peaked_target()
    drafter = SlimSpecTrainer(args=tiny_args(tmp_path, max_steps=1), target=target, train_dataset=tiny_rows(4)).drafter
    torch.testing.assert_close(drafter.norm.weight, target.model.norm.weight)  # auto: the target's layer
    mlp = target.model.layers[-1].mlp
    del mlp.gate_proj  # a last layer without a dense gate (as in a MoE target)
    before = drafter.layer.self_attn.q_proj.weight.clone()
    assert initialise_layer_from_target(drafter, target, strict=False) is False
    torch.testing.assert_close(drafter.layer.self_attn.q_proj.weight, before)  # nothing half-written
    with pytest.raises(ValueError, match="layer_init='random'"):
        initialise_layer_from_target(drafter, target, strict=True)


def test_activation_checkpointing_trains_to_the_same_weights(tmp_path):
    """`activation_checkpointing=True` recomputes the drafter layer in the backward pass: same losses, same weights."""
    target = peaked_target()
    runs = []
    for checkpointing in (False, True):
        args = tiny_args(
            tmp_path / str(checkpointing), max_steps=3, logging_steps=1, activation_checkpointing=checkpointing
        )
        trainer = SlimSpecTrainer(args=args, target=target, train_dataset=tiny_rows(12))
        trainer.train()
        assert trainer.drafter.layer.gradient_checkpointing is checkpointing
        losses = [h["loss"] for h in trainer.state.log_history if "acc_0" in h]
        runs.append((losses, {k: v.clone() for k, v in trainer.drafter.state_dict().items()}))
    assert runs[0][0] == pytest.approx(runs[1][0], rel=1e-5)
    for name, value in runs[0][1].items():
        torch.testing.assert_close(runs[1][1][name], value, rtol=1e-4, atol=1e-6)


def test_bf16_on_a_cpu_that_emulates_it_is_warned_about(tmp_path, monkeypatch):
    from slimspec_hf import targets

    def config(**kwargs):
        return SlimSpecConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **kwargs)

    monkeypatch.setattr(targets, "cpu_has_native_bf16", lambda: False)
    warning = emulated_bf16_warning(config(bf16=True, target_dtype="bfloat16"))
    assert "bf16=True and target_dtype=bfloat16" in warning and "--bf16 false" in warning
    assert "target_dtype=bfloat16" in emulated_bf16_warning(config(target_dtype="bfloat16"))
    assert emulated_bf16_warning(config(target_dtype="auto")) is None  # auto resolves to fp32 there
    assert emulated_bf16_warning(config()) is None
    monkeypatch.setattr(targets, "cpu_has_native_bf16", lambda: True)
    assert emulated_bf16_warning(config(bf16=True, target_dtype="bfloat16")) is None


_HEAP_PROBE = """
import sys, torch
from slimspec_hf.training.config import SlimSpecConfig
from slimspec_hf.training.trainer import reuse_freed_memory
config = SlimSpecConfig(output_dir=sys.argv[1], use_cpu=True, report_to="none", cpu_reuse_memory=sys.argv[2] == "1")
applied = reuse_freed_memory(config)
big = torch.empty(64, 262144)  # one (rows, vocabulary) fp32 chunk of Gemma-3's loss: 64 MiB
heap = [line.split()[0].split("-") for line in open("/proc/self/maps") if line.rstrip().endswith("[heap]")]
print(applied, any(int(lo, 16) <= big.data_ptr() < int(hi, 16) for lo, hi in heap))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator only")
def test_on_a_cpu_a_loss_sized_tensor_comes_from_the_reused_heap_not_a_fresh_mapping(tmp_path):
    # in a child process: the setting holds for the whole process
    def probe(enabled: bool) -> str:
        run = subprocess.run(
            [sys.executable, "-c", _HEAP_PROBE, str(tmp_path), "1" if enabled else "0"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return run.stdout.split()

    assert probe(True) == ["True", "True"]  # applied, and the 64 MiB tensor lies in the heap
    assert probe(False) == ["False", "False"]  # glibc's default: its own mapping, page-faulted afresh
