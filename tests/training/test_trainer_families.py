"""SlimSpecTrainer on every target family of `testing_utils.FAMILIES`: one training step trains the drafter and only the
drafter, its loss is the position-by-position drafting reference on the target's own forward and goes down, and what
it distills from (fused features, teacher logits) is the target's own forward."""

import pytest
import torch

from slimspec_hf import SlimSpecDrafterConfig, SlimSpecDrafterForCausalLM
from slimspec_hf.training.trainer import SlimSpecTrainer

from ..testing_utils import FAMILIES, WINDOW, make_family_target, naive_ttt_loss, tiny_args, tiny_rows


LAYER_IDS = [1, 3, 5]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def family_trainer(tmp_path, family, **overrides):
    target = make_family_target(family)
    config = SlimSpecDrafterConfig.from_target_config(target.config, target_layer_ids=LAYER_IDS, head_rank=8)
    torch.manual_seed(1)
    drafter = SlimSpecDrafterForCausalLM(config)
    args = tiny_args(tmp_path, max_steps=1, logging_steps=1, ttt_steps=2, per_device_train_batch_size=8, **overrides)
    rows = tiny_rows(8)  # 14–29 tokens a row: longer than the sliding window
    assert min(len(ids) for ids in rows["input_ids"]) > WINDOW
    return SlimSpecTrainer(drafter, args=args, target=target, train_dataset=rows), target, drafter


def batch_loss(trainer, batch):
    """The trainer's loss of a collated batch (online features), without training or logging."""
    features, final = trainer._run_target(batch["input_ids"], batch["attention_mask"])
    with torch.no_grad():
        return trainer.model(batch["input_ids"], batch["attention_mask"], batch["loss_mask"], features, final)


