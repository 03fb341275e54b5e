# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`SlimSpecConfig`: the training arguments of [`SlimSpecTrainer`], in trl's idiom."""

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from transformers import TrainingArguments

from ..configuration_slimspec import HEAD_TYPES
from .losses import LOSS_TYPES, Objective


# The head initialisations (`slimspec convert` offers those that need no training data).
HEAD_INITS = ("random", "svd", "activation_svd")
LAYER_INITS = ("auto", "target_last_layer", "random")
FEATURE_MODES = ("online", "offline")
TARGET_DTYPES = ("auto", "float32", "bfloat16", "float16")


class _CardMetadata(dict):
    """Field metadata of a setting the model card lists in its recipe table: `metadata.get("card")` is True, while
    the mark stays out of the copies (`dict(metadata)` in `HfArgumentParser`, `metadata.copy()` in `TrlParser`)
    that become `add_argument` kwargs."""

    def keys(self):
        return [key for key in super().keys() if key != "card"]

    def copy(self) -> dict:
        return {key: self[key] for key in self.keys()}


def _card(**metadata) -> dict:
    return _CardMetadata(metadata, card=True)


def _inherited_card_field(name: str):
    """A `TrainingArguments` field, same default and help, marked for the model card."""
    parent = TrainingArguments.__dataclass_fields__[name]
    return field(default=parent.default, metadata=_card(**parent.metadata))


