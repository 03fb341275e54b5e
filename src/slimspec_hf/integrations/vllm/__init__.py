# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""vLLM plugin: serves SlimSpec drafters with the low-rank LM head kept as two factors.

vLLM loads `register` through the `vllm.general_plugins` entry point (pyproject.toml) in every process it starts.
It registers `Eagle3SlimSpecLlamaForCausalLM` with vLLM's model registry, by name only (vLLM imports
`slimspec_hf.integrations.vllm.model` when a checkpoint asks for it). `slimspec export --to vllm` writes such a
checkpoint; serve it with `speculative_config={"method": "eagle3", "model": DIR}`. Nothing here imports vLLM
until vLLM itself calls in.
"""

ARCHITECTURE = "Eagle3SlimSpecLlamaForCausalLM"
MODEL_CLASS = "slimspec_hf.integrations.vllm.model:SlimSpecEagle3LlamaForCausalLM"


def register() -> None:
    """vLLM's `vllm.general_plugins` hook: idempotent, may run once per process."""
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, MODEL_CLASS)


__all__ = ["ARCHITECTURE", "MODEL_CLASS", "register"]
