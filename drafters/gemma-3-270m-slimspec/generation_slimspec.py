# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The seam into transformers: one wrapper of `GenerationMixin.generate` sends
`target.generate(**inputs, assistant_model=drafter)` down the drafter's own decoding route.

Part of the remote-code unit: it imports only `transformers` and its siblings (relatively), so `save_pretrained`
copies it next to the weights, and the decoding modules with it (the relative import in `decoding_route`). A drafter
installs the wrapper when it is built or loaded; importing a module patches nothing.
"""

import functools
import importlib
import inspect

from transformers import GenerationMixin

from .configuration_slimspec import is_slimspec_drafter
from .drafting_slimspec import DraftSettings


# The parameters of `GenerationMixin.generate` the wrapper reads or passes by name (tests/test_generation.py checks
# that they exist, so a changed signature fails a test instead of misbehaving).
GENERATE_PARAMETERS = ("generation_config", "assistant_model", "streamer", "custom_generate", "kwargs")
_NOT_PASSED = ("self", "kwargs", "assistant_model", "custom_generate")  # bound arguments the route does not take on
# Settings that are not GenerationConfig fields: `generate()` would reject them as unused model kwargs.
CUSTOM_SETTINGS = tuple(name for name in DraftSettings.names() if name.startswith("draft_"))


def install_generation_hook() -> None:
    """Wraps `GenerationMixin.generate` once (transformers has no registry for assistants). The wrapper binds the
    call's arguments by name; a call whose `assistant_model` is a SlimSpec drafter (and that names no
    `custom_generate` of its own) goes to `generate_with_drafter` of the drafter's own code (`decoding_route`), every
    other call to the original untouched. Holding no decoding logic, it serves drafters of any copy of these files."""
    original = GenerationMixin.generate
    if getattr(original, "_slimspec_dispatch", False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def generate(self, *args, **kwargs):
        arguments = signature.bind_partial(self, *args, **kwargs).arguments
        assistant, keywords = arguments.get("assistant_model"), arguments.get("kwargs") or {}
        if arguments.get("custom_generate") is not None:  # a caller's own loop comes first (and may take our settings)
            return original(self, *args, **kwargs)
        if not is_slimspec_drafter(assistant):
            reject_draft_settings(keywords, assistant)
            return original(self, *args, **kwargs)
        named = {k: v for k, v in arguments.items() if k not in _NOT_PASSED}
        return decoding_route(assistant)(original, self, assistant, {**named, **keywords})

    generate._slimspec_dispatch = True
    GenerationMixin.generate = generate


def decoding_route(drafter):
    """`generate_with_drafter` of the drafter's own code: the `decoding_slimspec` module beside its class's module
    (a drafter loaded as remote code decodes with the copy it came with), else the one beside this file."""
    package = type(drafter).__module__.rpartition(".")[0]
    if package:
        name = f"{package}.decoding_slimspec"
        try:
            return importlib.import_module(name).generate_with_drafter
        except ModuleNotFoundError as error:
            if error.name != name:  # the module is there but fails to import: say so
                raise
    from .decoding_slimspec import generate_with_drafter  # a relative import: remote code ships the module

    return generate_with_drafter


def reject_draft_settings(kwargs: dict, assistant) -> None:
    """SlimSpec's own settings passed to a `generate()` call that has no SlimSpec drafter fail with one clear line
    (transformers would report them as unused model kwargs)."""
    unused = sorted(set(kwargs) & set(CUSTOM_SETTINGS))
    if unused:
        raise ValueError(
            f"{unused} are settings of SlimSpec drafters, but `assistant_model` is "
            f"{type(assistant).__name__ if assistant is not None else None}; pass "
            "`assistant_model=<SlimSpec drafter>` or drop them."
        )


__all__ = ["CUSTOM_SETTINGS", "decoding_route", "GENERATE_PARAMETERS", "install_generation_hook"]