@dataclass
class SlimSpecConfig(TrainingArguments):
    r"""
    Configuration of [`SlimSpecTrainer`]: distilling a frozen target into an EAGLE-3 drafter with a SlimSpec head.

    Only the parameters specific to SlimSpec are listed here; see [`~transformers.TrainingArguments`] for the rest.
    Defaults that differ from `TrainingArguments`: `learning_rate=4e-4`, `max_grad_norm=0.5`,
    `lr_scheduler_type="cosine"`, `logging_steps=10`, `remove_unused_columns=False`.
    """

    _VALID_DICT_FIELDS = TrainingArguments._VALID_DICT_FIELDS + ["target_model_init_kwargs"]

    # Parameters whose default values are overridden from TrainingArguments
    learning_rate: float = field(default=4e-4, metadata=_card(help="The initial learning rate for AdamW."))
    max_grad_norm: float = field(default=0.5, metadata=_card(help="Maximum gradient norm (for gradient clipping)."))
    lr_scheduler_type: str = field(default="cosine", metadata=_card(help="The scheduler type to use."))
    logging_steps: float = field(
        default=10,
        metadata={"help": "Log every X updates steps. Should be an integer or a float in range `[0,1)`."},
    )
    # Parameters of TrainingArguments redeclared unchanged, only to mark them for the model card
    weight_decay: float = _inherited_card_field("weight_decay")
    num_train_epochs: float = _inherited_card_field("num_train_epochs")
    max_steps: int = _inherited_card_field("max_steps")
    per_device_train_batch_size: int = _inherited_card_field("per_device_train_batch_size")
    gradient_accumulation_steps: int = _inherited_card_field("gradient_accumulation_steps")
    bf16: bool = _inherited_card_field("bf16")
    seed: int = _inherited_card_field("seed")
    remove_unused_columns: bool = field(
        default=False,
        metadata={"help": "Kept False: the collator needs `loss_mask` and `feature_key`, which `forward` lacks."},
    )

    # Target
    target_model: str | None = field(
        default=None,
        metadata=_card(
            help="Target model: Hub id, local folder, `.gguf` file, or `embedded` (SmolLM2-135M-Instruct, the "
            "default when unset)."
        ),
    )
    target_dtype: Literal[TARGET_DTYPES] = field(
        default="float32",
        metadata={
            "help": "Dtype of the frozen target (its logits are the training signal): `float32` by default; `auto` "
            "is bf16 where the device computes it natively, else fp32 (`slimspec_hf.targets.resolve_dtype`).",
            "choices": list(TARGET_DTYPES),
        },
    )
    target_model_init_kwargs: dict | str | None = field(
        default=None,
        metadata={"help": "Extra keyword arguments for `AutoModelForCausalLM.from_pretrained` of the target."},
    )

    # Data
    dataset_path: str | None = field(
        default=None,
        metadata={
            "help": "Training data: a `slimspec prepare-data` output folder, a `.jsonl`/`.json` file or a "
            "`datasets.save_to_disk` folder, with `messages` or pre-tokenised `input_ids` (+ `loss_mask`); several "
            "prepare-data folders or .jsonl files separated by commas are read as one (each conversation id once)."
        },
    )
    eval_dataset_path: str | None = field(default=None, metadata={"help": "Optional evaluation data, same format."})
    max_samples: int | None = field(
        default=None, metadata={"help": "Use only N training examples, drawn at random with `data_seed` (or `seed`)."}
    )
    max_length: int | None = field(
        default=2048, metadata=_card(help="Truncate tokenised conversations to this many tokens (None: no limit).")
    )
    dataset_num_proc: int | None = field(default=None, metadata={"help": "Processes for tokenising the dataset."})

    # Drafter
    drafter_model: str | None = field(
        default=None, metadata=_card(help="Start from this SlimSpec drafter (folder or Hub id) instead of a new one.")
    )
    head_type: Literal[HEAD_TYPES] = field(
        default="low_rank",
        metadata=_card(
            help="LM head of the drafter: `low_rank` (SlimSpec), `full`, `trimmed` (VocabTrim baseline) or "
            "`target` (the target's frozen head).",
            choices=list(HEAD_TYPES),
        ),
    )
    head_rank: int | None = field(
        default=None, metadata=_card(help="Rank r of the low-rank head (default hidden_size // 8).")
    )
    draft_vocab_size: int | None = field(
        default=None,
        metadata=_card(help="Kept tokens K of the `trimmed` head (the K most frequent tokens of the training data)."),
    )
    head_init: Literal[HEAD_INITS] = field(
        default="random",
        metadata=_card(
            help="Initialisation of the head: `random`; `svd` (truncated SVD of the target's LM head, or a copy "
            "of it / of its rows for `full` / `trimmed`); `activation_svd` (the rank-r factorisation optimal for "
            "the target's own final hidden states: SVD of W·C^½ mapped back by C^-½, C their second moment).",
            choices=list(HEAD_INITS),
        ),
    )
    head_init_num_tokens: int = field(
        default=8192,
        metadata={"help": "Assistant positions whose final hidden states estimate C for `activation_svd`."},
    )
    layer_init: Literal[LAYER_INITS] = field(
        default="auto",
        metadata=_card(
            help="Initialisation of a new drafter's decoder layer: `target_last_layer` (the target's last decoder "
            "layer: the hidden-state half of q/k/v from its projections, the embedding half zero; o_proj, MLP and "
            "norms copied; `fc` passes the deepest fused target layer through; the final norm is the target's), "
            "`random`, or `auto` (default): `target_last_layer` where the target's last layer is a dense Llama-style "
            "layer of the drafter's shapes, else `random`. Measured on SmolLM2 (30 steps from scratch): held-out "
            "top-1 0.173 vs 0.156 for `random`.",
            choices=list(LAYER_INITS),
        ),
    )
    target_layer_ids: list[int] | None = field(
        default=None,
        metadata=_card(
            help="Three indices into the target's `outputs.hidden_states` (0 = embeddings); default "
            "[2, L // 2, L - 3]."
        ),
    )
    fc_norm: bool = field(
        default=False,
        metadata=_card(help="EAGLE-3.1: a new drafter norms each target layer's state before `fc` (RMSNorm each)."),
    )
    norm_before_fc: bool = field(
        default=False,
        metadata=_card(help="EAGLE-3.1 variant: one RMSNorm over the concatenated target states before `fc`."),
    )
    norm_output: bool = field(
        default=False,
        metadata=_card(help="EAGLE-3.1: a new drafter feeds its post-norm state back to the next drafting step."),
    )

    freeze_backbone: bool = field(
        default=False,
        metadata={
            "help": "Train only the LM head (e.g. to recover acceptance after `slimspec convert` factored an "
            "existing EAGLE-3 drafter's head); the backbone stays as loaded."
        },
    )

    num_assistant_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Tokens the saved drafter drafts per round by default (its generation_config's "
            "`num_assistant_tokens`); "
            "None keeps the drafter's. Independent of `ttt_steps`, the unroll depth of training."
        },
    )

    # Training-time test
    ttt_steps: int = field(default=6, metadata=_card(help="Unrolled drafting steps per position (EAGLE-3's TTT)."))
    step_loss_decay: float = field(default=0.8, metadata=_card(help="Weight `decay**k` of the loss of step k."))
    distill_top_k: int = field(
        default=0,
        metadata=_card(
            help="HASS's top-k distillation: with k > 0, `distill_top_k_weight · (−Σ_{j ∈ top-k(p)} p_j log q_j)` "
            "is added to the KL of every position and step (0: the full-vocabulary KL alone)."
        ),
    )
    distill_top_k_weight: float = field(
        default=1.0, metadata=_card(help="Weight of the top-k term (`distill_top_k` > 0).")
    )
    loss_type: Literal[LOSS_TYPES] = field(
        default="kl",
        metadata=_card(
            help="What each position and step minimises: `kl`, the forward KL over the full vocabulary; or an LK "
            "loss, trained on the acceptance rate α = Σ min(p, q) itself: `lk_alpha` (−log α), `lk_lambda` "
            "(λ·KL + (1 − λ)·(1 − α), λ = exp(−`lk_eta`·α)), `lk_greedy` (−log q of the target's top-1).",
            choices=list(LOSS_TYPES),
        ),
    )
    lk_kl_weight: float = field(
        default=0.0,
        metadata=_card(help="With an LK `loss_type`: the weight w of the KL in (1 − w)·LK + w·KL, in [0, 1]."),
    )
    lk_eta: float = field(default=3.0, metadata=_card(help="`lk_lambda`: the rate η of λ = exp(−η·α), > 0."))
    kl_chunk_size: int = field(
        default=256,
        metadata={"help": "Positions whose full-vocabulary logits are held at once when computing the KL."},
    )
    features: Literal[FEATURE_MODES] = field(
        default="online",
        metadata=_card(
            help="`online`: the frozen target runs on every batch; `offline`: its features are computed once, "
            "cached to disk in bf16 and reused.",
            choices=list(FEATURE_MODES),
        ),
    )
    feature_cache_dir: str | None = field(
        default=None,
        metadata={"help": "Where `offline` features live (default `$SLIMSPEC_CACHE/features`, shared across runs)."},
    )

    # Runtime
    cpu_threads: int | None = field(
        default=None,
        metadata={
            "help": "`torch.set_num_threads` for this process (on a shared CPU, 1 per process avoids the OpenMP "
            "spin-wait slowdowns of oversubscription)."
        },
    )
    cpu_reuse_memory: bool = field(
        default=True,
        metadata={
            "help": "On a CPU with glibc, keep freed memory in the process for reuse (no `mmap` per large tensor): "
            "the loss's (rows, vocabulary) tensors are otherwise mapped and page-faulted afresh at each allocation "
            "(Gemma-3-270M, bf16, 1 thread: 2.0x the tokens/s). The process keeps its peak memory until it ends."
        },
    )
    max_train_seconds: float | None = field(
        default=None,
        metadata={
            "help": "Wall-clock budget of the training loop in seconds (from its first step; loading, tokenising and "
            "feature caching come before): the step that would end past it is not begun, and the run ends as at "
            "`max_steps` (logged, saved). None: no limit."
        },
    )

    continual_dir: str | None = field(
        default=None,
        metadata={
            "help": "A run folder to continue and to write back (bf16 weights and `continual_state.json`, small "
            "enough to commit): training starts from its weights at its place in the data order and rewrites it at "
            "each checkpoint and at the end. Empty or missing: the run starts from `drafter_model`. The optimiser "
            "state is not kept, so use a short warm-up and a constant learning rate."
        },
    )

    # Output
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Allow training into an `output_dir` that already holds another run (its files are kept)."},
    )

    def __post_init__(self):
        super().__post_init__()
        if self.ttt_steps < 1:
            raise ValueError(f"`ttt_steps` ({self.ttt_steps}) must be at least 1.")
        if not 0.0 < self.step_loss_decay <= 1.0:
            raise ValueError(f"`step_loss_decay` ({self.step_loss_decay}) must lie in (0, 1].")
        if self.kl_chunk_size < 1:
            raise ValueError(f"`kl_chunk_size` ({self.kl_chunk_size}) must be a positive number of positions.")
        if self.head_type not in HEAD_TYPES:
            raise ValueError(f"`head_type` must be one of {list(HEAD_TYPES)}, got {self.head_type!r}.")
        if self.layer_init not in LAYER_INITS:
            raise ValueError(f"`layer_init` must be one of {list(LAYER_INITS)}, got {self.layer_init!r}.")
        if self.distill_top_k < 0 or self.distill_top_k_weight < 0:
            raise ValueError(
                f"`distill_top_k` ({self.distill_top_k}) and `distill_top_k_weight` ({self.distill_top_k_weight}) "
                "must be ≥ 0."
            )
        Objective(self.loss_type, self.lk_kl_weight, self.lk_eta)  # one line naming the field and the choices
        if self.head_init not in HEAD_INITS:
            raise ValueError(f"`head_init` must be one of {list(HEAD_INITS)}, got {self.head_init!r}.")
        if self.target_dtype not in TARGET_DTYPES:
            raise ValueError(f"`target_dtype` must be one of {list(TARGET_DTYPES)}, got {self.target_dtype!r}.")
        if self.num_assistant_tokens is not None and self.num_assistant_tokens < 1:
            raise ValueError(f"`num_assistant_tokens` ({self.num_assistant_tokens}) must be at least 1.")
        if self.features not in FEATURE_MODES:
            raise ValueError(f"`features` must be one of {list(FEATURE_MODES)}, got {self.features!r}.")
        if self.head_type == "trimmed" and self.draft_vocab_size is None and self.drafter_model is None:
            raise ValueError("`head_type='trimmed'` needs `draft_vocab_size` (the number K of kept tokens).")
        if self.head_init == "activation_svd" and self.head_type != "low_rank":
            raise ValueError(
                f"`head_init='activation_svd'` is for `head_type='low_rank'`, got head_type={self.head_type!r}; "
                "use `svd` (copy of the target's head) for the others."
            )
        if self.target_layer_ids is not None and len(self.target_layer_ids) != 3:
            raise ValueError(f"`target_layer_ids` must hold three indices, got {self.target_layer_ids}.")
        if self.max_length is not None and self.max_length < self.ttt_steps + 2:
            raise ValueError(f"`max_length` ({self.max_length}) must exceed `ttt_steps` + 1 = {self.ttt_steps + 1}.")
        if self.max_train_seconds is not None and self.max_train_seconds <= 0:
            raise ValueError(f"`max_train_seconds` ({self.max_train_seconds}) must be > 0 (or None: no limit).")


def card_fields(config_class: type = SlimSpecConfig) -> list[str]:
    """Names of the settings the model card lists (the fields marked `card` in their metadata): SlimSpec's own in
    declaration order, then the `TrainingArguments` ones."""
    fields = dataclasses.fields(config_class)
    own = [f for f in fields if f.name not in TrainingArguments.__dataclass_fields__]
    inherited = [f for f in fields if f.name in TrainingArguments.__dataclass_fields__]
    return [f.name for f in own + inherited if f.metadata.get("card")]


__all__ = ["SlimSpecConfig", "HEAD_INITS", "LAYER_INITS", "FEATURE_MODES", "TARGET_DTYPES", "card_fields"]
