# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""slimspec-hf: SlimSpec speculative-decoding drafters (EAGLE-3 backbone, low-rank LM head) for transformers.

Importing the package registers the drafter with `AutoConfig`/`AutoModelForCausalLM`; building or loading a drafter
installs the `generate()` wrapper, so that `target.generate(**inputs, assistant_model=drafter)` drafts with SlimSpec.

The training pair `SlimSpecConfig` / `SlimSpecTrainer` is exported lazily (as trl does): `import slimspec_hf` stays
light and imports neither trl nor datasets until one of them is asked for.
"""

import importlib

from transformers import AutoConfig, AutoModelForCausalLM

from .cache_slimspec import SlimSpecDrafterCache
from .configuration_slimspec import HEAD_TYPES, SlimSpecDrafterConfig
from .decoding_slimspec import slimspec_generate
from .drafting_slimspec import DraftSettings
from .generation_slimspec import install_generation_hook
from .modeling_slimspec import (
    FullHead,
    LowRankHead,
    SlimSpecDrafterForCausalLM,
    SlimSpecDrafterPreTrainedModel,
    TargetHead,
    TrimmedHead,
    low_rank_factors,
)
from .stats_slimspec import SlimSpecGenerationStats
from .targets import (
    EMBEDDED_TARGET_NAME,
    load_embedded_drafter,
    load_embedded_target,
    load_target,
    resolve_dtype,
)


__version__ = "0.1.0"

AutoConfig.register(SlimSpecDrafterConfig.model_type, SlimSpecDrafterConfig, exist_ok=True)
AutoModelForCausalLM.register(SlimSpecDrafterConfig, SlimSpecDrafterForCausalLM, exist_ok=True)
# save_pretrained writes `auto_map` and copies the two model files, for trust_remote_code=True users.
SlimSpecDrafterConfig.register_for_auto_class()
SlimSpecDrafterForCausalLM.register_for_auto_class("AutoModelForCausalLM")

# name -> module that defines it, imported on first access (PEP 562)
_LAZY = {
    "SlimSpecConfig": ".training.config",
    "SlimSpecTrainer": ".training.trainer",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # later lookups skip this hook
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "HEAD_TYPES",
    "SlimSpecDrafterConfig",
    "SlimSpecDrafterPreTrainedModel",
    "SlimSpecDrafterForCausalLM",
    "SlimSpecDrafterCache",
    "DraftSettings",
    "slimspec_generate",
    "SlimSpecGenerationStats",
    "LowRankHead",
    "FullHead",
    "TrimmedHead",
    "TargetHead",
    "low_rank_factors",
    "install_generation_hook",
    "EMBEDDED_TARGET_NAME",
    "load_embedded_target",
    "load_embedded_drafter",
    "load_target",
    "resolve_dtype",
    "SlimSpecConfig",
    "SlimSpecTrainer",
]
