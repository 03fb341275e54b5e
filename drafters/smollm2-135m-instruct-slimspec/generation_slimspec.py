# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""SlimSpec decoding settings, acceptance statistics, pairing checks, and the seam into transformers: the one
wrapper that routes `target.generate(**inputs, assistant_model=drafter)` to the drafter's own decoding.

Part of the remote-code unit with `configuration_slimspec.py` and `modeling_slimspec.py`: it imports only `torch`,
`transformers` and those siblings (relatively), so `save_pretrained` copies it next to the weights and
`trust_remote_code=True` users get every decoding mode without this package. The drafter installs the wrapper when
it is built or loaded (`SlimSpecDrafterPreTrainedModel.__init__`); importing a module patches nothing.
"""

import functools
import inspect
import threading
import weakref
from dataclasses import dataclass, field, fields

from transformers import GenerationMixin
from transformers.cache_utils import DynamicCache
from transformers.generation.utils import GenerateDecoderOnlyOutput

from .configuration_slimspec import validate_pairing
from .drafting_slimspec import LogitsProcessing, is_row_wise
from .verification_slimspec import TREE_ATTENTION, layer_windows


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
        draft_lookup_branch_ngram: with `draft_lookup` and a tree-capable target, a match of at least this many
            tokens that the drafter does not agree with is still verified, as a branch of its own beside the
            drafter's draft, in the same forward: the target picks per round which continuation holds. 0: never.
        draft_tree_size: > 0 drafts a dynamic tree of this many nodes (EAGLE-2 style) instead of a chain.
        draft_tree_depth / draft_tree_top_k: the tree's depth and children per expanded node.
        draft_sampling: settings (names of this class) that replace the ones above when `do_sample=True`: the
            shapes that pay differ between greedy and sampled decoding.
        draft_batched: settings that replace the ones above (and `draft_sampling`'s) when `generate()` gets more
            than one prompt: one forward verifies every row, padded to the widest row's draft, and a batch already
            uses the compute that makes verifying many tokens nearly free for one prompt.
        draft_max_batch_size: batches of more prompts than this decode without the drafter (plain batched
            `generate()`); 0 sets no limit. Where a batch already keeps the hardware busy, verifying more tokens
            per row costs more than the drafter's accepted tokens save.
    """

    num_assistant_tokens: int = 6
    assistant_confidence_threshold: float = 0.0
    draft_lookup: bool = False
    draft_lookup_min_ngram: int = 2
    draft_lookup_max_ngram: int = 8
    draft_lookup_num_tokens: int = 10
    draft_lookup_extend_ngram: int = 2
    draft_lookup_branch_ngram: int = 0
    draft_tree_size: int = 0
    draft_tree_depth: int = 4
    draft_tree_top_k: int = 4
    draft_sampling: dict = field(default_factory=dict)
    draft_batched: dict = field(default_factory=dict)
    draft_max_batch_size: int = 0

    VARIANTS = ("draft_sampling", "draft_batched")  # settings that replace others in some calls

    # the least value of each integer setting
    MINIMA = {
        "draft_tree_size": 0,
        "draft_max_batch_size": 0,
        "draft_lookup_branch_ngram": 0,
        "draft_lookup_max_ngram": "draft_lookup_min_ngram",
    }

    def __post_init__(self):
        for name in self.names():
            value = getattr(self, name)
            if name in self.VARIANTS:
                self.check_variant(name, value)
            elif name == "assistant_confidence_threshold":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                    raise ValueError(f"`{name}` must be a probability in [0, 1], got {value!r} (0 never stops early).")
            elif name == "draft_lookup":
                if not isinstance(value, bool):
                    raise ValueError(f"`{name}` must be True or False, got {value!r}.")
            else:
                least = self.MINIMA.get(name, 1)
                least = getattr(self, least) if isinstance(least, str) else least
                if isinstance(value, bool) or not isinstance(value, int) or value < least:
                    raise ValueError(f"`{name}` must be an integer >= {least}, got {value!r}.")

    @classmethod
    def check_variant(cls, variant: str, settings) -> None:
        """`draft_sampling` / `draft_batched` hold decoding settings (and no variant)."""
        valid = [name for name in cls.names() if name not in cls.VARIANTS]
        if not isinstance(settings, dict):
            raise ValueError(f"`{variant}` must be a dict of decoding settings, got {settings!r}.")
        unknown = sorted(set(settings) - set(valid))
        if unknown:
            raise ValueError(f"`{variant}` holds {unknown}, which are not decoding settings; valid: {valid}.")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def resolve(
        cls, drafter_generation_config, overrides: dict | None = None, do_sample: bool = False, batched: bool = False
    ) -> "DraftSettings":
        """The drafter's defaults (its `generation_config`), then its `draft_sampling` defaults when sampling and its
        `draft_batched` defaults for more than one prompt, then the caller's explicit values (and the caller's
        `draft_sampling` / `draft_batched` where they apply)."""
        config = drafter_generation_config
        values = {name: getattr(config, name, None) for name in cls.names()} if config is not None else {}
        values = {name: value for name, value in values.items() if value is not None}
        overrides = {name: value for name, value in (overrides or {}).items() if value is not None}
        applying = [name for name, on in zip(cls.VARIANTS, (do_sample, batched)) if on]
        for source in (values, overrides):
            for name in cls.VARIANTS:
                cls.check_variant(name, source.get(name) or {})
        for name in applying:
            values.update(values.get(name) or {})
        values.update(overrides)
        for name in applying:
            values.update(overrides.get(name) or {})
        if isinstance(values.get("assistant_confidence_threshold"), int):
            values["assistant_confidence_threshold"] = float(values["assistant_confidence_threshold"])
        return cls(**values)

    @classmethod
    def explicit(cls, generation_config, kwargs: dict) -> dict:
        """The settings a `generate()` call set: those of a passed `GenerationConfig`, then keywords (taken out of
        `kwargs`). transformers fills unset values with its global defaults (k = 20, threshold 0.4, meant for its
        own assistants), which must not override the drafter's."""
        overrides = {}
        for name in cls.names():
            if generation_config is not None and getattr(generation_config, name, None) is not None:
                overrides[name] = getattr(generation_config, name)
            if name in kwargs:
                overrides[name] = kwargs.pop(name)
        return overrides


