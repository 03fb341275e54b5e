# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""What a drafter folder records for its model card (`slimspec_card.json`): the recipe it was trained with, and
later its results, datasets and licence. The trainer records the recipe with the weights; the card is rendered from
these inputs where a drafter is published (`interop.model_card.write_model_card`: `slimspec train`, `slimspec push`,
the benchmark adding results), so that each step adds to what the earlier ones recorded.
"""

import contextlib
import dataclasses
import json
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..utils import atomic_write


CARD_INPUTS_FILE = "slimspec_card.json"
# Keys never copied from a recipe into a public card: local paths and credentials.
RECIPE_PRIVATE = re.compile(r"(token|secret|password|_dir$|^output_dir$|^logging_dir$|^resume_from_checkpoint$)")
CARD_INPUT_KEYS = ("recipe", "results", "datasets", "license")


def plain(value: Any) -> Any:
    """A YAML/JSON-safe copy of a recipe value."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "value") and isinstance(value.value, (str, int)):  # enums
        return value.value
    return str(value)


def recipe_dict(recipe: Any) -> dict | None:
    """A recipe as a dict: a mapping, a YAML/JSON file, or a (Training)arguments dataclass (non-default fields)."""
    if recipe is None:
        return None
    if isinstance(recipe, (str, os.PathLike)):
        path = Path(recipe)
        if not path.is_file():
            raise FileNotFoundError(f"`recipe` ({recipe}) is not a file; pass a YAML recipe, a dict or the config.")
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(loaded, Mapping):
            raise ValueError(f"`recipe` ({recipe}) must hold a YAML mapping, got {type(loaded).__name__}.")
        recipe = loaded
    elif dataclasses.is_dataclass(recipe) and not isinstance(recipe, type):
        recipe = _changed_fields(recipe)
    elif not isinstance(recipe, Mapping):
        raise TypeError(
            f"`recipe` must be a dict, a path to a YAML recipe or a config dataclass, got {type(recipe).__name__}."
        )
    return {str(k): plain(v) for k, v in recipe.items() if not RECIPE_PRIVATE.search(str(k))}


@contextlib.contextmanager
def _accelerate_state_kept():
    """accelerate's shared (Borg) state as it was before the block, whatever the block reset."""
    try:
        from accelerate.state import AcceleratorState, PartialState
    except ImportError:
        yield
        return
    kept = [(cls, dict(cls._shared_state)) for cls in (PartialState, AcceleratorState)]
    try:
        yield
    finally:
        for cls, state in kept:
            cls._shared_state.clear()
            cls._shared_state.update(state)


def _changed_fields(args: Any) -> dict:
    """The init fields of a dataclass instance that differ from a default instance of its class.

    The baseline is built by the class itself (from the required fields only) so that what its post-init normalises
    (TrainingArguments turns `report_to=None` into `[]`, fills `accelerator_config`, ...) does not count as a change;
    if that fails, the declared field defaults are the baseline. A TrainingArguments post-init resets accelerate's
    process-wide state, which a running Trainer needs (a continual run records its recipe at every save): the state
    is put back afterwards.
    """
    fields = [f for f in dataclasses.fields(args) if f.init]
    required = {
        f.name: getattr(args, f.name)
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    try:
        with warnings.catch_warnings(), _accelerate_state_kept():
            warnings.simplefilter("ignore")
            baseline = type(args)(**required)
        defaults = {f.name: getattr(baseline, f.name) for f in fields}
    except Exception:  # noqa: BLE001 - any failure falls back to the declared defaults
        defaults = {
            f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
            for f in fields
            if f.name not in required
        }
    return {
        f.name: getattr(args, f.name)
        for f in fields
        if f.name in required or plain(getattr(args, f.name)) != plain(defaults.get(f.name))
    }


def load_card_inputs(folder: Path) -> dict:
    path = folder / CARD_INPUTS_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        warnings.warn(
            f"Ignoring {path}: not valid JSON ({err}); the card is rendered from the arguments only.", stacklevel=3
        )
        return {}
    return data if isinstance(data, dict) else {}


def record_card_inputs(folder: str | os.PathLike, **values) -> dict:
    """Records card inputs (`recipe`, `results`, `datasets`, `license`) in `folder`'s `slimspec_card.json`, keeping
    what an earlier call recorded for any left as None; returns them all. The recipe may be a dict, a YAML path or a
    config dataclass (`recipe_dict`)."""
    unknown = sorted(set(values) - set(CARD_INPUT_KEYS))
    if unknown:
        raise TypeError(f"unknown card inputs {unknown}; valid: {list(CARD_INPUT_KEYS)}.")
    folder = Path(folder)
    inputs = {key: load_card_inputs(folder).get(key) for key in CARD_INPUT_KEYS}
    if values.get("recipe") is not None:
        values["recipe"] = recipe_dict(values["recipe"])
    inputs.update({key: value for key, value in values.items() if value is not None})
    atomic_write(folder / CARD_INPUTS_FILE, (json.dumps(inputs, indent=2, ensure_ascii=False) + "\n").encode())
    return inputs


__all__ = ["CARD_INPUTS_FILE", "load_card_inputs", "plain", "recipe_dict", "record_card_inputs"]
