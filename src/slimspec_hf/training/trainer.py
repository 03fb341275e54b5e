# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`SlimSpecTrainer`: distils a frozen target into a SlimSpec drafter with EAGLE-3's training-time test.

Per batch: the frozen target (no grad, eval) gives the fused features of three layers (B, T, 3·d_t) and its final
hidden states (B, T, d_t), from which its own LM head gives the teacher distribution. The drafter unrolls
`ttt_steps` steps (`drafter.ttt_step`): step 0 reads the target's features, step k ≥ 1 its own step k-1 states, each
with the embedding of the ground-truth token k+1 ahead. The loss is the forward KL(p_target ‖ q_drafter) over the
full vocabulary, weighted by `step_loss_decay**k` (see `losses.py`).
"""

import logging
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForCausalLM, Trainer
from transformers.trainer_utils import get_last_checkpoint

from ..configuration_slimspec import SlimSpecDrafterConfig
from ..generation_slimspec import validate_pairing
from ..modeling_slimspec import (
    LowRankHead,
    SlimSpecDrafterForCausalLM,
    TargetHead,
    TrimmedHead,
    low_rank_factors,
)
from ..targets import target_features
from .config import SlimSpecConfig
from .data import SlimSpecDataCollator, prepare_dataset
from .losses import step_weights, ttt_kl_loss, ttt_targets


logger = logging.getLogger(__name__)


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

    def __init__(self, drafter: nn.Module, teacher_head: nn.Module, args: SlimSpecConfig):
        super().__init__()
        self.drafter = drafter  # SlimSpecDrafterForCausalLM or a PeftModel around it
        self.config = self.base_drafter.config
        object.__setattr__(self, "_teacher_head", teacher_head)
        self.ttt_steps = args.ttt_steps
        self.kl_chunk_size = args.kl_chunk_size
        self.register_buffer("step_weights", step_weights(args.ttt_steps, args.step_loss_decay), persistent=False)

    @property
    def base_drafter(self) -> SlimSpecDrafterForCausalLM:
        drafter = self.drafter
        return drafter.get_base_model() if hasattr(drafter, "get_base_model") else drafter

    def teacher_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self._teacher_head.weight
        with torch.autocast(hidden.device.type, enabled=False):  # the teacher stays in fp32 (or its own dtype)
            return F.linear(hidden.to(weight.dtype), weight)

    def forward(self, input_ids, attention_mask, loss_mask, features, final_hidden):
        drafter = self.base_drafter
        head = _active_module(drafter.lm_head)
        with torch.no_grad():
            embeds = drafter.embed(input_ids)  # (B, T, d), the target's frozen embedding
        positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)
        hidden, context, states = features, [], []
        for k in range(self.ttt_steps):
            shifted = torch.zeros_like(embeds)
            kept = max(embeds.shape[1] - k - 1, 0)  # rows shorter than the unroll have nothing left to shift in
            shifted[:, :kept] = embeds[:, k + 1 : k + 1 + kept]  # x_{t+k+1} at position t
            hidden = drafter.ttt_step(shifted, hidden, positions, k, context, attention_mask)  # (B, T, d)
            states.append(hidden)
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
            chunk_size=self.kl_chunk_size,
            params=params,
            compact_ids=compact_ids,
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
        if args is None:
            args = SlimSpecConfig(output_dir="slimspec-drafter")
        if not isinstance(args, SlimSpecConfig):
            raise TypeError(f"`args` must be a `SlimSpecConfig`, got {type(args).__name__}.")
        if args.gradient_checkpointing:
            raise ValueError(
                "`gradient_checkpointing=True` is not supported: the drafter is one layer, and the TTT unroll shares "
                "keys across steps. Lower `per_device_train_batch_size`, `max_length` or `kl_chunk_size` instead."
            )
        if args.load_best_model_at_end:
            raise ValueError("`load_best_model_at_end=True` is not supported by SlimSpecTrainer; load a checkpoint.")

        if args.cpu_threads:
            torch.set_num_threads(args.cpu_threads)
        # Target: frozen, eval, no grad.
        if target is None or isinstance(target, str):
            target, tokenizer = load_target_for_training(target or args.target_model, args)
            processing_class = processing_class if processing_class is not None else tokenizer
        target.eval().requires_grad_(False)
        self.target = target

        # Datasets: tokenise conversations with the target's chat template.
        if train_dataset is not None:
            train_dataset = prepare_dataset(train_dataset, processing_class, args.max_length, args.dataset_num_proc)
            if args.max_samples is not None:
                # a random subset: `prepare-data` writes rows longest prompt first, so "the first N" would be biased
                seed = args.data_seed if args.data_seed is not None else args.seed
                train_dataset = train_dataset.shuffle(seed=seed).select(
                    range(min(args.max_samples, len(train_dataset)))
                )
        if eval_dataset is not None:
            eval_dataset = prepare_dataset(
                eval_dataset, processing_class, args.max_length, args.dataset_num_proc, name="eval_dataset"
            )

        # Drafter. One given by path loads in fp32 whatever it was saved in (a shipped drafter is bf16): the
        # optimiser's master weights must be fp32, or small updates round away; `bf16=True` etc. still apply.
        if model is None and args.drafter_model is not None:
            model = args.drafter_model
        if isinstance(model, str):
            model = SlimSpecDrafterForCausalLM.from_pretrained(model, dtype=torch.float32)
        if model is None:
            model = build_drafter(target, args)
            initialise_head(model, target, args, train_dataset)
        if not isinstance(model, SlimSpecDrafterForCausalLM):
            raise TypeError(f"`model` must be a SlimSpecDrafterForCausalLM (or a path), got {type(model).__name__}.")
        validate_pairing(model, target)
        model.attach_target(target)
        self._layer_ids = list(model.config.target_layer_ids)

        if args.freeze_backbone:
            if peft_config is not None:
                raise ValueError(
                    "`freeze_backbone=True` trains only the head; it cannot be combined with `peft_config` (LoRA on "
                    "the backbone). Choose one."
                )
            freeze_backbone(model)
        if peft_config is not None:
            model = _apply_peft(model, peft_config)

        if data_collator is None:
            pad = getattr(processing_class, "pad_token_id", None)
            data_collator = SlimSpecDataCollator(pad_token_id=pad if pad is not None else 0)

        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._tokenizer = processing_class
        wrapper = SlimSpecTTTModel(model, target.get_output_embeddings(), args)
        super().__init__(
            model=wrapper,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=None,  # the drafter uses the target's tokenizer; nothing to save with it
            callbacks=callbacks,
            optimizers=optimizers,
        )
        self.target.to(self.args.device)
        if self.args.features == "offline":
            self._cache_root = feature_cache_root(args, target, self._layer_ids)

    # -- properties ----------------------------------------------------------------------------------------------
    @property
    def drafter(self) -> SlimSpecDrafterForCausalLM:
        """The drafter being trained (the base model when PEFT is used)."""
        return self.model.base_drafter

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
        paths = [self._cache_root / key[:2] / f"{key}.safetensors" for key in keys]
        if not all(p.is_file() for p in paths):
            features, final = self._run_target(input_ids, attention_mask)
            lengths = attention_mask.sum(-1).tolist()
            for i, path in enumerate(paths):
                if not path.is_file():
                    _write_features(path, features[i, : lengths[i]], final[i, : lengths[i]])
        return _read_features(paths, input_ids.shape[1], input_ids.device)

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
                i
                for i, key in enumerate(batch["feature_key"])
                if not (self._cache_root / key[:2] / f"{key}.safetensors").is_file()
            ]
            if missing:
                sub = collator([rows[i] for i in missing])
                ids = sub["input_ids"].to(self.args.device)
                mask = sub["attention_mask"].to(self.args.device)
                features, final = self._run_target(ids, mask)
                for j, key in enumerate(sub["feature_key"]):
                    n = int(mask[j].sum())
                    _write_features(self._cache_root / key[:2] / f"{key}.safetensors", features[j, :n], final[j, :n])
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
        if resume in (None, False):
            check_output_dir(self.args.output_dir, self.args.overwrite_output_dir)
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
        _write_model_card(output_dir, self.args, self.drafter.config)

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


# ----------------------------------------------------------------------------------------------------------------
# Building blocks (public so that scripts and tests can use them)
# ----------------------------------------------------------------------------------------------------------------


def load_target_for_training(name_or_path: str | None, args: SlimSpecConfig):
    """(target, tokenizer or None): the embedded SmolLM2, a `.gguf`, or a folder / Hub id (tokenizer optional)."""
    from ..targets import is_embedded, load_target

    dtype = "auto" if args.target_dtype == "auto" else getattr(torch, args.target_dtype)
    kwargs = dict(args.target_model_init_kwargs or {})
    if is_embedded(name_or_path) or str(name_or_path).endswith(".gguf"):
        return load_target(name_or_path, dtype=torch.float32 if dtype == "auto" else dtype)
    from transformers import AutoTokenizer

    target = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype, **kwargs)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    except (OSError, ValueError, TypeError):
        tokenizer = None  # fine for pre-tokenised datasets
    return target, tokenizer


def build_drafter(target: nn.Module, args: SlimSpecConfig) -> SlimSpecDrafterForCausalLM:
    overrides: dict[str, Any] = {"head_type": args.head_type, "num_speculative_tokens": args.ttt_steps}
    if args.head_rank is not None:
        overrides["head_rank"] = args.head_rank
    if args.draft_vocab_size is not None:
        overrides["draft_vocab_size"] = args.draft_vocab_size
    if args.target_layer_ids is not None:
        overrides["target_layer_ids"] = list(args.target_layer_ids)
    config = SlimSpecDrafterConfig.from_target_config(target.config, **overrides)
    torch.manual_seed(args.seed)
    dtype = next(target.parameters()).dtype
    return SlimSpecDrafterForCausalLM(config).to(dtype=torch.float32 if dtype != torch.float32 else dtype)


@torch.no_grad()
def target_hidden_second_moment(target, dataset, num_tokens: int, batch_size: int = 8) -> torch.Tensor:
    """C = E[h hᵀ] (fp64, d_t×d_t) of the target's final hidden states at assistant positions of `dataset`."""
    device = next(target.parameters()).device
    backbone = getattr(target, target.base_model_prefix, target)
    collator = SlimSpecDataCollator()
    width = target.config.get_text_config().hidden_size
    moment = torch.zeros(width, width, dtype=torch.float64)
    seen = 0
    for start in range(0, len(dataset), batch_size):
        batch = collator([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])
        out = backbone(
            input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device), use_cache=False
        )
        # The head reads the state at s to predict x_{s+1}: keep s where x_{s+1} is an assistant token.
        labels = (batch["loss_mask"].bool() & batch["attention_mask"].bool()).to(device)
        mask = torch.zeros_like(labels)
        mask[:, :-1] = labels[:, 1:]
        states = out.last_hidden_state[mask].double().cpu()  # (n, d_t)
        states = states[: num_tokens - seen]
        moment += states.T @ states
        seen += states.shape[0]
        if seen >= num_tokens:
            break
    if seen == 0:
        raise ValueError("`head_init='activation_svd'` found no assistant positions in the training data.")
    return moment / seen