# Settings that are not GenerationConfig fields: `generate()` would reject them as unused model kwargs.
CUSTOM_SETTINGS = tuple(name for name in DraftSettings.names() if name.startswith("draft_"))


def draft_generation_config(config):
    """The default `generation_config` of a new drafter, or of one whose folder has none (checkpoints written before
    it held the decoding defaults kept k and the threshold in config.json as `num_speculative_tokens` /
    `draft_confidence_threshold`, which are read here)."""
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
    """Acceptance statistics of one `generate()` call: the output's `slimspec_stats` (`return_dict_in_generate`), and
    the drafter's `last_generation_stats` (the calling thread's last call, see `PerThreadStats`).

    With hybrid drafting (`draft_lookup=True`) the rounds are also counted by source: `"drafter"` or `"lookup"`.
    """

    rounds: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    drafted_per_position: list[int] = field(default_factory=list)
    rounds_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)
    per_row: list["SlimSpecGenerationStats"] = field(default_factory=list)  # batch > 1: each prompt's own

    @classmethod
    def combined(cls, rows: list["SlimSpecGenerationStats"]) -> "SlimSpecGenerationStats":
        """The totals of a batch's rows, which it keeps as `per_row`."""
        total = cls(per_row=list(rows))
        for row in rows:
            total.rounds += row.rounds
            total.drafted_tokens += row.drafted_tokens
            total.accepted_tokens += row.accepted_tokens
            for name in ("accepted_per_position", "drafted_per_position"):
                mine, theirs = getattr(total, name), getattr(row, name)
                mine.extend([0] * (len(theirs) - len(mine)))
                mine[: len(theirs)] = [a + b for a, b in zip(mine, theirs)]
            for name in ("rounds_by_source", "accepted_by_source"):
                mine = getattr(total, name)
                for source, value in getattr(row, name).items():
                    mine[source] = mine.get(source, 0) + value
        return total

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
        for counts in (self.drafted_per_position, self.accepted_per_position):
            counts.extend([0] * (positions - len(counts)))
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
            **({"per_row": [row.as_dict() for row in self.per_row]} if self.per_row else {}),
        }


