"""TimeLimitCallback: the training loop stops before the step that would pass `max_train_seconds`."""

import pytest
from transformers import TrainerControl, TrainerState

from slimspec_hf.training.callbacks import TimeLimitCallback
from slimspec_hf.training.config import SlimSpecConfig

from ..testing_utils import make_tiny_target, tiny_args, tiny_rows


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_stops_before_the_step_that_would_pass_the_budget(tmp_path):
    clock = FakeClock()
    callback = TimeLimitCallback(10.0, clock=clock)
    args = SlimSpecConfig(output_dir=str(tmp_path), save_strategy="steps", report_to="none", use_cpu=True)
    state, control = TrainerState(global_step=5), TrainerControl()  # resumed at step 5: only its own steps count
    callback.on_train_begin(args, state, control)
    for step in range(6, 9):  # 3 s a step: after steps 6, 7 and 8 (9 s), a fourth would end at 12 s
        clock.now += 3.0
        state.global_step = step
        callback.on_step_end(args, state, control)
        assert control.should_training_stop == (step == 8), step
    assert callback.stopped_at == 8 and control.should_save and control.should_log


def test_a_bad_budget_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"`max_train_seconds` \(0\) must be > 0"):
        TimeLimitCallback(0)
    with pytest.raises(ValueError, match=r"`max_train_seconds` \(-1"):
        SlimSpecConfig(output_dir=str(tmp_path), max_train_seconds=-1, use_cpu=True)


def test_the_trainer_stops_on_its_time_budget_and_logs_the_last_step(tmp_path):
    from slimspec_hf.training.trainer import SlimSpecTrainer

    args = tiny_args(tmp_path, max_steps=1000, max_train_seconds=1e-3, logging_steps=500)
    trainer = SlimSpecTrainer(args=args, target=make_tiny_target(), train_dataset=tiny_rows(8))
    trainer.train()
    assert trainer.state.global_step == 1  # the first step already used the budget
    assert any("loss" in h and h["step"] == 1 for h in trainer.state.log_history)  # logged though logging_steps=500
