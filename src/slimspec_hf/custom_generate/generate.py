# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""SlimSpec speculative decoding (chains, EAGLE-2 trees, prompt lookup) as a transformers `custom_generate` recipe.

    target.generate(**inputs, custom_generate="<repo or folder holding custom_generate/>", trust_remote_code=True,
                    assistant_model=drafter, draft_tree_size=16, draft_tree_depth=4, draft_tree_top_k=4)

transformers hands this `generate` every argument of `generate()` (with `model` for `self`). It takes the same route
as `target.generate(**inputs, assistant_model=drafter)`: `decoding_slimspec.generate_with_drafter`, found next to
the drafter's own modeling code (the remote-code unit a SlimSpec drafter ships with) or, failing that, in the
installed `slimspec_hf` package. Imports only the standard library here.
"""

import importlib


def _decoding_module(drafter):
    package = type(drafter).__module__.rpartition(".")[0]
    candidates = ([f"{package}.decoding_slimspec"] if package else []) + ["slimspec_hf.decoding_slimspec"]
    for name in candidates:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(
        f"SlimSpec decoding was found neither next to the drafter's code ({package or 'no package'}) nor in "
        "`slimspec_hf`: `pip install slimspec-hf`, or load a drafter whose repository ships `decoding_slimspec.py`."
    )


def generate(model, assistant_model=None, **kwargs):
    """Runs `model.generate` with a SlimSpec drafter (`assistant_model`); the drafter's decoding settings
    (`draft_tree_size`, `draft_lookup`, `num_assistant_tokens`, ...) are taken from the keywords."""
    if getattr(getattr(assistant_model, "config", None), "model_type", None) != "slimspec_drafter":
        raise ValueError(
            "SlimSpec decoding needs the drafter: pass `assistant_model=<SlimSpec drafter>` to `generate()`; got "
            f"{type(assistant_model).__name__}."
        )
    decoding = _decoding_module(assistant_model)
    return decoding.generate_with_drafter(type(model).generate, model, assistant_model, kwargs)