_CALLS = threading.local()  # per thread: drafter -> the statistics of its last call in that thread (weak keys)


class PerThreadStats:
    """`drafter.last_generation_stats`: the statistics of the last `generate()` call the calling thread made with the
    drafter (one drafter serving several threads tells each thread its own call's); before any: `AttributeError`."""

    def __get__(self, drafter, owner=None):
        stats = self if drafter is None else _CALLS.__dict__.get("stats", {}).get(drafter)
        if stats is None:
            raise AttributeError("`last_generation_stats`: this thread has made no `generate()` call yet")
        return stats

    def __set__(self, drafter, stats: SlimSpecGenerationStats) -> None:
        _CALLS.__dict__.setdefault("stats", weakref.WeakKeyDictionary())[drafter] = stats


@dataclass
class SlimSpecDecoderOnlyOutput(GenerateDecoderOnlyOutput):
    """transformers' `GenerateDecoderOnlyOutput` and the call's own statistics, `slimspec_stats`."""

    slimspec_stats: SlimSpecGenerationStats | None = None


def record_stats(drafter, stats: SlimSpecGenerationStats) -> None:
    """Makes `stats` the calling thread's `drafter.last_generation_stats` (set up on the drafter's class once)."""
    if not isinstance(getattr(type(drafter), "last_generation_stats", None), PerThreadStats):
        type(drafter).last_generation_stats = PerThreadStats()
    drafter.last_generation_stats = stats


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


# what generate() passes a decoding loop besides the inputs (the output_* flags are read from the generation config)
_KNOWN_MODEL_KWARGS = {
    "attention_mask",
    "position_ids",
    "cache",
    "past_key_values",  # the cache's name before transformers 5.24
    "use_cache",
    "logits_to_keep",
    "output_hidden_states",
}


def check_decoding_inputs(
    model, drafter, input_ids, generation_config, logits_processor, streamer, settings, model_kwargs
) -> DynamicCache:
    """Refuses what SlimSpec decoding does not support, with one clear line each; returns the target's cache."""
    attention = getattr(model.config, "_attn_implementation", None)
    batched = f"SlimSpec decoding with batch size {input_ids.shape[0]}"
    if input_ids.shape[0] > 1 and streamer is not None:
        raise ValueError(f"{batched} cannot stream (batch size 1 only); drop the streamer or pass one prompt.")
    windowed = layer_windows(model.config.get_text_config(decoder=True)) is not None
    if input_ids.shape[0] > 1 and windowed and attention not in TREE_ATTENTION:
        raise ValueError(
            f"{batched} passes a sliding-window target 4-D attention masks, which `attn_implementation="
            f'{attention!r}` does not take; load it with `attn_implementation="sdpa"` or pass one prompt at a time.'
        )
    config = generation_config
    if (
        input_ids.shape[0] > 1
        and config.return_dict_in_generate
        and (config.output_scores or config.output_logits or config.output_hidden_states)
    ):
        raise ValueError(
            f"{batched} returns `sequences` only; drop output_scores/output_logits/output_hidden_states or pass one "
            "prompt."
        )
    processing = LogitsProcessing(logits_processor)
    if input_ids.shape[0] > 1 and processing.processors is not None and not processing.row_wise:
        names = sorted({type(p).__name__ for p in processing.processors if not is_row_wise(p)})
        raise ValueError(
            f"{batched} applies logits processors per row; {names} hold per-batch state: pass one prompt."
        )
    if generation_config.num_beams > 1 or generation_config.num_return_sequences > 1:
        raise ValueError(
            f"SlimSpec decoding draws one sequence (greedy or sampled); got num_beams={generation_config.num_beams}, "
            f"num_return_sequences={generation_config.num_return_sequences}. Drop them or the drafter."
        )
    if generation_config.return_dict_in_generate and generation_config.output_attentions:
        raise ValueError(
            "SlimSpec decoding returns `scores`, `logits` and `hidden_states`: `output_attentions` is not supported "
            "(the target's attention rows belong to draft nodes, not to tokens)."
        )
    unknown = sorted(k for k, v in model_kwargs.items() if v is not None and k not in _KNOWN_MODEL_KWARGS)
    if unknown:
        raise ValueError(f"SlimSpec decoding supports text-only decoder inputs; got model kwargs {unknown}.")
    if settings.draft_tree_size > 0 and settings.draft_tree_top_k > 1 and attention not in TREE_ATTENTION:
        raise ValueError(
            f"SlimSpec tree decoding passes the target a 4-D tree attention mask, which `attn_implementation="
            f'{attention!r}` does not take; load the target with `attn_implementation="sdpa"` or `"eager"`, or '
            "draft chains (`draft_tree_size=0`)."
        )
    validate_pairing(drafter, model)
    check_drafter_placement(model, drafter)
    drafter.attach_target(model)
    return target_cache(model_kwargs.get("cache", model_kwargs.get("past_key_values")))