def activation_aware_factors(weight: torch.Tensor, moment: torch.Tensor, rank: int):
    """Rank-r (down, up) minimising E‖(W − up·down) h‖² for h with second moment C: SVD of W·C^½, mapped by C^-½.

    In fp64: C is often badly conditioned, and C^-½ amplifies the error of its small eigenvalues.
    """
    eigvals, eigvecs = torch.linalg.eigh(moment.double())
    eigvals = eigvals.clamp(min=float(eigvals.max()) * 1e-8)
    root = eigvecs @ torch.diag(eigvals.sqrt()) @ eigvecs.T
    inv_root = eigvecs @ torch.diag(eigvals.rsqrt()) @ eigvecs.T
    down, up = low_rank_factors(weight.double() @ root, rank)  # (r, d), (V, r)
    return (down @ inv_root).to(weight.dtype), up.to(weight.dtype)


@torch.no_grad()
def initialise_head(drafter, target, args: SlimSpecConfig, train_dataset=None) -> None:
    """`head_init` for a new drafter; also picks the kept tokens of a trimmed head (most frequent in the data)."""
    head = drafter.lm_head
    weight = target.get_output_embeddings().weight.detach().float()  # (V, d_t)
    from_target = args.head_init != "random"
    if from_target and weight.shape[1] != drafter.config.hidden_size:
        raise ValueError(
            f"`head_init={args.head_init!r}` copies the target's LM head ({tuple(weight.shape)}), which does not fit "
            f"the drafter width {drafter.config.hidden_size}; use head_init='random'."
        )
    if isinstance(head, TrimmedHead):
        if train_dataset is None:
            raise ValueError("`head_type='trimmed'` picks its tokens from `train_dataset`, which is missing.")
        counts = torch.zeros(drafter.config.vocab_size, dtype=torch.long)
        for ids, mask in zip(train_dataset["input_ids"], train_dataset["loss_mask"]):
            ids = torch.as_tensor(ids)
            counts += torch.bincount(ids[torch.as_tensor(mask).bool()], minlength=counts.numel())
        token_ids = torch.argsort(counts, descending=True, stable=True)[: head.token_ids.numel()]
        head.set_token_ids(token_ids, dense_weight=weight if from_target else None)
    elif isinstance(head, LowRankHead):
        if args.head_init == "svd":
            head.init_from_dense(weight)
        elif args.head_init == "activation_svd":
            if train_dataset is None:
                raise ValueError("`head_init='activation_svd'` estimates C from `train_dataset`, which is missing.")
            moment = target_hidden_second_moment(target, train_dataset, args.head_init_num_tokens)
            down, up = activation_aware_factors(weight, moment, head.rank)
            head.down.weight.copy_(down)
            head.up.weight.copy_(up)
    elif isinstance(head, nn.Linear) and from_target:
        head.weight.copy_(weight)
    if from_target and not isinstance(head, TargetHead):
        # The head was fitted to the target's normed states: start the drafter's final norm from the target's.
        target_norm = getattr(getattr(target, target.base_model_prefix, target), "norm", None)
        if target_norm is not None and target_norm.weight.shape == drafter.norm.weight.shape:
            drafter.norm.weight.copy_(target_norm.weight.float())


