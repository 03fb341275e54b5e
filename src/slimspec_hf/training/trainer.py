# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`SlimSpecTrainer`: distils a frozen target into a SlimSpec drafter with EAGLE-3's training-time test.

Per batch: the frozen target (no grad, eval) gives the fused features of three layers (B, T, 3·d_t) and its final
hidden states (B, T, d_t), from which its own LM head gives the teacher distribution. The drafter unrolls
`ttt_steps` steps (`drafter.ttt_step`): step 0 reads the target's features, step k ≥ 1 its own step k-1 states, each
with the embedding of the ground-truth token k+1 ahead. The loss is the forward KL(p_target ‖ q_drafter) over the
full vocabulary, weighted by `step_loss_decay**k` (see `losses.py`).
"""

import ctypes
import dataclasses
import logging
import math
import os
import platform
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Trainer
from transformers.trainer_utils import get_last_checkpoint

from .. import targets
from ..configuration_slimspec import validate_pairing
from ..modeling_slimspec import (
    SlimSpecDrafterForCausalLM,
    TargetHead,
    TrimmedHead,
)
from ..targets import load_target, target_features
from .callbacks import TimeLimitCallback
from .card_inputs import record_card_inputs
from .config import SlimSpecConfig
from .continual import ContinualCallback, ContinualState, data_order
from .data import SlimSpecDataCollator, prepare_dataset
from .features import feature_cache_root, feature_path, read_features, write_features
from .head_init import apply_lora, build_drafter, freeze_backbone, initialise_head, initialise_layer_from_target
from .losses import Objective, effective_chunk_size, step_weights, ttt_kl_loss, ttt_targets


logger = logging.getLogger(__name__)


def emulated_bf16_warning(args: SlimSpecConfig) -> str | None:
    """A warning when training on a CPU asks for bf16 (`bf16` autocast or a bf16 `target_dtype`) that the CPU does
    not compute natively (no AVX512-BF16/AMX, e.g. an AVX2-only x86): oneDNN then emulates it, an order of magnitude
    slower than fp32 (figures: recipes/smollm2-135m-instruct/README.md). None where nothing is emulated."""
    on_cpu = args.use_cpu or not torch.cuda.is_available()
    if not on_cpu or targets.cpu_has_native_bf16():
        return None
    asked = []
    if args.bf16:
        asked.append("bf16=True")
    if targets.resolve_dtype(args.target_dtype, "cpu") is torch.bfloat16:  # "auto" resolves to fp32 there
        asked.append(f"target_dtype={args.target_dtype}")
    if not asked:
        return None
    return (
        f"{' and '.join(asked)} on a CPU without native bf16 (no AVX512-BF16/AMX): bf16 is emulated there and "
        "training runs an order of magnitude slower than in fp32. Pass --bf16 false --target_dtype float32 "
        "(or target_dtype auto), or train on a CPU that computes bf16 natively."
    )


# glibc's mallopt parameters: the trim threshold (free memory above it at the heap's top goes back to the system) and
# the number of allocations served by `mmap` (0: none, every allocation comes from the heap and is reused when freed)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def reuse_freed_memory(args: SlimSpecConfig) -> bool:
    """On a CPU and glibc (`cpu_reuse_memory`), makes every allocation come from the heap and keeps what is freed.

    glibc serves an allocation of 32 MiB or more with a fresh `mmap` and unmaps it when freed, so each of the loss's
    (rows, vocabulary) fp32 tensors (64 rows of Gemma-3's 262,144 tokens: 64 MiB) is page-faulted in afresh: an
    allocation and first write of one cost 21.6 ms, 6.5 ms from the heap. Returns whether the setting was applied."""
    on_cpu = args.use_cpu or not torch.cuda.is_available()
    if not (args.cpu_reuse_memory and on_cpu and platform.libc_ver()[0] == "glibc"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def _active_module(module: nn.Module) -> nn.Module:
    """The module PEFT's `modules_to_save` wrapper actually runs (or the module itself)."""
    copies = getattr(module, "modules_to_save", None)
    if copies is None:
        return module
    active = getattr(module, "active_adapter", None)
    if isinstance(active, (list, tuple)):
        active = active[0]
    return copies[active] if active in copies else module


class SlimSpecTTTModel(nn.Module):
    """Wraps the drafter so that the whole TTT unroll + loss runs in one `forward` (what DDP/FSDP need to sync).

    The target's LM head weight is borrowed (not registered): it is frozen and never saved.
    """

    def __init__(
        self, drafter: nn.Module, teacher_head: nn.Module, args: SlimSpecConfig, logit_softcapping: float | None = None
    ):
        super().__init__()
        self.drafter = drafter  # SlimSpecDrafterForCausalLM or a PeftModel around it
        self.logit_softcapping = logit_softcapping  # the target's `final_logit_softcapping` (Gemma), or None
        self.config = self.base_drafter.config
        object.__setattr__(self, "_teacher_head", teacher_head)
        self.ttt_steps = args.ttt_steps
        self.kl_chunk_size = args.kl_chunk_size
        self.distill_top_k, self.distill_top_k_weight = args.distill_top_k, args.distill_top_k_weight
        self.objective = Objective(args.loss_type, args.lk_kl_weight, args.lk_eta)
        self.register_buffer("step_weights", step_weights(args.ttt_steps, args.step_loss_decay), persistent=False)

    def activation_checkpointing_enable(self, activation_checkpointing_kwargs=None, **kwargs):
        """`activation_checkpointing=True` (alias `gradient_checkpointing`): the drafter's decoder layer recomputes
        its activations in the backward pass, at every TTT step (its context is pure, so the replay is exact)."""
        self.base_drafter.activation_checkpointing_enable(
            activation_checkpointing_kwargs=activation_checkpointing_kwargs, **kwargs
        )

    @property
    def base_drafter(self) -> SlimSpecDrafterForCausalLM:
        drafter = self.drafter
        return drafter.get_base_model() if hasattr(drafter, "get_base_model") else drafter

    def teacher_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self._teacher_head.weight
        with torch.autocast(hidden.device.type, enabled=False):  # the teacher stays in fp32 (or its own dtype)
            logits = F.linear(hidden.to(weight.dtype), weight)
        cap = self.logit_softcapping  # the target caps its logits (Gemma): distil from what it samples
        return logits if not cap else cap * torch.tanh(logits / cap)

    def forward(self, input_ids, attention_mask, loss_mask, features, final_hidden):
        drafter = self.base_drafter
        head = _active_module(drafter.lm_head)
        with torch.no_grad():
            embeds = drafter.embed(input_ids)  # (B, T, d), the target's frozen embedding
        positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)
        states = drafter.ttt_unroll(embeds, features, positions, self.ttt_steps, attention_mask)  # k: (B, T, d)
        batch_idx, teacher_pos, student_pos, valid = ttt_targets(attention_mask, loss_mask, self.ttt_steps)
        student = torch.stack([states[k][batch_idx, student_pos[k]] for k in range(self.ttt_steps)])  # (S, N, d)
        teacher = final_hidden[batch_idx, teacher_pos]  # (N, d_t)
        if isinstance(head, TrimmedHead):
            compact_ids = head.token_ids

            def student_head(h):
                return head.compact_logits(drafter.norm(h))
        else:
            compact_ids = None

            def student_head(h):
                return head(drafter.norm(h))

        params = [*drafter.norm.parameters(), *([] if isinstance(head, TargetHead) else head.parameters())]
        return ttt_kl_loss(
            student,
            teacher,
            valid,
            student_head,
            self.teacher_logits,
            self.step_weights,
            chunk_size=effective_chunk_size(self.kl_chunk_size, self._teacher_head.weight.shape[0], teacher.device),
            params=params,
            compact_ids=compact_ids,
            top_k=self.distill_top_k,
            top_k_weight=self.distill_top_k_weight,
            objective=self.objective,
        )