def family_reference(target, drafter, batch):
    """`naive_ttt_loss` on the target's own forward of each row alone (no padding): its hidden states at the
    drafter's layers and its logits (the family's head, soft-capping included), ttt_steps 2, decay 0.8."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    features = torch.zeros(*ids.shape, 3 * target.config.hidden_size)
    logits = torch.zeros(*ids.shape, target.config.vocab_size)
    with torch.no_grad():
        for b in range(ids.shape[0]):
            n = int(mask[b].sum())  # right padding: the row's tokens come first
            out = target(ids[b : b + 1, :n], output_hidden_states=True)
            features[b, :n] = torch.cat([out.hidden_states[i][0] for i in LAYER_IDS], -1)
            logits[b, :n] = out.logits[0]
        return naive_ttt_loss(drafter, logits, ids, mask, batch["loss_mask"], features, 2, 0.8)


@pytest.mark.parametrize("family", FAMILIES)
def test_one_step_trains_the_drafter_and_leaves_the_target_untouched(tmp_path, family):
    trainer, target, drafter = family_trainer(tmp_path, family)
    assert trainer.drafter is drafter and drafter.get_input_embeddings() is target.get_input_embeddings()
    target_before = {k: v.clone() for k, v in target.state_dict().items()}
    drafter_before = {k: v.clone() for k, v in drafter.state_dict().items()}
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(8)])  # the one step's batch: all rows
    before = batch_loss(trainer, batch)
    reference, reference_kl, reference_correct, reference_count = family_reference(target, drafter, batch)
    torch.testing.assert_close(before.loss.double(), reference, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(before.step_kl.double(), reference_kl, rtol=1e-5, atol=1e-5)
    assert before.step_count.tolist() == reference_count and before.step_correct.tolist() == reference_correct
    trainer.train()

    logs = [h for h in trainer.state.log_history if "acc_0" in h]
    assert len(logs) == 1 and trainer.state.global_step == 1
    assert logs[0]["loss"] == pytest.approx(float(before.loss), rel=1e-3), logs[0]
    for k in range(2):
        assert logs[0][f"kl_{k}"] == pytest.approx(float(before.step_kl[k]), rel=1e-3, abs=1e-4), logs[0]
        assert logs[0][f"acc_{k}"] == pytest.approx(float(before.step_correct[k] / before.step_count[k]), abs=1e-4)
    after = batch_loss(trainer, batch)
    assert float(after.loss) < float(before.loss) - 1e-3, (float(before.loss), float(after.loss))  # same batch again
    changed = {k for k, v in drafter.state_dict().items() if not torch.equal(v, drafter_before[k])}
    for name in (
        "fc.weight",
        "layer.self_attn.q_proj.weight",
        "layer.mlp.down_proj.weight",
        "norm.weight",
        "lm_head.down.weight",
        "lm_head.up.weight",
    ):
        assert name in changed, (name, sorted(changed))
    assert all(torch.isfinite(v).all() for v in drafter.state_dict().values())
    assert target.state_dict().keys() == target_before.keys()
    for k, v in target.state_dict().items():
        assert torch.equal(v, target_before[k]), k
    assert all(p.grad is None and not p.requires_grad for p in target.parameters())


@pytest.mark.parametrize("family", FAMILIES)
def test_the_trainer_distills_from_the_targets_own_forward(tmp_path, family):
    """The fused features are the target's hidden states at the drafter's layer ids, and the teacher logits are the
    target's logits (every transform of the family's head included), on a row longer than the window."""
    trainer, target, _ = family_trainer(tmp_path, family)
    ids = torch.randint(0, 128, (2, 3 * WINDOW), generator=torch.Generator().manual_seed(7))
    features, final = trainer._run_target(ids, torch.ones_like(ids))
    with torch.no_grad():
        out = target(ids, output_hidden_states=True)
        teacher = trainer.model.teacher_logits(final)
    torch.testing.assert_close(features, torch.cat([out.hidden_states[i] for i in LAYER_IDS], -1), atol=0, rtol=0)
    torch.testing.assert_close(teacher, out.logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_target_last_layer_init_reproduces_the_last_layer_or_is_refused(tmp_path, family):
    """`layer_init="target_last_layer"` either refuses the family's layer or starts the drafter as the target's last
    layer: step 0 on the target's features gives, after the final norm, the target's last hidden state. (Rows no
    longer than the window: the drafter attends fully by design.)"""
    target = make_family_target(family)
    args = tiny_args(tmp_path, max_steps=1, head_rank=8, layer_init="target_last_layer", target_layer_ids=LAYER_IDS)
    try:
        drafter = SlimSpecTrainer(args=args, target=target, train_dataset=tiny_rows(4)).drafter
    except ValueError as error:
        assert "layer_init='random'" in str(error)
        return
    ids = torch.randint(0, 128, (1, WINDOW - 1), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = target(ids, output_hidden_states=True)
        features = torch.cat([out.hidden_states[i] for i in LAYER_IDS], -1)
        state = drafter(input_ids=ids, target_features=features).hidden_states
        torch.testing.assert_close(drafter.norm(state), out.hidden_states[-1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_auto_layer_init_starts_on_the_targets_deepest_state(tmp_path, family):
    """`layer_init="auto"` copies the target's last layer where it fits; where it does not, the layer starts as a
    pass-through of the deepest fused target layer, and the drafter's final norm applies the target's own per-channel
    scale (Gemma's norms store `w` for a scale of `1 + w`). Either way step 0 starts on the target's states."""
    target = make_family_target(family)
    backbone = getattr(target, target.base_model_prefix)
    with torch.no_grad():  # a final norm that is not the identity, some channels scaled by less than 1
        backbone.norm.weight.uniform_(-0.9, 3.0, generator=torch.Generator().manual_seed(5))
    args = tiny_args(
        tmp_path, max_steps=1, head_rank=8, head_init="svd", layer_init="auto", target_layer_ids=LAYER_IDS
    )
    drafter = SlimSpecTrainer(args=args, target=target, train_dataset=tiny_rows(4)).drafter
    ones = torch.ones(1, 32)
    with torch.no_grad():
        torch.testing.assert_close(drafter.norm(ones), backbone.norm(ones), atol=1e-5, rtol=1e-5)
    ids = torch.randint(0, 128, (1, WINDOW - 1), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = target(ids, output_hidden_states=True)
        features = torch.cat([out.hidden_states[i] for i in LAYER_IDS], -1)
        state = drafter(input_ids=ids, target_features=features).hidden_states
    copied = not any("feedforward" in n or "q_norm" in n or "experts" in n for n, _ in target.named_parameters())
    expected = out.hidden_states[-1] if copied else backbone.norm(out.hidden_states[max(LAYER_IDS)])
    torch.testing.assert_close(drafter.norm(state), expected, atol=1e-5, rtol=1e-5)
