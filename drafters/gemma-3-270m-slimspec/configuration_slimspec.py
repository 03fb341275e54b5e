# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""Configuration of SlimSpec drafters: an EAGLE-3 backbone with a low-rank (or baseline) LM head.

This module imports only `transformers` so that `save_pretrained` can copy it next to the weights and the
drafter loads with `trust_remote_code=True` where `slimspec_hf` is not installed.
"""

import sys
import warnings
from typing import Any

from transformers import PreTrainedConfig


HEAD_TYPES = ("low_rank", "full", "trimmed", "target")


class SlimSpecDrafterConfig(PreTrainedConfig):
    r"""
    Configuration of a [`SlimSpecDrafterForCausalLM`].

    The backbone sizes are usually copied from the target with [`~SlimSpecDrafterConfig.from_target_config`].

    Args:
        vocab_size (`int`): size of the (full) vocabulary, shared with the target.
        hidden_size (`int`): width d of the drafter (the target's width for EAGLE-3 drafters).
        intermediate_size (`int`): width of the SwiGLU MLP.
        num_attention_heads, num_key_value_heads, head_dim (`int`): attention shape of the single decoder layer.
        rms_norm_eps (`float`): epsilon of the RMSNorms.
        rope_parameters (`dict`): RoPE parameters (`{"rope_type": "default", "rope_theta": ...}`).
        max_position_embeddings (`int`): longest sequence the RoPE tables are meant for.
        target_hidden_size (`int`): width d_t of the target's hidden states (defaults to `hidden_size`).
        target_num_hidden_layers (`int`): number of decoder layers L of the target.
        target_layer_ids (`list[int]`): three indices into the target's `outputs.hidden_states` (index 0 is the
            embedding output, index i the input of decoder layer i); default `[2, L // 2, L - 3]`.
        head_type (`str`): one of `"low_rank"` (SlimSpec), `"full"`, `"trimmed"` (VocabTrim baseline) and
            `"target"` (the target's own frozen LM head).
        head_rank (`int`): rank r of the low-rank head, default `hidden_size // 8`.
        draft_vocab_size (`int`): number K of kept tokens of the trimmed head.
        norm_before_residual (`bool`): take the layer's residual after `hidden_norm` (speculators variant).
        fc_norm (`bool`): EAGLE-3.1: an RMSNorm on each of the three target layers' states before `fc` (weights
            `fc_norm.{i}.weight`, d_t each).
        norm_before_fc (`bool`): EAGLE-3.1 variant: one RMSNorm over their concatenation before `fc`
            (`input_norm.weight`, 3·d_t). At most one of `fc_norm` and `norm_before_fc`.
        norm_output (`bool`): EAGLE-3.1: the state fed back to the next drafting step is the final norm's output
            (post-norm) instead of the layer's pre-norm output. The LM head reads the post-norm state either way.
        ttt_steps (`int`, *optional*): the training-time-test depth the drafter was trained with (EAGLE-3's
            unrolled drafting steps); engines that draft chains of their own (vLLM) take it as their default number
            of speculative tokens. Checkpoints written before this name hold it as `num_speculative_tokens`, read
            here. Decoding settings are not here: they are the drafter's `generation_config`.
        target_model_name_or_path (`str`): the target the drafter was trained for.
    """

    model_type = "slimspec_drafter"

    vocab_size: int = 49152
    hidden_size: int = 576
    intermediate_size: int = 1536
    num_attention_heads: int = 9
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-5
    rope_parameters: dict | None = None
    max_position_embeddings: int = 8192
    attention_bias: bool = False
    attention_dropout: float = 0.0
    initializer_range: float = 0.02
    tie_word_embeddings: bool = False
    # target pairing
    target_hidden_size: int | None = None
    target_num_hidden_layers: int | None = None
    target_layer_ids: list[int] | None = None
    target_model_name_or_path: str | None = None
    # head
    head_type: str = "low_rank"
    head_rank: int | None = None
    draft_vocab_size: int | None = None
    # layer variant: residual taken after `hidden_norm` (vLLM speculators' norm_before_residual=True)
    norm_before_residual: bool = False
    # EAGLE-3.1 (speculators' names): norms in front of `fc`, and the post-norm state fed back
    fc_norm: bool = False
    norm_before_fc: bool = False
    norm_output: bool = False
    # training
    ttt_steps: int | None = None

    def __post_init__(self, **kwargs):
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.rope_parameters is None:
            self.rope_parameters = {"rope_type": "default", "rope_theta": kwargs.pop("rope_theta", 10000.0)}
        if self.target_hidden_size is None:
            self.target_hidden_size = self.hidden_size
        if self.target_layer_ids is None and self.target_num_hidden_layers is not None:
            num_layers = self.target_num_hidden_layers
            self.target_layer_ids = [2, num_layers // 2, num_layers - 3]
        if self.target_layer_ids is not None:
            self.target_layer_ids = [int(i) for i in self.target_layer_ids]
        if self.head_type == "low_rank" and self.head_rank is None:
            self.head_rank = max(1, self.hidden_size // 8)
        # Checkpoints written before `ttt_steps` hold the depth as `num_speculative_tokens`.
        if self.ttt_steps is None and kwargs.get("num_speculative_tokens") is not None:
            self.ttt_steps = int(kwargs["num_speculative_tokens"])
        super().__post_init__(**kwargs)
        self._validate()

    def _validate(self):
        if self.head_type not in HEAD_TYPES:
            raise ValueError(f"`head_type` must be one of {list(HEAD_TYPES)}, got {self.head_type!r}.")
        if self.head_type == "low_rank":
            limit = min(self.hidden_size, self.vocab_size)
            if not isinstance(self.head_rank, int) or not 0 < self.head_rank < limit:
                raise ValueError(
                    f"`head_rank` ({self.head_rank}) must be an integer with 0 < head_rank < min(hidden_size, "
                    f"vocab_size) = {limit}; the default is hidden_size // 8 = {max(1, self.hidden_size // 8)}."
                )
        if self.head_type == "trimmed":
            if not isinstance(self.draft_vocab_size, int) or not 0 < self.draft_vocab_size <= self.vocab_size:
                raise ValueError(
                    f"`draft_vocab_size` ({self.draft_vocab_size}) must be set to an integer in [1, vocab_size "
                    f"= {self.vocab_size}] for head_type='trimmed' (the number K of kept tokens)."
                )
        if self.target_layer_ids is not None:
            ids = self.target_layer_ids
            if len(ids) != 3:
                raise ValueError(
                    f"`target_layer_ids` must hold three indices (low, mid, high) into the target's "
                    f"`outputs.hidden_states`, got {ids}."
                )
            if self.target_num_hidden_layers is not None:
                bad = [i for i in ids if not 0 <= i <= self.target_num_hidden_layers]
                if bad:
                    raise ValueError(
                        f"`target_layer_ids` {ids} has {bad} outside [0, target_num_hidden_layers = "
                        f"{self.target_num_hidden_layers}] (indices into `outputs.hidden_states`, 0 = embeddings)."
                    )
        for flag in ("norm_before_residual", "fc_norm", "norm_before_fc", "norm_output"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"`{flag}` must be true or false, got {getattr(self, flag)!r}.")
        if self.fc_norm and self.norm_before_fc:
            raise ValueError(
                "`fc_norm` and `norm_before_fc` are both true; an EAGLE-3.1 drafter norms the target's states before "
                "`fc` either per layer (fc_norm) or over their concatenation (norm_before_fc): set at most one."
            )
        if self.ttt_steps is not None and (isinstance(self.ttt_steps, bool) or int(self.ttt_steps) < 1):
            raise ValueError(f"`ttt_steps` ({self.ttt_steps}) must be None or at least 1.")
        if self.hidden_size % self.num_attention_heads != 0 and self.head_dim * self.num_attention_heads == 0:
            raise ValueError(f"`hidden_size` ({self.hidden_size}) and `num_attention_heads` do not fit.")

    @classmethod
    def from_target_config(cls, target_config: Any, **overrides) -> "SlimSpecDrafterConfig":
        """Builds a drafter config whose backbone matches a Llama-/Qwen-style `target_config`.

        Any field can be overridden (`head_type="full"`, `head_rank=36`, `target_layer_ids=[...]`, ...).
        """
        text_config = target_config.get_text_config() if hasattr(target_config, "get_text_config") else target_config
        required = ("vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers")
        missing = [name for name in required if getattr(text_config, name, None) is None]
        if missing:
            raise ValueError(
                f"`target_config` ({type(text_config).__name__}) lacks {missing}; pass a Llama-/Qwen-style "
                "decoder config or set these fields in the overrides."
            )
        num_heads = text_config.num_attention_heads
        rope = getattr(text_config, "rope_parameters", None)
        if rope is None:
            rope = {"rope_type": "default", "rope_theta": getattr(text_config, "rope_theta", 10000.0)}
        values = {
            "vocab_size": text_config.vocab_size,
            "hidden_size": text_config.hidden_size,
            "intermediate_size": getattr(text_config, "intermediate_size", 4 * text_config.hidden_size),
            "num_attention_heads": num_heads,
            "num_key_value_heads": getattr(text_config, "num_key_value_heads", None) or num_heads,
            "head_dim": getattr(text_config, "head_dim", None) or text_config.hidden_size // num_heads,
            "hidden_act": getattr(text_config, "hidden_act", "silu"),
            "rms_norm_eps": getattr(text_config, "rms_norm_eps", 1e-6),
            "rope_parameters": dict(rope),
            "max_position_embeddings": getattr(text_config, "max_position_embeddings", 8192),
            "target_hidden_size": text_config.hidden_size,
            "target_num_hidden_layers": text_config.num_hidden_layers,
            "target_model_name_or_path": getattr(target_config, "_name_or_path", None) or None,
            "bos_token_id": getattr(text_config, "bos_token_id", None),
            "eos_token_id": getattr(text_config, "eos_token_id", None),
            "pad_token_id": getattr(text_config, "pad_token_id", None),
        }
        values.update(overrides)
        return cls(**values)


def validate_pairing(drafter, target) -> None:
    """Fails loudly where the drafter's config does not fit the target's (`drafter.config` against
    `target.config`): a mismatch would silently collapse acceptance."""
    cfg = drafter.config
    tcfg = target.config.get_text_config()
    if tcfg.vocab_size != cfg.vocab_size:
        raise ValueError(
            f"The drafter's vocab_size ({cfg.vocab_size}) differs from the target's ({tcfg.vocab_size}); "
            "SlimSpec drafters share the target's vocabulary. Use a drafter trained for this target."
        )
    if tcfg.hidden_size != cfg.target_hidden_size:
        raise ValueError(
            f"The drafter expects target_hidden_size {cfg.target_hidden_size}, the target has hidden_size "
            f"{tcfg.hidden_size}. Use a drafter trained for this target."
        )
    if cfg.target_layer_ids is None:
        raise ValueError("The drafter config has no `target_layer_ids`; set them (indices into hidden_states).")
    bad = [i for i in cfg.target_layer_ids if not 0 <= i <= tcfg.num_hidden_layers]
    if bad:
        raise ValueError(
            f"The drafter's target_layer_ids {cfg.target_layer_ids} include {bad}, beyond the target's "
            f"{tcfg.num_hidden_layers} layers (valid: 0..{tcfg.num_hidden_layers}, indices into hidden_states)."
        )
    # The structure decides, not the name: the same target loaded from a local folder or a cache path is the same
    # target. Vocabulary and width are checked above; a different depth means another model of the family.
    trained_layers = getattr(cfg, "target_num_hidden_layers", None)
    if trained_layers is not None and trained_layers != tcfg.num_hidden_layers:
        # Point the warning at the caller's code: the first frame outside transformers, torch and this package
        # (`transformers_modules.*` when loaded as remote code).
        frame, level = sys._getframe(1), 2
        while frame is not None and frame.f_globals.get("__name__", "").startswith(
            ("transformers", "torch", "slimspec_hf")
        ):
            frame, level = frame.f_back, level + 1
        expected = cfg.target_model_name_or_path or "its target"
        actual = getattr(target.config, "_name_or_path", None) or type(target).__name__
        warnings.warn(
            f"This drafter was trained for {expected!r} ({trained_layers} layers) but is paired with {actual!r} "
            f"({tcfg.num_hidden_layers} layers, same vocabulary and width); acceptance may be low. Use the drafter "
            "trained for this target.",
            UserWarning,
            stacklevel=level if frame is not None else 2,
        )


def is_slimspec_drafter(model) -> bool:
    return getattr(getattr(model, "config", None), "model_type", None) == SlimSpecDrafterConfig.model_type


__all__ = ["SlimSpecDrafterConfig", "HEAD_TYPES", "is_slimspec_drafter", "validate_pairing"]
