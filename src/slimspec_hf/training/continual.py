# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Training that carries on across machines: a run folder (`continual_dir`) small enough to commit.

A run on a CPU is cut into time-boxed calls of a few hours, each on whatever machine is free (`sessions` in the
state: one entry per call). The run folder holds what the next call needs and nothing else: the drafter in bf16
(weights, config, generation config) and `continual_state.json` (where the run stands in its data order, and what it
has trained on so far). A call starts from the folder's weights at the folder's place in the data, trains for its wall-clock budget, and writes the
folder back at every checkpoint and at the end, each time whole (staged beside it, then swapped in).

The optimiser state is not kept (it would triple the folder): each call starts Adam afresh, so give the recipe a
short warm-up and a constant learning rate. The data order is fixed by the dataset list and the seed: epoch `e` is
the training set shuffled with `data_seed + e`, and the position counts conversations from the run's first one.
When the recipe's data change, the new order starts at its beginning and the totals carry on.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from ..utils import atomic_write_json
from .card_inputs import record_card_inputs


logger = logging.getLogger(__name__)

STATE_FILE = "continual_state.json"


@dataclasses.dataclass
class ContinualState:
    """Where a continual run stands. `position` counts conversations in the current data order (`data`, `seed`);
    `rows` is the size of the training set that order shuffles (0: not recorded). The totals count everything the
    drafter in the folder has trained on in this run, over every call."""

    data: str = ""
    seed: int = 0
    rows: int = 0
    position: int = 0
    steps: int = 0
    conversations: int = 0
    tokens: int = 0
    seconds: float = 0.0
    sessions: list[dict] = dataclasses.field(default_factory=list)

    @classmethod
    def load(cls, folder: str | Path) -> ContinualState | None:
        """The state stored in `folder`, or None when the folder holds no run yet."""
        path = Path(folder) / STATE_FILE
        if not path.is_file():
            return None
        try:
            stored = json.loads(path.read_text())
            known = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: v for k, v in stored.items() if k in known})
        except (json.JSONDecodeError, TypeError) as error:
            raise ValueError(
                f"`continual_dir` {folder}: {STATE_FILE} is not a continual run's state ({error}); restore it from "
                "version control or point `continual_dir` at an empty folder to start a new run."
            ) from None

    def has_weights(self, folder: str | Path) -> bool:
        return (Path(folder) / "model.safetensors").is_file()


def data_order(num_rows: int, seed: int, start: int, count: int) -> list[int]:
    """Row indices of the continual data order from conversation `start`, `count` of them: epoch `e` is a
    permutation of the rows drawn with seed `seed + e`, so any position is reached without replaying the ones
    before it."""
    if num_rows < 1:
        raise ValueError("the training set is empty: a continual run needs at least one conversation.")
    order: list[int] = []
    epoch, offset = divmod(start, num_rows)
    while len(order) < count:
        generator = torch.Generator().manual_seed(seed + epoch)
        permutation = torch.randperm(num_rows, generator=generator).tolist()
        order.extend(permutation[offset:])
        epoch, offset = epoch + 1, 0
    return order[:count]


class ContinualCallback(TrainerCallback):
    """Writes the run folder (bf16 weights and state) at every checkpoint the trainer saves and at the end of
    training. `tokens` are the training set's token counts in the order the trainer reads it (sequentially)."""

    def __init__(self, folder: str | Path, state: ContinualState, tokens: list[int], conversations_per_step: int):
        self.folder = Path(folder)
        self.state = state
        self.tokens = tokens
        self.per_step = conversations_per_step
        self.start_step = 0
        self.start_time = None
        self.session = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start_step = state.global_step
        self.start_time = time.monotonic()
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.session = {"started": started, "from_position": self.state.position}

    def on_save(self, args, state, control, model=None, **kwargs):
        self.write(state.global_step, model, args)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self.write(state.global_step, model, args)

    def write(self, global_step: int, model, recipe=None) -> None:
        if model is None or self.start_time is None or not _is_main_process():
            return
        steps = global_step - self.start_step
        conversations = steps * self.per_step
        session = dict(self.session, steps=steps, conversations=conversations)
        session["tokens"] = sum(self.tokens[:conversations])
        session["seconds"] = round(time.monotonic() - self.start_time, 1)
        state = dataclasses.replace(
            self.state,
            position=self.state.position + conversations,
            steps=self.state.steps + steps,
            conversations=self.state.conversations + conversations,
            tokens=self.state.tokens + session["tokens"],
            seconds=round(self.state.seconds + session["seconds"], 1),
            sessions=[*self.state.sessions, session],
        )
        write_run_folder(self.folder, getattr(model, "drafter", model), state, recipe)
        logger.info(
            "Continual run written to %s: step %d of the run, %d conversations, %.2fM tokens.",
            self.folder,
            state.steps,
            state.conversations,
            state.tokens / 1e6,
        )


def write_run_folder(folder: str | Path, drafter, state: ContinualState, recipe=None) -> None:
    """The drafter's weights in bf16 (its fp32 master weights untouched), its config, generation config, `state` and
    the card's inputs (the run's `recipe`, so that the folder ships with its recipe on its card), staged beside
    `folder` and swapped in whole (no copy of the remote code: the package loads a run folder)."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    parent = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    staging, old = parent / folder.name, folder.with_name(f".{folder.name}-old")
    try:
        weights = {
            name: tensor.detach().to(torch.bfloat16).contiguous() for name, tensor in drafter.state_dict().items()
        }
        drafter.save_pretrained(staging, state_dict=weights, safe_serialization=True)
        config = json.loads((staging / "config.json").read_text())
        config["dtype"] = "bfloat16"  # the weights' dtype (save_pretrained writes the fp32 master weights')
        atomic_write_json(staging / "config.json", config)
        for code in staging.glob("*.py"):  # the remote-code copies: a run folder is loaded by the package itself
            code.unlink()
        atomic_write_json(staging / STATE_FILE, dataclasses.asdict(state))
        if recipe is not None:
            record_card_inputs(staging, recipe=recipe)
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            folder.rename(old)
        staging.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def _is_main_process() -> bool:
    return not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0


__all__ = ["STATE_FILE", "ContinualCallback", "ContinualState", "data_order", "write_run_folder"]
