"""A continual run (`continual_dir`): sessions continue one run's weights and data order through a committed folder."""

import json

import pytest
import torch
from safetensors.torch import load_file

from slimspec_hf.training.continual import STATE_FILE, ContinualState, data_order
from slimspec_hf.training.data import SlimSpecDataCollator

from ..testing_utils import make_tiny_target, tiny_args, tiny_rows


class RecordingCollator(SlimSpecDataCollator):
    """The collator, remembering every conversation it batches, in order."""

    def __init__(self):
        super().__init__(pad_token_id=0)
        self.seen = []

    def __call__(self, features):
        self.seen.extend(tuple(f["input_ids"]) for f in features)
        return super().__call__(features)


def run_session(tmp_path, name, rows, **overrides):
    from slimspec_hf.training.trainer import SlimSpecTrainer

    values = dict(
        output_dir=str(tmp_path / name),
        continual_dir=str(tmp_path / "run"),
        max_steps=3,
        per_device_train_batch_size=2,
        data_seed=7,
        dataset_path="tiny-rows",
        save_strategy="no",
    )
    values.update(overrides)
    collator = RecordingCollator()
    trainer = SlimSpecTrainer(
        args=tiny_args(tmp_path, **values),
        target=make_tiny_target(),
        train_dataset=rows,
        data_collator=collator,
    )
    start = {k: v.detach().clone() for k, v in trainer.drafter.state_dict().items()}
    trainer.train()
    return trainer, collator.seen, start


def test_the_data_order_reaches_any_position_without_replaying_the_ones_before():
    whole = data_order(10, seed=3, start=0, count=27)
    for epoch in range(2):
        assert sorted(whole[10 * epoch : 10 * epoch + 10]) == list(range(10))  # each epoch a permutation
    assert whole[:10] != whole[10:20]  # a new shuffle each epoch
    for start in (0, 4, 10, 13):
        assert data_order(10, seed=3, start=start, count=27 - start) == whole[start:]
    with pytest.raises(ValueError, match="empty"):
        data_order(0, seed=0, start=0, count=1)


def test_two_sessions_continue_one_run_through_the_folder(tmp_path):
    rows = tiny_rows(10)
    ids = [tuple(r) for r in rows["input_ids"]]
    first, seen_first, _ = run_session(tmp_path, "a", rows, save_strategy="steps", save_steps=3)
    assert (tmp_path / "a" / "checkpoint-3").is_dir()
    folder = tmp_path / "run"
    state = json.loads((folder / STATE_FILE).read_text())
    weights = load_file(folder / "model.safetensors")
    assert all(t.dtype == torch.bfloat16 for t in weights.values())
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"  # the dtype of the weights
    assert not list(folder.glob("*.py"))  # no third copy of the remote code
    card = json.loads((folder / "slimspec_card.json").read_text())  # the folder ships with its recipe on its card
    assert card["recipe"]["dataset_path"] == "tiny-rows"
    assert first.drafter.state_dict()[next(iter(weights))].dtype == torch.float32  # master weights untouched
    assert (state["position"], state["steps"], state["conversations"]) == (6, 3, 6)
    assert state["tokens"] == sum(len(r) for r in seen_first)
    order = data_order(10, seed=7, start=0, count=12)
    assert seen_first == [ids[i] for i in order[:6]]

    second, seen_second, start = run_session(tmp_path, "a", rows)  # the recipe's output dir again: each call's scratch
    # the second session starts from the folder's (bf16) weights, not from a new drafter
    for name, tensor in weights.items():
        torch.testing.assert_close(start[name], tensor.float(), rtol=0, atol=0)
    assert seen_second == [ids[i] for i in order[6:12]]  # on into the second epoch, where the first stopped
    state = ContinualState.load(folder)
    assert (state.position, state.steps, state.conversations) == (12, 6, 12)
    assert state.tokens == sum(len(r) for r in seen_first + seen_second)
    assert [s["from_position"] for s in state.sessions] == [0, 6]


def test_a_session_writes_the_folder_at_every_save_and_trains_on(tmp_path):
    # the folder is written (recipe included) while the Trainer runs: nothing it does may break the Trainer's state
    trainer, seen, _ = run_session(tmp_path, "a", tiny_rows(10), max_steps=3, save_strategy="steps", save_steps=1)
    assert trainer.state.global_step == 3
    state = ContinualState.load(tmp_path / "run")
    assert (state.position, state.steps) == (6, 3)
    assert json.loads((tmp_path / "run" / "slimspec_card.json").read_text())["recipe"]["save_steps"] == 1


def test_new_data_start_their_own_order_and_the_totals_carry_on(tmp_path, caplog):
    run_session(tmp_path, "a", tiny_rows(10), max_steps=2)
    other = tiny_rows(8, seed=1)
    _, seen, _ = run_session(tmp_path, "b", other, max_steps=2, dataset_path="other-rows")
    ids = [tuple(r) for r in other["input_ids"]]
    assert seen == [ids[i] for i in data_order(8, seed=7, start=0, count=4)]
    state = ContinualState.load(tmp_path / "run")
    assert (state.data, state.position, state.steps, state.conversations) == ("other-rows", 4, 4, 8)
    assert "another data order" in caplog.text


def test_a_training_set_that_grew_starts_a_new_order_over_all_of_it(tmp_path, caplog):
    run_session(tmp_path, "a", tiny_rows(10), max_steps=2)
    assert ContinualState.load(tmp_path / "run").rows == 10
    grown = tiny_rows(14)  # the same answers and four more (a data regeneration that went on)
    _, seen, _ = run_session(tmp_path, "b", grown, max_steps=2)
    ids = [tuple(r) for r in grown["input_ids"]]
    assert seen == [ids[i] for i in data_order(14, seed=7, start=0, count=4)]
    state = ContinualState.load(tmp_path / "run")
    assert (state.rows, state.position, state.steps, state.conversations) == (14, 4, 4, 8)
    assert "now holds 14" in caplog.text


def test_a_damaged_state_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / STATE_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=r"^`continual_dir` .*: continual_state.json is not a continual run's state"):
        ContinualState.load(folder)
