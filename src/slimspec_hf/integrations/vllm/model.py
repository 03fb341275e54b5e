# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""The SlimSpec drafter as a vLLM model: vLLM's EAGLE-3 Llama drafter with its dense `lm_head` replaced by the two
SlimSpec factors, `lm_head.down` (r×d) then `lm_head.up` (V×r), so that a drafted token costs r·(d + V)
multiply-adds in the head instead of d·V — as `SlimSpecDrafterForCausalLM` does in transformers' `generate()`.

Imported by vLLM only (through the model registry entry written by `slimspec_hf.integrations.vllm.register`).
"""

import torch
import torch.nn as nn
from vllm.config import VllmConfig
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM
from vllm.model_executor.models.utils import maybe_prefix


class SlimSpecLowRankLMHead(nn.Module):
    """`logits = W_up · (W_down · h)`: two bias-free linear layers, replicated on every rank (r is small)."""

    def __init__(self, hidden_size: int, vocab_size: int, rank: int, params_dtype: torch.dtype, prefix: str = ""):
        super().__init__()
        self.rank = rank
        self.down = ReplicatedLinear(
            hidden_size, rank, bias=False, params_dtype=params_dtype, return_bias=False, prefix=f"{prefix}.down"
        )
        self.up = ReplicatedLinear(
            rank, vocab_size, bias=False, params_dtype=params_dtype, return_bias=False, prefix=f"{prefix}.up"
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.up(self.down(hidden_states))  # (N, d) -> (N, r) -> (N, V)


class SlimSpecEagle3LlamaForCausalLM(Eagle3LlamaForCausalLM):
    """EAGLE-3 Llama drafter with a SlimSpec low-rank head over the full vocabulary (no d2t map).

    Config (`slimspec export --to vllm`): `head_rank` r and `draft_vocab_size` equal to `vocab_size`. Weights:
    vLLM's EAGLE-3 names plus `lm_head.down.weight` (r, d) and `lm_head.up.weight` (V, r).
    """

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        config = self.config
        rank = getattr(config, "head_rank", None)
        if not isinstance(rank, int) or not 0 < rank < config.hidden_size:
            raise ValueError(
                f"`head_rank` in the drafter config is {rank!r}; a SlimSpec low-rank head needs an integer "
                f"0 < head_rank < hidden_size ({config.hidden_size}). Export the drafter with `slimspec export --to "
                "vllm`."
            )
        if self.draft_id_to_target_id is not None:
            raise ValueError(
                f"`draft_vocab_size` ({config.draft_vocab_size}) must equal the target's vocabulary: SlimSpec heads "
                "cover the full vocabulary."
            )
        del self.lm_head
        self.lm_head = SlimSpecLowRankLMHead(
            config.hidden_size,
            config.vocab_size,
            rank,
            params_dtype=vllm_config.model_config.dtype,
            prefix=maybe_prefix(prefix, "lm_head"),
        )

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        logits = self.lm_head(hidden_states)
        scale = self.logits_processor.scale
        return logits * scale if scale != 1.0 else logits

    def get_top_tokens(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.compute_logits(hidden_states).argmax(dim=-1)


__all__ = ["SlimSpecEagle3LlamaForCausalLM", "SlimSpecLowRankLMHead"]