def freeze_backbone(drafter: SlimSpecDrafterForCausalLM) -> SlimSpecDrafterForCausalLM:
    """Leaves only the LM head trainable (head-only fine-tunes, e.g. of converted drafters)."""
    for name, param in drafter.named_parameters():
        param.requires_grad_(name.startswith("lm_head."))
    return drafter


def _apply_peft(model, peft_config):
    try:
        from peft import PeftConfig, get_peft_model
    except ImportError as error:
        raise ImportError("`peft_config` needs PEFT, a dependency of slimspec-hf: pip install peft") from error
    if not isinstance(peft_config, PeftConfig):
        raise TypeError(f"`peft_config` must be a `peft.PeftConfig`, got {type(peft_config).__name__}.")
    import copy

    peft_config = copy.deepcopy(peft_config)  # never mutate the caller's config
    backbone = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "fc"]
    if peft_config.target_modules in (None, "all-linear"):
        peft_config.target_modules = backbone
    else:
        names = (
            {peft_config.target_modules}
            if isinstance(peft_config.target_modules, str)
            else set(peft_config.target_modules)
        )
        if names & {"lm_head", "up", "down"}:
            raise ValueError(
                f"`peft_config.target_modules` {sorted(names)} reaches into the LM head; LoRA is for the backbone, "
                "the head is trained in full."
            )
    if model.config.head_type != "target":
        peft_config.modules_to_save = sorted(set(peft_config.modules_to_save or []) | {"lm_head"})
    return get_peft_model(model, peft_config)


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


