# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`SlimSpecConfig`: the training arguments of [`SlimSpecTrainer`], in trl's idiom."""

from dataclasses import dataclass, field
from typing import Literal

from transformers import TrainingArguments


HEAD_INITS = ("random", "svd", "activation_svd")
FEATURE_MODES = ("online", "offline")


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
    learning_rate: float = field(default=4e-4, metadata={"help": "The initial learning rate for AdamW."})
    max_grad_norm: float = field(default=0.5, metadata={"help": "Maximum gradient norm (for gradient clipping)."})
    lr_scheduler_type: str = field(default="cosine", metadata={"help": "The scheduler type to use."})
    logging_steps: float = field(
        default=10,
        metadata={"help": "Log every X updates steps. Should be an integer or a float in range `[0,1)`."},
    )
    remove_unused_columns: bool = field(
        default=False,
        metadata={"help": "Kept False: the collator needs `loss_mask` and `feature_key`, which `forward` lacks."},
    )

    # Target
    target_model: str | None = field(
        default=None,
        metadata={
            "help": "Target model: Hub id, local folder, `.gguf` file, or `embedded` (SmolLM2-135M-Instruct, the "
            "default when unset)."
        },
    )
    target_dtype: Literal["auto", "float32", "bfloat16", "float16"] = field(
        default="float32",
        metadata={"help": "Dtype of the frozen target.", "choices": ["auto", "float32", "bfloat16", "float16"]},
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
            "`datasets.save_to_disk` folder, with `messages` or pre-tokenised `input_ids` (+ `loss_mask`)."
        },
    )
    eval_dataset_path: str | None = field(default=None, metadata={"help": "Optional evaluation data, same format."})
    max_samples: int | None = field(
        default=None, metadata={"help": "Use only N training examples, drawn at random with `data_seed` (or `seed`)."}
    )
    max_length: int | None = field(
        default=2048, metadata={"help": "Truncate tokenised conversations to this many tokens (None: no limit)."}
    )
    dataset_num_proc: int | None = field(default=None, metadata={"help": "Processes for tokenising the dataset."})

    # Drafter
    drafter_model: str | None = field(
        default=None, metadata={"help": "Start from this SlimSpec drafter (folder or Hub id) instead of a new one."}
    )
    head_type: Literal["low_rank", "full", "trimmed", "target"] = field(
        default="low_rank",
        metadata={
            "help": "LM head of the drafter: `low_rank` (SlimSpec), `full`, `trimmed` (VocabTrim baseline) or "
            "`target` (the target's frozen head).",
            "choices": ["low_rank", "full", "trimmed", "target"],
        },
    )
    head_rank: int | None = field(
        default=None, metadata={"help": "Rank r of the low-rank head (default hidden_size // 8)."}
    )
    draft_vocab_size: int | None = field(
        default=None,
        metadata={"help": "Kept tokens K of the `trimmed` head (the K most frequent tokens of the training data)."},
    )
    head_init: Literal["random", "svd", "activation_svd"] = field(
        default="random",
        metadata={
            "help": "Initialisation of the head: `random`; `svd` (truncated SVD of the target's LM head, or a copy "
            "of it / of its rows for `full` / `trimmed`); `activation_svd` (the rank-r factorisation optimal for "
            "the target's own final hidden states: SVD of W·C^½ mapped back by C^-½, C their second moment).",
            "choices": list(HEAD_INITS),
        },
    )
    head_init_num_tokens: int = field(
        default=8192,
        metadata={"help": "Assistant positions whose final hidden states estimate C for `activation_svd`."},
    )
    target_layer_ids: list[int] | None = field(
        default=None,
        metadata={
            "help": "Three indices into the target's `outputs.hidden_states` (0 = embeddings); default "
            "[2, L // 2, L - 3]."
        },
    )

    freeze_backbone: bool = field(
        default=False,
        metadata={
            "help": "Train only the LM head (e.g. to recover acceptance after `slimspec convert` factored an "
            "existing EAGLE-3 drafter's head); the backbone stays as loaded."
        },
    )

    # Training-time test
    ttt_steps: int = field(default=6, metadata={"help": "Unrolled drafting steps per position (EAGLE-3's TTT)."})
    step_loss_decay: float = field(default=0.8, metadata={"help": "Weight `decay**k` of the loss of step k."})
    kl_chunk_size: int = field(
        default=256,
        metadata={"help": "Positions whose full-vocabulary logits are held at once when computing the KL."},
    )
    features: Literal["online", "offline"] = field(
        default="online",
        metadata={
            "help": "`online`: the frozen target runs on every batch; `offline`: its features are computed once, "
            "cached to disk in bf16 and reused.",
            "choices": list(FEATURE_MODES),
        },
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
        if self.head_init not in HEAD_INITS:
            raise ValueError(f"`head_init` must be one of {list(HEAD_INITS)}, got {self.head_init!r}.")
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


__all__ = ["SlimSpecConfig", "HEAD_INITS", "FEATURE_MODES"]