class SlimSpecTrainer(Trainer):
    """
    Trainer of SlimSpec drafters (EAGLE-3 backbone + low-rank head) by distillation from a frozen target.

    Args:
        model (`SlimSpecDrafterForCausalLM` or `str`, *optional*): the drafter to train, or a path to one. By default
            a new drafter is built from the target's config and `args` (`head_type`, `head_rank`, `head_init`, ...).
        args ([`SlimSpecConfig`], *optional*): training arguments.
        target (`PreTrainedModel` or `str`, *optional*): the frozen target, or its name/path (default
            `args.target_model`, else the embedded SmolLM2-135M-Instruct).
        train_dataset, eval_dataset (`datasets.Dataset`): conversations (`messages`) or pre-tokenised rows
            (`input_ids` + `loss_mask`); conversations are tokenised with the target's chat template.
        processing_class: the target's tokenizer (loaded with the target when it is given by name).
        data_collator: defaults to [`~data.SlimSpecDataCollator`].
        peft_config (`peft.PeftConfig`, *optional*): LoRA on the drafter's backbone; the head is trained in full.
    """

    _tag_names = ["slimspec", "eagle3", "speculative-decoding", "distillation"]

    def __init__(
        self,
        model: SlimSpecDrafterForCausalLM | str | None = None,
        args: SlimSpecConfig | None = None,
        target: nn.Module | str | None = None,
        train_dataset=None,
        eval_dataset=None,
        processing_class=None,
        data_collator=None,
        peft_config=None,
        callbacks=None,
        optimizers=(None, None),
    ):
        args = self._check_args(args)
        if args.cpu_threads:
            torch.set_num_threads(args.cpu_threads)
        reuse_freed_memory(args)
        warning = emulated_bf16_warning(args)
        if warning:
            logger.warning(warning)
        target, processing_class = self._load_target(target, processing_class, args)
        self.target = target

        # Datasets, tokenised with the target's chat template; a continual run reads the training set in its order.
        train_dataset = self._prepare_train_dataset(train_dataset, eval_dataset, processing_class, args)
        continual = ContinualState.load(args.continual_dir) if args.continual_dir else None
        continual_callback = None
        if args.continual_dir and train_dataset is not None:
            train_dataset, continual_callback = continue_in_order(train_dataset, continual, args)
        if eval_dataset is not None:
            eval_dataset = prepare_dataset(
                eval_dataset, processing_class, args.max_length, args.dataset_num_proc, name="eval_dataset"
            )

        model = self._load_or_build_drafter(model, target, args, continual, train_dataset)
        self._layer_ids = list(model.config.target_layer_ids)
        model = self._trainable_drafter(model, args, peft_config)
        if data_collator is None:
            pad = getattr(processing_class, "pad_token_id", None)
            data_collator = SlimSpecDataCollator(pad_token_id=pad if pad is not None else 0)

        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._tokenizer = processing_class
        super().__init__(
            model=self._ttt_model(model, target, args),
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=None,  # the drafter uses the target's tokenizer; nothing to save with it
            callbacks=callbacks,
            optimizers=optimizers,
        )
        if args.max_train_seconds is not None:
            self.add_callback(TimeLimitCallback(args.max_train_seconds))
        self._continual = continual_callback is not None
        if self._continual:
            self.add_callback(continual_callback)
        self.target.to(self.args.device)
        if self.args.features == "offline":
            self._cache_root = feature_cache_root(args, target, self._layer_ids)

    # -- construction: arguments, target, datasets, drafter ------------------------------------------------------
    @staticmethod
    def _check_args(args: SlimSpecConfig | None) -> SlimSpecConfig:
        """`args`, by default `SlimSpecConfig(output_dir="slimspec-drafter")`; refused when not a `SlimSpecConfig` or
        when it asks for `load_best_model_at_end`."""
        if args is None:
            args = SlimSpecConfig(output_dir="slimspec-drafter")
        if not isinstance(args, SlimSpecConfig):
            raise TypeError(f"`args` must be a `SlimSpecConfig`, got {type(args).__name__}.")
        if args.load_best_model_at_end:
            raise ValueError("`load_best_model_at_end=True` is not supported by SlimSpecTrainer; load a checkpoint.")
        return args

    @staticmethod
    def _load_target(target, processing_class, args: SlimSpecConfig):
        """The target (loaded when given by name, default `args.target_model`), frozen: eval, no grad; and the
        tokenizer to use (`processing_class`, else the one loaded with the target)."""
        if target is None or isinstance(target, str):
            # fp32 unless `target_dtype` says otherwise: the teacher's logits are the training signal
            target, tokenizer = load_target(
                target or args.target_model,
                dtype=args.target_dtype,
                tokenizer_required=False,  # fine for pre-tokenised datasets
                **(args.target_model_init_kwargs or {}),
            )
            processing_class = processing_class if processing_class is not None else tokenizer
        target.eval().requires_grad_(False)
        return target, processing_class

    @staticmethod
    def _prepare_train_dataset(train_dataset, eval_dataset, processing_class, args: SlimSpecConfig):
        """The training set tokenised, without the evaluation set's conversations (same `id`: the drafter is measured
        on conversations it has not seen), cut to `max_samples` random rows."""
        if train_dataset is not None and eval_dataset is not None:
            train_dataset = drop_eval_conversations(train_dataset, eval_dataset)
        if train_dataset is None:
            return None
        train_dataset = prepare_dataset(train_dataset, processing_class, args.max_length, args.dataset_num_proc)
        if args.max_samples is not None:
            # a random subset: `prepare-data` writes rows longest prompt first, so "the first N" would be biased
            seed = args.data_seed if args.data_seed is not None else args.seed
            train_dataset = train_dataset.shuffle(seed=seed).select(range(min(args.max_samples, len(train_dataset))))
        return train_dataset

    @staticmethod
    def _load_or_build_drafter(
        model, target: nn.Module, args: SlimSpecConfig, continual: ContinualState | None, train_dataset
    ) -> SlimSpecDrafterForCausalLM:
        """The drafter to train, checked against `target` and attached to it: `model`, else the continual run's latest
        weights, else `args.drafter_model`, else a new one built from the target's config and initialised."""
        # One given by path loads in fp32 whatever it was saved in (a shipped drafter is bf16): the optimiser's
        # master weights must be fp32, or small updates round away; `bf16=True` etc. still apply.
        if continual is not None and model is None and continual.has_weights(args.continual_dir):
            model = args.continual_dir  # the run's latest weights, ahead of `drafter_model` where it started
        if model is None and args.drafter_model is not None:
            model = args.drafter_model
        if isinstance(model, str):
            model = SlimSpecDrafterForCausalLM.from_pretrained(model, dtype=torch.float32)
        if model is None:
            model = build_drafter(target, args)
            initialise_head(model, target, args, train_dataset)
            if args.layer_init != "random":
                initialise_layer_from_target(model, target, strict=args.layer_init == "target_last_layer")
        elif args.layer_init == "target_last_layer":
            logger.warning(
                "`layer_init='target_last_layer'` applies to a new drafter; the given one keeps its weights."
            )
        if not isinstance(model, SlimSpecDrafterForCausalLM):
            raise TypeError(f"`model` must be a SlimSpecDrafterForCausalLM (or a path), got {type(model).__name__}.")
        validate_pairing(model, target)
        model.attach_target(target)
        return model

    @staticmethod
    def _trainable_drafter(model: SlimSpecDrafterForCausalLM, args: SlimSpecConfig, peft_config) -> nn.Module:
        """The drafter with only its head trainable (`freeze_backbone`), or wrapped with LoRA on its backbone
        (`peft_config`), or as it is; the two options exclude each other."""
        if args.freeze_backbone:
            if peft_config is not None:
                raise ValueError(
                    "`freeze_backbone=True` trains only the head; it cannot be combined with `peft_config` (LoRA on "
                    "the backbone). Choose one."
                )
            freeze_backbone(model)
        if peft_config is not None:
            model = apply_lora(model, peft_config)
        return model

    @staticmethod
    def _ttt_model(model: nn.Module, target: nn.Module, args: SlimSpecConfig) -> SlimSpecTTTModel:
        """The module the `Trainer` trains: the drafter's TTT unroll and loss, taught by the target's LM head (with
        its logit soft-capping, if any)."""
        cap = getattr(target.config.get_text_config(decoder=True), "final_logit_softcapping", None)
        wrapper = SlimSpecTTTModel(model, target.get_output_embeddings(), args, logit_softcapping=cap)
        wrapper.base_drafter.config.ttt_steps = args.ttt_steps  # the depth the saved drafter was trained with
        return wrapper

    # -- properties ----------------------------------------------------------------------------------------------
    @property
    def drafter(self) -> SlimSpecDrafterForCausalLM:
        """The drafter being trained (the base model when PEFT is used)."""
        return self.model.base_drafter

    def _get_train_sampler(self, train_dataset=None):
        if self._continual:  # the dataset is already in the continual run's order
            return torch.utils.data.SequentialSampler(
                train_dataset if train_dataset is not None else self.train_dataset
            )
        return super()._get_train_sampler(train_dataset)

    def _set_signature_columns_if_needed(self):
        if self._signature_columns is None:
            self._signature_columns = ["input_ids", "loss_mask", "feature_key", "attention_mask"]

    # -- target features -----------------------------------------------------------------------------------------
    @torch.no_grad()
    def _run_target(self, input_ids, attention_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """Fused features (B, T, 3·d_t) and final hidden states (B, T, d_t) of the frozen target."""
        return target_features(self.target, input_ids, self._layer_ids, attention_mask)

    def _target_states(self, inputs) -> tuple[torch.Tensor, torch.Tensor]:
        input_ids, attention_mask = inputs["input_ids"], inputs["attention_mask"]
        if self.args.features == "online":
            return self._run_target(input_ids, attention_mask)
        keys = inputs["feature_key"]
        paths = [feature_path(self._cache_root, key) for key in keys]
        if not all(p.is_file() for p in paths):
            features, final = self._run_target(input_ids, attention_mask)
            lengths = attention_mask.sum(-1).tolist()
            for i, path in enumerate(paths):
                if not path.is_file():
                    write_features(path, features[i, : lengths[i]], final[i, : lengths[i]])
        return read_features(paths, input_ids.shape[1], input_ids.device)

    def cache_features(self, dataset=None) -> int:
        """Computes (once) the offline features of `dataset` (default: the training set); returns how many."""
        from tqdm.auto import tqdm

        dataset = dataset if dataset is not None else self.train_dataset
        collator = self.data_collator
        state = self.accelerator.state
        indices = list(range(state.process_index, len(dataset), state.num_processes))
        batch_size = self.args.per_device_train_batch_size
        written = 0
        bar = tqdm(total=len(indices), desc="caching target features", disable=not self.is_local_process_zero())
        # longest first within the pass, so that batches pad little
        indices.sort(key=lambda i: -len(dataset[i]["input_ids"]))
        for start in range(0, len(indices), batch_size):
            rows = [dataset[i] for i in indices[start : start + batch_size]]
            batch = collator(rows)
            missing = [
                i for i, key in enumerate(batch["feature_key"]) if not (feature_path(self._cache_root, key)).is_file()
            ]
            if missing:
                sub = collator([rows[i] for i in missing])
                ids = sub["input_ids"].to(self.args.device)
                mask = sub["attention_mask"].to(self.args.device)
                features, final = self._run_target(ids, mask)
                for j, key in enumerate(sub["feature_key"]):
                    n = int(mask[j].sum())
                    write_features(feature_path(self._cache_root, key), features[j, :n], final[j, :n])
                written += len(missing)
            bar.update(len(rows))
        bar.close()
        self.accelerator.wait_for_everyone()
        return written

    # -- loss ------------------------------------------------------------------------------------------------------
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        features, final_hidden = self._target_states(inputs)
        out = model(
            input_ids=inputs["input_ids"],
            attention_mask=inputs["attention_mask"],
            loss_mask=inputs["loss_mask"],
            features=features,
            final_hidden=final_hidden,
        )
        metrics = self._metrics[mode]
        metrics["kl_sum"].append(out.step_kl.detach() * out.step_count)
        metrics["correct"].append(out.step_correct.detach())
        metrics["count"].append(out.step_count.detach())
        metrics["tokens"].append(inputs["attention_mask"].sum().detach())
        return (out.loss, out) if return_outputs else out.loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        metrics = self._metrics[mode]
        if metrics["count"]:
            totals = {name: torch.stack(values).sum(0) for name, values in metrics.items()}
            if self.accelerator.num_processes > 1:
                totals = {name: self.accelerator.reduce(value, "sum") for name, value in totals.items()}
            count = totals["count"].clamp(min=1).float()
            prefix = "eval_" if mode == "eval" else ""
            for k in range(count.numel()):
                logs[f"{prefix}acc_{k}"] = round(float(totals["correct"][k] / count[k]), 4)
            for k in range(count.numel()):
                logs[f"{prefix}kl_{k}"] = round(float(totals["kl_sum"][k] / count[k]), 4)
            logs[f"{prefix}num_tokens"] = int(totals["tokens"])
        super().log(logs, start_time)
        metrics.clear()

    # -- training entry: refuse foreign output dirs, fill the feature cache ----------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs):
        resume = resume_from_checkpoint if resume_from_checkpoint is not None else self.args.resume_from_checkpoint
        if resume in (None, False) and not self.args.continual_dir:  # a continual run's output dir is each call's
            check_output_dir(self.args.output_dir, self.args.overwrite_output_dir)  # scratch; its folder is the run
        if self.args.features == "offline" and self.train_dataset is not None:
            written = self.cache_features()
            logger.info("Offline features: %d new under %s", written, self._cache_root)
        return super().train(resume_from_checkpoint=resume, **kwargs)

    # -- saving and loading --------------------------------------------------------------------------------------
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        os.makedirs(output_dir, exist_ok=True)
        drafter = self.model.drafter
        drafter.save_pretrained(output_dir, safe_serialization=True)
        torch.save(self.args, os.path.join(output_dir, "training_args.bin"))
        self.create_model_card(output_dir=output_dir)

    def create_model_card(self, output_dir: str | None = None, dataset_name: str | list[str] | None = None, **kwargs):
        """Records the drafter card's inputs in `output_dir` (default `args.output_dir`; `slimspec_card.json`: the
        recipe, whose [`SlimSpecConfig`] fields marked `card` the card lists, and `dataset_name`). The card itself is
        rendered where the drafter is published: `slimspec train` at the end, `slimspec push`,
        `slimspec_hf.interop.model_card.write_model_card`."""
        if not self.is_world_process_zero():
            return None
        recipe = {k: v for k, v in self.args.to_dict().items() if not k.startswith("_") and "token" not in k}
        datasets = [dataset_name] if isinstance(dataset_name, str) else dataset_name
        return record_card_inputs(output_dir or self.args.output_dir, recipe=recipe, datasets=datasets)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
        from safetensors.torch import load_file

        drafter = self.model.drafter
        if hasattr(drafter, "peft_config"):
            from peft import set_peft_model_state_dict

            state = load_file(os.path.join(resume_from_checkpoint, "adapter_model.safetensors"))
            set_peft_model_state_dict(drafter, state)
            return
        path = os.path.join(resume_from_checkpoint, "model.safetensors")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"`resume_from_checkpoint` {resume_from_checkpoint} has no model.safetensors.")
        state = load_file(path)
        missing, unexpected = drafter.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(
                f"The checkpoint {resume_from_checkpoint} does not fit the drafter: missing {missing}, unexpected "
                f"{unexpected}."
            )