def feature_cache_root(args: SlimSpecConfig, target, layer_ids) -> Path:
    from ..targets import cache_dir

    root = Path(args.feature_cache_dir) if args.feature_cache_dir else cache_dir() / "features"
    name = getattr(target.config, "_name_or_path", None) or type(target).__name__
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", str(name).strip("/"))[-80:]
    return root / f"{slug}-layers{'_'.join(map(str, layer_ids))}-V{target.config.get_text_config().vocab_size}"


def _write_features(path: Path, features: torch.Tensor, final: torch.Tensor) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    save_file(
        {
            "features": features.to(torch.bfloat16).contiguous().cpu(),
            "final": final.to(torch.bfloat16).contiguous().cpu(),
        },
        str(tmp),
    )
    os.replace(tmp, path)


def _read_features(paths, length: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    from safetensors.torch import load_file

    loaded = [load_file(str(p)) for p in paths]
    features = torch.zeros(len(paths), length, loaded[0]["features"].shape[-1], dtype=torch.float32)
    final = torch.zeros(len(paths), length, loaded[0]["final"].shape[-1], dtype=torch.float32)
    for i, item in enumerate(loaded):
        n = item["features"].shape[0]
        features[i, :n] = item["features"].float()
        final[i, :n] = item["final"].float()
    return features.to(device), final.to(device)


def _write_model_card(output_dir: str, args: SlimSpecConfig, config) -> None:
    recipe = {k: v for k, v in args.to_dict().items() if not k.startswith("_") and "token" not in k}
    try:
        from ..interop.hub import write_model_card

        write_model_card(output_dir, recipe=recipe, results=None)
        return
    except (ImportError, AttributeError):
        pass
    lines = [
        "---",
        "library_name: transformers",
        "tags: [slimspec, eagle3, speculative-decoding]",
        f"base_model: {config.target_model_name_or_path}" if config.target_model_name_or_path else "",
        "---",
        "",
        f"# SlimSpec drafter for {config.target_model_name_or_path or 'its target'}",
        "",
        f"EAGLE-3 drafter with a `{config.head_type}` head"
        + (f" of rank {config.head_rank}" if config.head_type == "low_rank" else "")
        + f", trained with `slimspec train` (ttt_steps={args.ttt_steps}, step_loss_decay={args.step_loss_decay}, "
        f"head_init={args.head_init}, lr={args.learning_rate}, epochs={args.num_train_epochs}, "
        f"max_steps={args.max_steps}).",
        "",
        "```python",
        "import slimspec_hf",
        "from transformers import AutoModelForCausalLM",
        "drafter = AutoModelForCausalLM.from_pretrained(PATH)",
        "out = target.generate(**inputs, assistant_model=drafter)",
        "```",
        "",
    ]
    tmp = os.path.join(output_dir, ".README.md.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(line for line in lines if line is not None))
    os.replace(tmp, os.path.join(output_dir, "README.md"))


__all__ = [
    "SlimSpecTrainer",
    "SlimSpecTTTModel",
    "build_drafter",
    "initialise_head",
    "activation_aware_factors",
    "target_hidden_second_moment",
    "check_output_dir",
    "load_target_for_training",
]
