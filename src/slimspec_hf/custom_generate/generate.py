# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""SlimSpec dynamic-tree drafting (EAGLE-2) as a transformers `custom_generate` recipe.

    target.generate(**inputs, custom_generate="<repo or folder holding custom_generate/>", trust_remote_code=True,
                    assistant_model=drafter, tree_size=16, tree_depth=4, tree_top_k=4)

transformers hands this `generate` every argument of `generate()` (with `model` for `self`). The decoding itself is
`tree_slimspec.tree_decoding`, found next to the drafter's own modeling code (the remote-code unit a SlimSpec drafter
ships with) or, failing that, in the installed `slimspec_hf` package. Imports only the standard library here.
"""

import importlib


def _tree_module(drafter):
    package = type(drafter).__module__.rpartition(".")[0]
    candidates = ([f"{package}.tree_slimspec"] if package else []) + ["slimspec_hf.tree_slimspec"]
    for name in candidates:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(
        f"SlimSpec tree decoding was found neither next to the drafter's code ({package or 'no package'}) nor in "
        "`slimspec_hf`: `pip install slimspec-hf`, or load a drafter whose repository ships `tree_slimspec.py`."
    )


def generate(model, *args, assistant_model=None, streamer=None, tree_size=16, tree_depth=4, tree_top_k=4, **kwargs):
    """Runs `model.generate` with a SlimSpec drafter (`assistant_model`) proposing a dynamic draft tree per round."""
    if assistant_model is None:
        raise ValueError(
            "SlimSpec tree decoding needs the drafter: pass `assistant_model=<SlimSpec drafter>` to `generate()`."
        )
    tree = _tree_module(assistant_model)
    return model.generate(
        *args,
        custom_generate=tree.slimspec_tree_generate,
        drafter=assistant_model,
        tree_streamer=streamer,
        tree_size=tree_size,
        tree_depth=tree_depth,
        tree_top_k=tree_top_k,
        **kwargs,
    )