def continue_in_order(train_dataset, state: ContinualState | None, args: SlimSpecConfig):
    """The training set in the continual run's order from where `state` left it (the trainer reads it in order),
    and the callback that writes the run folder back."""
    seed = args.data_seed if args.data_seed is not None else args.seed
    if state is None:
        state = ContinualState(data=args.dataset_path, seed=seed)
    elif (state.data, state.seed) != (args.dataset_path, seed):
        logger.warning(
            "`continual_dir` %s was trained on another data order (%s, seed %d): the new order (%s, seed %d) starts "
            "at its first conversation; the run's totals carry on.",
            args.continual_dir,
            state.data,
            state.seed,
            args.dataset_path,
            seed,
        )
        state = dataclasses.replace(state, data=args.dataset_path, seed=seed, position=0)
    elif state.rows and state.rows != len(train_dataset):
        logger.warning(
            "`continual_dir` %s: its data order shuffles %d conversations, the training set now holds %d: a new order "
            "over all of them starts at its first conversation; the run's totals carry on.",
            args.continual_dir,
            state.rows,
            len(train_dataset),
        )
        state = dataclasses.replace(state, position=0)
    state = dataclasses.replace(state, rows=len(train_dataset))
    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
    steps = args.max_steps if args.max_steps > 0 else math.ceil(len(train_dataset) * args.num_train_epochs / per_step)
    order = data_order(len(train_dataset), seed, state.position, steps * per_step)
    lengths = [len(ids) for ids in train_dataset["input_ids"]]
    callback = ContinualCallback(args.continual_dir, state, [lengths[i] for i in order], per_step)
    return train_dataset.select(order), callback


