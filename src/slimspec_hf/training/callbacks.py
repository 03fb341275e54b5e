# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Trainer callbacks of [`SlimSpecTrainer`]: a wall-clock budget for the training loop (`max_train_seconds`)."""

import logging
import time

from transformers import TrainerCallback


logger = logging.getLogger(__name__)


class TimeLimitCallback(TrainerCallback):
    """Stops training before the step that would end past `max_seconds` of training, so that a time-boxed run (a
    rented GPU, a shared CPU) ends with its model saved instead of being killed.

    The clock starts at `on_train_begin` (after the target is loaded, the data tokenised and any offline features
    cached). A step is not begun when the elapsed time plus the mean step time so far would pass the budget.
    `max_steps` still applies: the run stops at whichever comes first. The learning-rate schedule is the one set
    for `max_steps`, so a run cut short by the clock ends before its decay is complete.
    """

    def __init__(self, max_seconds: float, clock=time.monotonic):
        if max_seconds <= 0:
            raise ValueError(f"`max_train_seconds` ({max_seconds}) must be > 0.")
        self.max_seconds = float(max_seconds)
        self.clock = clock
        self.start = None
        self.first_step = 0
        self.stopped_at = None  # the global step at which the budget stopped training, if it did

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = self.clock()
        self.first_step = state.global_step  # a resumed run counts only its own steps
        self.stopped_at = None

    def on_step_end(self, args, state, control, **kwargs):
        if self.start is None:
            return
        elapsed = self.clock() - self.start
        steps = max(state.global_step - self.first_step, 1)
        if elapsed + elapsed / steps > self.max_seconds:
            control.should_training_stop = True
            control.should_log = True  # the last window's loss and accuracies, as at `max_steps`
            control.should_save = args.save_strategy != "no"  # a checkpoint to resume from, as at `max_steps`
            self.stopped_at = state.global_step
            logger.info(
                "Stopping at step %d: %.0f s of training, and the next step (≈ %.1f s) would pass "
                "`max_train_seconds` (%.0f s).",
                state.global_step,
                elapsed,
                elapsed / steps,
                self.max_seconds,
            )


__all__ = ["TimeLimitCallback"]
