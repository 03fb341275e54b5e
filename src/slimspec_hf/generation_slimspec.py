# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""SlimSpec decoding through `generate()`: acceptance statistics, the candidate generator, the pairing check and the
hook that routes `target.generate(**inputs, assistant_model=drafter)` to them.

Part of the remote-code unit with `configuration_slimspec.py` and `modeling_slimspec.py`: it imports only `torch`,
`transformers` and those siblings (relatively), so `save_pretrained` copies it next to the weights and
`trust_remote_code=True` users get every decoding mode without this package. `modeling_slimspec` imports it lazily
(the model builds its generator) and installs the hook when it is loaded.
"""

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from transformers import GenerationMixin, PreTrainedModel
from transformers.generation.candidate_generator import CandidateGenerator

from .configuration_slimspec import SlimSpecDrafterConfig


if TYPE_CHECKING:
    from .modeling_slimspec import SlimSpecDrafterForCausalLM


@dataclass
class SlimSpecGenerationStats:
    """Acceptance statistics of the last `generate()` call (filled in by the candidate generator)."""

    rounds: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    drafted_per_position: list[int] = field(default_factory=list)

    @property
    def acceptance_length(self) -> float:
        """τ: tokens produced per target verification (accepted drafts + the target's own token)."""
        return (self.accepted_tokens + self.rounds) / self.rounds if self.rounds else float("nan")

    @property
    def per_position_acceptance(self) -> list[float]:
        """Fraction of rounds in which the i-th drafted token was accepted, among rounds that drafted it."""
        return [a / d if d else float("nan") for a, d in zip(self.accepted_per_position, self.drafted_per_position)]

    def as_dict(self) -> dict:
        return {
            "rounds": self.rounds,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_length": self.acceptance_length,
            "per_position_acceptance": self.per_position_acceptance,
        }


class SlimSpecCandidateGenerator(CandidateGenerator):
    """Drafts k tokens per round from the target's hidden states of the positions it just accepted.

    Round 1 returns no candidates so that the target prefills the prompt. Each later round appends the newly
    accepted positions (target features) to the drafter's cache, dropping the positions the drafter computed
    from its own states in the previous round, then drafts autoregressively, feeding back its own states.
    """

    requires_model_outputs = True

    def __init__(
        self,
        drafter: "SlimSpecDrafterForCausalLM",
        target: PreTrainedModel,
        generation_config,
        logits_processor=None,
        num_speculative_tokens: int | None = None,
        confidence_threshold: float | None = None,
        validate: bool = True,
    ):
        if validate:  # generate() validated the pairing already (see install_generation_hook)
            validate_pairing(drafter, target)
        self.drafter = drafter.attach_target(target)
        self.layer_ids = list(drafter.config.target_layer_ids)
        # Ask the target for just the three layers, unless the caller wants all hidden states returned anyway
        # (the indices then still point into the full tuple).
        wants_all = bool(getattr(generation_config, "output_hidden_states", False))
        self.model_kwargs_overrides = {"output_hidden_states": True if wants_all else self.layer_ids}
        self.num_speculative_tokens = int(num_speculative_tokens or drafter.config.num_speculative_tokens)
        if confidence_threshold is not None and not 0.0 <= float(confidence_threshold) < 1.0:
            raise ValueError(
                f"`assistant_confidence_threshold` must be a probability in [0, 1), got {confidence_threshold!r}."
            )
        self.confidence_threshold = None if confidence_threshold is None else float(confidence_threshold)
        self.max_length = generation_config.max_length
        self.do_sample = bool(generation_config.do_sample)
        self.logits_processor = logits_processor if logits_processor is not None and len(logits_processor) else None
        eos = getattr(generation_config, "_eos_token_tensor", None)
        self.eos_token_ids = set(eos.flatten().tolist()) if eos is not None else set()
        from .modeling_slimspec import SlimSpecDrafterCache  # lazy: modeling_slimspec imports this module

        self.cache = SlimSpecDrafterCache()
        self.committed = 0  # drafter cache positions computed from target features
        self.stats = SlimSpecGenerationStats()
        drafter.last_generation_stats = self.stats
        self._drafted_this_round = 0

    @torch.no_grad()
    def get_candidates(
        self,
        input_ids: torch.LongTensor,
        model_kwargs=None,
        model_outputs=None,
        is_first_iteration=False,
        n_last_matches: int = 0,
        **kwargs,
    ) -> tuple[torch.LongTensor, torch.Tensor | None]:
        self._drafted_this_round = 0
        if is_first_iteration:
            return input_ids, None  # let the target prefill; its hidden states arrive next round
        if input_ids.shape[0] != 1:
            raise ValueError(
                f"SlimSpec drafting is batch-1 (as is assisted generation in transformers); got batch size "
                f"{input_ids.shape[0]}. Call `generate` once per prompt."
            )
        if model_outputs is None or getattr(model_outputs, "hidden_states", None) is None:
            raise ValueError("The target's outputs carry no `hidden_states`; SlimSpec drafting needs them.")
        drafter = self.drafter
        seq_len = input_ids.shape[1]
        # The target's last forward covered positions [committed, ...); the accepted ones are the first n_new.
        n_new = seq_len - 1 - self.committed
        features = torch.cat(
            [model_outputs.hidden_states[i][:, :n_new] for i in self.layer_ids], dim=-1
        )  # (1, n_new, 3·d_t)
        features = features.to(device=drafter.device, dtype=drafter.dtype)
        tokens = input_ids[:, self.committed + 1 :].to(drafter.device)  # x_{t+1} for each new t, (1, n_new)
        attention_mask = None
        mask_2d = model_kwargs.get("attention_mask") if model_kwargs else None
        if mask_2d is not None and not bool(mask_2d.all()):
            attention_mask = mask_2d[:, : seq_len - 1].to(drafter.device)
        positions = self._positions(mask_2d, self.committed, n_new, drafter.device)

        self.cache.crop(self.committed)
        out = drafter(
            input_ids=tokens,
            hidden_states=features,
            position_ids=positions,
            attention_mask=attention_mask,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.committed += n_new

        budget = min(self.num_speculative_tokens, self.max_length - seq_len - 1)
        if budget <= 0:
            return input_ids, None
        logits = out.logits[:, -1].float()  # (1, V)
        state = out.hidden_states[:, -1:]  # (1, 1, d)
        candidate_ids = input_ids
        all_logits = []
        last_position = positions[:, -1:]
        for i in range(budget):
            if self.logits_processor is not None:
                logits = self.logits_processor(candidate_ids, logits)
            probs = None
            if self.do_sample:
                probs = torch.softmax(logits, dim=-1)
                token = torch.multinomial(probs, num_samples=1)  # (1, 1)
            else:
                token = logits.argmax(dim=-1, keepdim=True)
            all_logits.append(logits)
            candidate_ids = torch.cat([candidate_ids, token.to(candidate_ids.device)], dim=-1)
            if i == budget - 1 or int(token) in self.eos_token_ids:
                break
            if self.confidence_threshold is not None:  # unsure of this token: verify what we have
                probs = probs if probs is not None else torch.softmax(logits, dim=-1)
                if float(probs[0, token[0, 0]]) < self.confidence_threshold:
                    break
            step_mask = None
            if attention_mask is not None:
                step_mask = torch.cat(
                    [
                        attention_mask,
                        attention_mask.new_ones((1, self.cache.get_seq_length() + 1 - attention_mask.shape[1])),
                    ],
                    dim=-1,
                )
            out = drafter(
                input_ids=token.to(drafter.device),
                hidden_states=state,
                position_ids=last_position + i + 1,
                attention_mask=step_mask,
                cache=self.cache,
                use_cache=True,
            )
            logits = out.logits[:, -1].float()
            state = out.hidden_states
        self._drafted_this_round = len(all_logits)
        candidate_logits = torch.stack(all_logits, dim=1)  # (1, k, V)
        return candidate_ids, candidate_logits

    @staticmethod
    def _positions(mask_2d, start: int, length: int, device) -> torch.LongTensor:
        if mask_2d is None:
            return torch.arange(start, start + length, device=device)[None]
        positions = (mask_2d.long().cumsum(-1) - 1).clamp(min=0)
        return positions[:, start : start + length].to(device)

    def update_candidate_strategy(self, input_ids: torch.LongTensor, scores: torch.Tensor, num_matches: int):
        drafted = self._drafted_this_round
        if self.committed == 0:
            return  # the prefill round: nothing was drafted, nothing verified
        stats = self.stats
        accepted = int(num_matches)
        stats.rounds += 1
        stats.drafted_tokens += drafted
        stats.accepted_tokens += accepted
        while len(stats.drafted_per_position) < drafted:
            stats.drafted_per_position.append(0)
            stats.accepted_per_position.append(0)
        for i in range(drafted):
            stats.drafted_per_position[i] += 1
            stats.accepted_per_position[i] += int(i < accepted)


def validate_pairing(drafter: "SlimSpecDrafterForCausalLM", target: PreTrainedModel) -> None:
    """Fails loudly where a mismatch would silently collapse acceptance."""
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
    expected = cfg.target_model_name_or_path
    actual = getattr(target.config, "_name_or_path", None) or getattr(target, "name_or_path", None)
    if expected and actual and _short_name(expected) != _short_name(actual):
        warnings.warn(
            f"This drafter was trained for {expected!r} but is paired with {actual!r}; acceptance may be low.",
            stacklevel=3,
        )


def _short_name(name: str) -> str:
    return str(name).rstrip("/").split("/")[-1].lower()


def _is_slimspec_drafter(model) -> bool:
    return getattr(getattr(model, "config", None), "model_type", None) == SlimSpecDrafterConfig.model_type


_HOOK_VERSION = 2  # 1: `_get_candidate_generator` and the k detection; 2: + explicit confidence threshold


def _unwrap_slimspec(function):
    """`function` without the wrappers any version of `install_generation_hook` put around it."""
    while hasattr(function, "__wrapped__") and "install_generation_hook" in getattr(function, "__qualname__", ""):
        function = function.__wrapped__
    return function


def install_generation_hook() -> None:
    """Routes `generate(assistant_model=<SlimSpec drafter>)` to the SlimSpec candidate generator.

    transformers has no public registry for candidate generators, so `GenerationMixin._get_candidate_generator`
    (and `_prepare_generation_config`, `_validate_generation_mode`) are wrapped once: idempotent, also across
    copies of this module loaded as remote code. The wrappers carry `_HOOK_VERSION`; a newer copy replaces the
    wrappers of an older one (so an old remote-code drafter loaded first cannot pin old behaviour). Other
    assistants keep transformers' own generators. The generator comes from the drafter's own class.
    """
    if int(getattr(GenerationMixin._get_candidate_generator, "_slimspec_hook", 0)) >= _HOOK_VERSION:
        return
    for name in ("_get_candidate_generator", "_prepare_generation_config", "_validate_generation_mode"):
        setattr(GenerationMixin, name, _unwrap_slimspec(getattr(GenerationMixin, name)))
    original = GenerationMixin._get_candidate_generator

    def _get_candidate_generator(
        self,
        generation_config,
        input_ids,
        inputs_tensor,
        logits_processor,
        model_kwargs,
        assistant_model=None,
        *args,
        **kwargs,
    ):
        if assistant_model is not None and _is_slimspec_drafter(assistant_model):
            return assistant_model.make_candidate_generator(self, generation_config, logits_processor, input_ids)
        return original(
            self,
            generation_config,
            input_ids,
            inputs_tensor,
            logits_processor,
            model_kwargs,
            assistant_model,
            *args,
            **kwargs,
        )

    _get_candidate_generator._slimspec_hook = _HOOK_VERSION
    _get_candidate_generator.__wrapped__ = original
    GenerationMixin._get_candidate_generator = _get_candidate_generator

    # transformers fills an unset `num_assistant_tokens` with its global default (20) before the generator is
    # built; remember whether the caller (kwargs, generation_config or the target's config) really set it.
    original_prepare = GenerationMixin._prepare_generation_config

    def _prepare_generation_config(self, generation_config=None, **kwargs):
        config, model_kwargs = original_prepare(self, generation_config, **kwargs)
        explicit = "num_assistant_tokens" in kwargs or any(
            getattr(c, "num_assistant_tokens", None) is not None for c in (generation_config, self.generation_config)
        )
        config._slimspec_explicit_k = explicit
        # Likewise `assistant_confidence_threshold` (transformers' global default 0.4 is meant for its own
        # assistants): SlimSpec drafters honour it only where the caller set it, else their config's
        # `draft_confidence_threshold`.
        config._slimspec_explicit_threshold = "assistant_confidence_threshold" in kwargs or any(
            getattr(c, "assistant_confidence_threshold", None) is not None
            for c in (generation_config, self.generation_config)
        )
        return config, model_kwargs

    _prepare_generation_config.__wrapped__ = original_prepare
    _prepare_generation_config._slimspec_hook = _HOOK_VERSION
    GenerationMixin._prepare_generation_config = _prepare_generation_config

    # Check the pairing before transformers' own assistant checks, whose vocabulary message ("different
    # tokenizers") would point SlimSpec users the wrong way.
    original_validate = GenerationMixin._validate_generation_mode

    def _validate_generation_mode(self, generation_mode, generation_config, generation_mode_kwargs):
        assistant = generation_mode_kwargs.get("assistant_model")
        if assistant is not None and _is_slimspec_drafter(assistant):
            validate_pairing(assistant, self)
        return original_validate(self, generation_mode, generation_config, generation_mode_kwargs)

    _validate_generation_mode.__wrapped__ = original_validate
    _validate_generation_mode._slimspec_hook = _HOOK_VERSION
    GenerationMixin._validate_generation_mode = _validate_generation_mode


__all__ = [
    "SlimSpecGenerationStats",
    "SlimSpecCandidateGenerator",
    "validate_pairing",
    "install_generation_hook",
]