def drop_eval_conversations(train_dataset, eval_dataset):
    """`train_dataset` without the conversations whose `id` is also in `eval_dataset` (unchanged without ids)."""
    if "id" not in train_dataset.column_names or "id" not in eval_dataset.column_names:
        return train_dataset
    held_out = set(eval_dataset["id"])
    kept = train_dataset.filter(lambda row: row["id"] not in held_out, desc="Dropping evaluation conversations")
    if len(kept) < len(train_dataset):
        logger.info(
            "Dropped %d training conversations that are in the evaluation set.", len(train_dataset) - len(kept)
        )
    return kept


def check_output_dir(output_dir: str, overwrite: bool) -> None:
    """Refuses an output dir that already holds a run, unless told to overwrite (or resume)."""
    path = Path(output_dir)
    if not path.is_dir() or overwrite:
        return
    markers = ["config.json", "model.safetensors", "adapter_model.safetensors", "trainer_state.json"]
    if any((path / m).exists() for m in markers) or get_last_checkpoint(str(path)) is not None:
        raise ValueError(
            f"`output_dir` {path} already holds a run. Pass `--resume_from_checkpoint true` (or a checkpoint path) "
            "to continue it, `--overwrite_output_dir true` to train over it, or choose another `output_dir`."
        )


__all__ = [
    "SlimSpecTrainer",
    "SlimSpecTTTModel",
    "check_output_dir",
    "drop_eval_conversations",
]