def target_cache(cache) -> DynamicCache:
    """A cache the loop can roll back: a fresh `DynamicCache` with full-attention layers for every layer type.

    transformers' own cache keeps only the window of sliding-window layers, which drops positions a rejected draft
    pushed out of it; full layers keep every position and the masks apply the window instead."""
    if cache is None:
        return DynamicCache()
    if type(cache) is not DynamicCache:
        raise ValueError(
            f"SlimSpec decoding rolls the target's KV cache back to the accepted tokens and needs a `DynamicCache`, "
            f"got {type(cache).__name__}. Drop `cache_implementation`/`cache`."
        )
    if cache.get_seq_length() != 0:
        raise ValueError("SlimSpec decoding starts from an empty cache; a prefilled `cache` is not supported.")
    return DynamicCache()


# ----------------------------------------------------------------------------------------------------------------
# The seam into transformers
# ----------------------------------------------------------------------------------------------------------------

# The parameters of `GenerationMixin.generate` the wrapper reads or passes by name (tests/test_generation.py checks
# that they exist, so a changed signature fails a test instead of misbehaving).
GENERATE_PARAMETERS = ("generation_config", "assistant_model", "streamer", "custom_generate", "kwargs")


def install_generation_hook() -> None:
    """Routes `generate(assistant_model=<SlimSpec drafter>)` to the drafter's own decoding.

    transformers has no registry for assistants (it dispatches its own by hand), so `GenerationMixin.generate` — the
    public method, with a documented signature — is wrapped once. The wrapper binds the call's arguments by name
    and hands a call whose `assistant_model` has a `generate_as_assistant` method (and that names no `custom_generate`
    of its own) to that method, which calls the
    original `generate` back with `custom_generate=` (transformers' public route for decoding loops: it prepares
    the inputs, processors, stopping criteria and cache, then calls the loop). Every other call goes to the
    original untouched. The wrapper holds no decoding logic: each drafter decodes with its own class's code, so a
    drafter loaded as remote code from an older or newer copy of these files decodes as it was written, whichever
    copy installed the wrapper — no version to reconcile.
    """
    original = GenerationMixin.generate
    if getattr(original, "_slimspec_dispatch", False):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def generate(self, *args, **kwargs):
        arguments = signature.bind_partial(self, *args, **kwargs).arguments
        assistant = arguments.get("assistant_model")
        # drafters whose code predates the method's name route through `slimspec_generate`
        route = getattr(assistant, "generate_as_assistant", None) or getattr(assistant, "slimspec_generate", None)
        if route is not None and arguments.get("custom_generate") is None:  # a caller's own loop comes first
            return route(original, arguments)
        if arguments.get("custom_generate") is None:  # a caller's own loop may take SlimSpec settings
            reject_draft_settings(arguments.get("kwargs") or {}, assistant)
        return original(self, *args, **kwargs)

    generate._slimspec_dispatch = True
    GenerationMixin.generate = generate


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


__all__ = [
    "check_decoding_inputs",
    "target_cache",
    "check_drafter_placement",
    "CUSTOM_SETTINGS",
    "DraftSettings",
    "draft_generation_config",
    "GENERATE_PARAMETERS",
    "PerThreadStats",
    "record_stats",
    "SlimSpecDecoderOnlyOutput",
    "SlimSpecGenerationStats",
    "install_generation_hook",
]
