# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""SlimSpec decoding through `generate()`: acceptance statistics, the candidate generator, the pairing check and the
hook that routes `target.generate(**inputs, assistant_model=drafter)` to them.

Part of the remote-code unit with `configuration_slimspec.py` and `modeling_slimspec.py`: it imports only `torch`,
`transformers` and those siblings (relatively), so `save_pretrained` copies it next to the weights and
`trust_remote_code=True` users get every decoding mode without this package. `modeling_slimspec` imports it lazily
(the model builds its generator) and installs the hook when it is loaded.
"""

import warnings
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

import torch
from transformers import GenerationMixin, PreTrainedModel
from transformers.generation.candidate_generator import CandidateGenerator

from .configuration_slimspec import SlimSpecDrafterConfig


if TYPE_CHECKING:
    from .modeling_slimspec import SlimSpecDrafterForCausalLM


# ----------------------------------------------------------------------------------------------------------------
# Decoding settings: the drafter's `generation_config` holds the defaults, a `generate()` keyword overrides them
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftSettings:
    """How a SlimSpec drafter drafts, resolved once per `generate()` call (validated here and nowhere else).

    Each field is a key of the drafter's `generation_config` (saved as `generation_config.json`) and a `generate()`
    keyword of the same name, which overrides it for that call.

    Args:
        num_assistant_tokens: tokens the drafter drafts per round (k).
        assistant_confidence_threshold: stop a round's drafting after the first drafted token the drafter gives
            less than this probability (0 never stops early). Lossless either way.
        draft_lookup: hybrid drafting — when the latest tokens also occur earlier in the prompt or the generated text,
            draft what followed them there (prompt-lookup decoding) instead of the drafter's chain. Lossless either
            way. The longest match (up to `draft_lookup_max_ngram` tokens, its most recent occurrence) is taken when
            it spans at least `draft_lookup_min_ngram` tokens, or, shorter, when its first token is also the
            drafter's next token; otherwise the drafter drafts.
        draft_lookup_min_ngram / draft_lookup_max_ngram: match lengths trusted without the drafter's agreement /
            longest suffix searched.
        draft_lookup_num_tokens: tokens drafted by a lookup round.
        draft_lookup_extend_ngram: with `draft_lookup`, a drafter chain whose last `draft_lookup_extend_ngram`+
            tokens occurred earlier is extended with what followed them there (verified in the same forward).
        draft_tree_size: > 0 drafts a dynamic tree of this many nodes (EAGLE-2 style) instead of a chain.
        draft_tree_depth / draft_tree_top_k: the tree's depth and children per expanded node.
    """

    num_assistant_tokens: int = 6
    assistant_confidence_threshold: float = 0.0
    draft_lookup: bool = False
    draft_lookup_min_ngram: int = 2
    draft_lookup_max_ngram: int = 8
    draft_lookup_num_tokens: int = 10
    draft_lookup_extend_ngram: int = 2
    draft_tree_size: int = 0
    draft_tree_depth: int = 4
    draft_tree_top_k: int = 4

    def __post_init__(self):
        def positive(name, value, minimum=1):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}.")

        positive("num_assistant_tokens", self.num_assistant_tokens)
        threshold = self.assistant_confidence_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
            raise ValueError(
                f"`assistant_confidence_threshold` must be a probability in [0, 1], got {threshold!r} "
                "(0 never stops a round early)."
            )
        if not isinstance(self.draft_lookup, bool):
            raise ValueError(f"`draft_lookup` must be True or False, got {self.draft_lookup!r}.")
        positive("draft_lookup_min_ngram", self.draft_lookup_min_ngram)
        positive("draft_lookup_max_ngram", self.draft_lookup_max_ngram, self.draft_lookup_min_ngram)
        positive("draft_lookup_num_tokens", self.draft_lookup_num_tokens)
        positive("draft_lookup_extend_ngram", self.draft_lookup_extend_ngram)
        positive("draft_tree_size", self.draft_tree_size, 0)
        positive("draft_tree_depth", self.draft_tree_depth)
        positive("draft_tree_top_k", self.draft_tree_top_k)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def resolve(cls, drafter_generation_config, overrides: dict | None = None) -> "DraftSettings":
        """The drafter's defaults (its `generation_config`), overridden by the caller's explicit values."""
        values = {}
        for name in cls.names():
            value = getattr(drafter_generation_config, name, None) if drafter_generation_config is not None else None
            if value is not None:
                values[name] = value
        values.update({k: v for k, v in (overrides or {}).items() if v is not None})
        if isinstance(values.get("assistant_confidence_threshold"), int):
            values["assistant_confidence_threshold"] = float(values["assistant_confidence_threshold"])
        return cls(**values)


# Settings that are not GenerationConfig fields: `generate()` would reject them as unused model kwargs, so the hook
# takes them out of the kwargs first.
CUSTOM_SETTINGS = tuple(name for name in DraftSettings.names() if name.startswith("draft_"))


def draft_generation_config(config):
    """The default `generation_config` of a drafter whose folder has none (checkpoints written before it held the
    decoding defaults): k and the threshold from the config's `num_speculative_tokens` / `draft_confidence_threshold`.
    """
    from transformers import GenerationConfig

    threshold = getattr(config, "draft_confidence_threshold", None)
    return GenerationConfig(
        num_assistant_tokens=int(
            getattr(config, "num_speculative_tokens", None) or DraftSettings.num_assistant_tokens
        ),
        assistant_confidence_threshold=float(threshold or 0.0),
    )


# ----------------------------------------------------------------------------------------------------------------
# Statistics
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class SlimSpecGenerationStats:
    """Acceptance statistics of the last `generate()` call (filled in by the candidate generator).

    With hybrid drafting (`draft_lookup=True`) the rounds are also counted by source: `"drafter"` or `"lookup"`.
    """

    rounds: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    drafted_per_position: list[int] = field(default_factory=list)
    rounds_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)

    @property
    def acceptance_length(self) -> float:
        """τ: tokens produced per target verification (accepted drafts + the target's own token)."""
        return (self.accepted_tokens + self.rounds) / self.rounds if self.rounds else float("nan")

    @property
    def per_position_acceptance(self) -> list[float]:
        """Fraction of rounds in which the i-th drafted token was accepted, among rounds that drafted it."""
        return [a / d if d else float("nan") for a, d in zip(self.accepted_per_position, self.drafted_per_position)]

    @property
    def acceptance_length_by_source(self) -> dict[str, float]:
        """τ of the rounds drafted by each source."""
        return {
            source: (self.accepted_by_source.get(source, 0) + rounds) / rounds
            for source, rounds in self.rounds_by_source.items()
            if rounds
        }

    def record(self, source: str, drafted: int, accepted: int, positions: int | None = None) -> None:
        """Counts one verified round: `drafted` tokens verified, `accepted` of them kept, over `positions` draft
        positions (default `drafted`, a chain; a tree's depth)."""
        positions = drafted if positions is None else positions
        self.rounds += 1
        self.drafted_tokens += drafted
        self.accepted_tokens += accepted
        self.rounds_by_source[source] = self.rounds_by_source.get(source, 0) + 1
        self.accepted_by_source[source] = self.accepted_by_source.get(source, 0) + accepted
        while len(self.drafted_per_position) < positions:
            self.drafted_per_position.append(0)
            self.accepted_per_position.append(0)
        for i in range(positions):
            self.drafted_per_position[i] += 1
            self.accepted_per_position[i] += int(i < accepted)

    def as_dict(self) -> dict:
        return {
            "rounds": self.rounds,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_length": self.acceptance_length,
            "per_position_acceptance": self.per_position_acceptance,
            "rounds_by_source": dict(self.rounds_by_source),
            "acceptance_length_by_source": self.acceptance_length_by_source,
        }


# ----------------------------------------------------------------------------------------------------------------
# Prompt lookup (the n-gram half of hybrid drafting)
# ----------------------------------------------------------------------------------------------------------------


def lookup_continuation(tokens: torch.Tensor, max_ngram: int, num_tokens: int) -> tuple[torch.Tensor, int] | None:
    """What followed the latest n-gram of `tokens` (1-D) where it occurred before, and n; None without a match.

    Tries n = max_ngram down to 1 and returns, for the first n with a match, up to `num_tokens` tokens that followed
    its most recent earlier occurrence.
    """
    length = tokens.shape[0]
    for n in range(min(max_ngram, length - 1), 0, -1):
        windows = tokens[: length - 1].unfold(0, n, 1)  # (length - n, n): every n-gram that has a successor
        hits = (windows == tokens[length - n :]).all(dim=-1).nonzero()
        if hits.numel():
            start = int(hits[-1]) + n
            return tokens[start : start + num_tokens], n
    return None


# ----------------------------------------------------------------------------------------------------------------
# The chain candidate generator
# ----------------------------------------------------------------------------------------------------------------


class SlimSpecCandidateGenerator(CandidateGenerator):
    """Drafts a chain of up to k tokens per round from the target's hidden states of the positions it accepted.

    Round 1 returns no candidates so that the target prefills the prompt. Every later round stores the target
    features of the newly accepted positions. A drafter round appends all stored positions to the drafter's cache,
    dropping the positions the drafter computed from its own states in its previous round, then drafts
    autoregressively, feeding back its own states. With `draft_lookup`, a round whose latest tokens occurred before
    drafts their earlier continuation instead (no drafter call: the stored features wait for the next drafter round,
    so the drafter's cache stays exactly what it would have been).
    """

    requires_model_outputs = True

    def __init__(
        self,
        drafter: "SlimSpecDrafterForCausalLM",
        target: PreTrainedModel,
        generation_config,
        logits_processor=None,
        settings: DraftSettings | None = None,
        validate: bool = True,
    ):
        from .modeling_slimspec import SlimSpecDrafterCache  # lazy: modeling_slimspec imports this module

        if validate:  # generate() validated the pairing already (see install_generation_hook)
            validate_pairing(drafter, target)
        self.drafter = drafter.attach_target(target)
        self.settings = settings if settings is not None else DraftSettings.resolve(drafter.generation_config)
        self.layer_ids = list(drafter.config.target_layer_ids)
        # Ask the target for just the three layers, unless the caller wants all hidden states returned anyway
        # (the indices then still point into the full tuple).
        wants_all = bool(getattr(generation_config, "output_hidden_states", False))
        self.model_kwargs_overrides = {"output_hidden_states": True if wants_all else self.layer_ids}
        self.max_length = generation_config.max_length
        self.do_sample = bool(generation_config.do_sample)
        self.logits_processor = logits_processor if logits_processor is not None and len(logits_processor) else None
        eos = getattr(generation_config, "_eos_token_tensor", None)
        self.eos_token_ids = set(eos.flatten().tolist()) if eos is not None else set()
        self.cache = SlimSpecDrafterCache()
        self.committed = 0  # positions whose target features are known (in the drafter's cache or pending)
        self.cached = 0  # of those, the positions already in the drafter's cache
        self.pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # (features, tokens) not yet in the cache
        self.stats = SlimSpecGenerationStats()
        drafter.last_generation_stats = self.stats
        self._round = ("drafter", 0)  # (source, tokens drafted) of the round being verified

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
        self._round = ("drafter", 0)
        if is_first_iteration:
            return input_ids, None  # let the target prefill; its hidden states arrive next round
        if model_outputs is None or getattr(model_outputs, "hidden_states", None) is None:
            raise ValueError("The target's outputs carry no `hidden_states`; SlimSpec drafting needs them.")
        drafter = self.drafter
        seq_len = input_ids.shape[1]
        # The target's last forward covered positions [committed, ...); the accepted ones are the first n_new.
        n_new = seq_len - 1 - self.committed
        features = torch.cat(
            [model_outputs.hidden_states[i][:, :n_new] for i in self.layer_ids], dim=-1
        )  # (1, n_new, 3·d_t)
        tokens = input_ids[:, self.committed + 1 :]  # x_{t+1} for each new t, (1, n_new)
        self.pending.append((features, tokens))
        self.committed += n_new

        budget = self.max_length - seq_len - 1
        if budget <= 0:
            return input_ids, None
        settings = self.settings
        found = None
        if settings.draft_lookup:
            found = lookup_continuation(
                input_ids[0], settings.draft_lookup_max_ngram, min(settings.draft_lookup_num_tokens, budget)
            )
            if found is not None and found[1] >= settings.draft_lookup_min_ngram:
                return self._lookup_round(input_ids, found[0])  # a long match: no drafter call this round

        mask_2d = model_kwargs.get("attention_mask") if model_kwargs else None
        attention_mask = None
        if mask_2d is not None and not bool(mask_2d.all()):
            attention_mask = mask_2d[:, : seq_len - 1].to(drafter.device)
        positions = self._positions(mask_2d, self.cached, self.committed - self.cached, drafter.device)
        features = torch.cat([f for f, _ in self.pending], dim=1).to(device=drafter.device, dtype=drafter.dtype)
        tokens = torch.cat([t for _, t in self.pending], dim=1).to(drafter.device)
        self.pending.clear()
        self.cache.crop(self.cached)
        out = drafter(
            input_ids=tokens,
            target_features=features,
            position_ids=positions,
            attention_mask=attention_mask,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.cached = self.committed
        if found is not None and int(out.logits[0, -1].argmax()) == int(found[0][0]):
            return self._lookup_round(input_ids, found[0])  # a short match the drafter agrees with

        budget = min(settings.num_assistant_tokens, budget)
        threshold = settings.assistant_confidence_threshold
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
            if threshold > 0:  # unsure of this token: verify what we have
                probs = probs if probs is not None else torch.softmax(logits, dim=-1)
                if float(probs[0, token[0, 0]]) < threshold:
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
        self._round = ("drafter", len(all_logits))
        candidate_logits = torch.stack(all_logits, dim=1)  # (1, k, V)
        room = self.max_length - candidate_ids.shape[1] - 1
        if settings.draft_lookup and room > 0 and int(candidate_ids[0, -1]) not in self.eos_token_ids:
            # Verifying a few more tokens costs little: extend the chain with what followed its end earlier.
            found = lookup_continuation(
                candidate_ids[0], settings.draft_lookup_max_ngram, min(settings.draft_lookup_num_tokens, room)
            )
            if found is not None and found[1] >= settings.draft_lookup_extend_ngram:
                extension = found[0].to(candidate_ids.device)
                # a deterministic draft: q = 1 on the drafted token (lossless in speculative sampling too)
                one_hot = torch.full(
                    (1, extension.numel(), candidate_logits.shape[-1]), float("-inf"), device=candidate_logits.device
                )
                one_hot[0, torch.arange(extension.numel()), extension.to(one_hot.device)] = 0.0
                candidate_ids = torch.cat([candidate_ids, extension[None]], dim=-1)
                candidate_logits = torch.cat([candidate_logits, one_hot], dim=1)
                self._round = ("drafter+lookup", candidate_logits.shape[1])
        return candidate_ids, candidate_logits

    def _lookup_round(self, input_ids: torch.LongTensor, continuation: torch.Tensor):
        """Drafts `continuation`; the target verifies it by matching (a deterministic draft, lossless also when
        sampling: a token is kept with the target's probability of it)."""
        self._round = ("lookup", continuation.numel())
        return torch.cat([input_ids, continuation[None].to(input_ids.device)], dim=-1), None

    @staticmethod
    def _positions(mask_2d, start: int, length: int, device) -> torch.LongTensor:
        if mask_2d is None:
            return torch.arange(start, start + length, device=device)[None]
        positions = (mask_2d.long().cumsum(-1) - 1).clamp(min=0)
        return positions[:, start : start + length].to(device)

    def update_candidate_strategy(self, input_ids: torch.LongTensor, scores: torch.Tensor, num_matches: int):
        if self.committed == 0:
            return  # the prefill round: nothing was drafted, nothing verified
        source, drafted = self._round
        self.stats.record(source, drafted, int(num_matches))


def check_drafter_placement(target, drafter) -> None:
    """Raises one clear `ValueError` when `drafter` does not sit on `target`'s device.

    The target's features are moved to the drafter and cast to its dtype, so a dtype mismatch only costs precision;
    a device mismatch would copy every round's features and candidates between devices (or fail inside a kernel),
    so it is refused with both devices and the fix named."""
    target_device = next(target.parameters()).device
    drafter_device = next(drafter.parameters()).device
    if target_device != drafter_device:
        raise ValueError(
            f"The drafter is on {drafter_device} but the target is on {target_device}: the SlimSpec drafter must "
            f"run where its target runs. Move it with `drafter.to(target.device)` (or load it with "
            f'`device_map="{target_device}"`), then call `target.generate(..., assistant_model=drafter)` again.'
        )


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
    # The structure decides, not the name: the same target loaded from a local folder or a cache path is the same
    # target. Vocabulary and width are checked above; a different depth means another model of the family.
    trained_layers = getattr(cfg, "target_num_hidden_layers", None)
    if trained_layers is not None and trained_layers != tcfg.num_hidden_layers:
        import sys

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


def _short_name(name: str) -> str:
    return str(name).rstrip("/").split("/")[-1].lower()


def _is_slimspec_drafter(model) -> bool:
    return getattr(getattr(model, "config", None), "model_type", None) == SlimSpecDrafterConfig.model_type


_HOOK_VERSION = 4  # 1: candidate generator + k; 2: + threshold; 3: DraftSettings overrides; 4: + tree decoding
_HOOKED = ("_get_candidate_generator", "_prepare_generation_config", "_validate_generation_mode", "_assisted_decoding")


def _unwrap_slimspec(function):
    """`function` without the wrappers any version of `install_generation_hook` put around it."""
    while hasattr(function, "__wrapped__") and "install_generation_hook" in getattr(function, "__qualname__", ""):
        function = function.__wrapped__
    return function


def install_generation_hook() -> None:
    """Routes `generate(assistant_model=<SlimSpec drafter>)` to SlimSpec decoding.

    transformers has no public registry for candidate generators, so three `GenerationMixin` methods are wrapped
    once: idempotent, also across copies of this module loaded as remote code. The wrappers carry `_HOOK_VERSION`;
    a newer copy replaces the wrappers of an older one (so an old remote-code drafter loaded first cannot pin old
    behaviour). Other assistants keep transformers' own generators.

    - `_prepare_generation_config` takes the SlimSpec settings the caller passed (`num_assistant_tokens`,
      `assistant_confidence_threshold`, and the `draft_*` keywords, which transformers would reject as unused model
      kwargs) and records them as the call's `generation_config.slimspec_overrides`; the drafter's own
      `generation_config` supplies the rest (see `DraftSettings`).
    - `_validate_generation_mode` checks the drafter/target pairing before transformers' own assistant checks.
    - `_get_candidate_generator` returns the SlimSpec generator, built by the drafter's own class.
    - `_assisted_decoding` hands the call to `tree_slimspec.tree_decoding` when the resolved `draft_tree_size` > 0
      (a dynamic draft tree verified in one target forward); chains stay with transformers' loop. When sampling
      with `draft_lookup`, a tree from the drafter's defaults gives way to the hybrid chain (trees carry the lookup
      draft in greedy decoding only); a `draft_tree_size` passed to `generate()` is kept.
    """
    if int(getattr(GenerationMixin._get_candidate_generator, "_slimspec_hook", 0)) >= _HOOK_VERSION:
        return
    for name in _HOOKED:
        setattr(GenerationMixin, name, _unwrap_slimspec(getattr(GenerationMixin, name)))
    original_get = GenerationMixin._get_candidate_generator
    original_prepare = GenerationMixin._prepare_generation_config
    original_validate = GenerationMixin._validate_generation_mode
    original_assisted = GenerationMixin._assisted_decoding

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
        return original_get(
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

    def _prepare_generation_config(self, generation_config=None, **kwargs):
        custom = {name: kwargs.pop(name) for name in CUSTOM_SETTINGS if name in kwargs}
        config, model_kwargs = original_prepare(self, generation_config, **kwargs)
        # What the caller set for this call: a passed GenerationConfig, then keywords. transformers fills unset
        # values with its global defaults (k = 20, threshold 0.4, meant for its own assistants), which must not
        # override the drafter's.
        overrides = {}
        for name in DraftSettings.names():
            if generation_config is not None and getattr(generation_config, name, None) is not None:
                overrides[name] = getattr(generation_config, name)
            if name in kwargs:
                overrides[name] = kwargs[name]
        overrides.update(custom)
        config.slimspec_overrides = overrides
        return config, model_kwargs

    def _validate_generation_mode(self, generation_mode, generation_config, generation_mode_kwargs):
        assistant = generation_mode_kwargs.get("assistant_model")
        if assistant is not None and _is_slimspec_drafter(assistant):
            validate_pairing(assistant, self)
            check_drafter_placement(self, assistant)
        else:
            unused = sorted(set(getattr(generation_config, "slimspec_overrides", {})) & set(CUSTOM_SETTINGS))
            if unused:
                raise ValueError(
                    f"{unused} are settings of SlimSpec drafters, but `assistant_model` is "
                    f"{type(assistant).__name__ if assistant is not None else None}; pass "
                    "`assistant_model=<SlimSpec drafter>` or drop them."
                )
        return original_validate(self, generation_mode, generation_config, generation_mode_kwargs)

    def _assisted_decoding(self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs):
        assistant = kwargs.get("assistant_model")
        if assistant is not None and _is_slimspec_drafter(assistant):
            overrides = getattr(generation_config, "slimspec_overrides", {})
            settings = DraftSettings.resolve(assistant.generation_config, overrides)
            # When sampling, a tree cannot carry the lookup draft (multi-draft sampling needs i.i.d. draws); a tree
            # that comes from the drafter's defaults then gives way to the hybrid chain, which can. A tree asked for
            # in the call is kept (without lookup, with a warning).
            sampled_default_tree = (
                generation_config.do_sample and settings.draft_lookup and "draft_tree_size" not in overrides
            )
            if settings.draft_tree_size > 0 and not sampled_default_tree:
                from .tree_slimspec import tree_decoding  # lazy: tree_slimspec imports this module

                return tree_decoding(
                    self,
                    input_ids,
                    logits_processor,
                    stopping_criteria,
                    generation_config,
                    *args,
                    tree_size=settings.draft_tree_size,
                    tree_depth=settings.draft_tree_depth,
                    tree_top_k=settings.draft_tree_top_k,
                    lookup=(
                        (
                            settings.draft_lookup_min_ngram,
                            settings.draft_lookup_max_ngram,
                            settings.draft_lookup_num_tokens,
                        )
                        if settings.draft_lookup
                        else None
                    ),
                    **kwargs,
                )
        return original_assisted(
            self, input_ids, logits_processor, stopping_criteria, generation_config, *args, **kwargs
        )

    for wrapper, original in (
        (_get_candidate_generator, original_get),
        (_prepare_generation_config, original_prepare),
        (_validate_generation_mode, original_validate),
        (_assisted_decoding, original_assisted),
    ):
        wrapper.__wrapped__ = original
        wrapper._slimspec_hook = _HOOK_VERSION
        setattr(GenerationMixin, wrapper.__name__, wrapper)


__all__ = [
    "check_drafter_placement",
    "DraftSettings",
    "draft_generation_config",
    "lookup_continuation",
    "SlimSpecGenerationStats",
    "SlimSpecCandidateGenerator",
    "validate_pairing",
    "install_generation_hook",
]
