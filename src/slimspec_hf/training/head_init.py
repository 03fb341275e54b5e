# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""A drafter to train: building it for a target, initialising its head, freezing its backbone, LoRA on it."""

import copy
import logging
from typing import Any

import torch
from torch import nn

from ..configuration_slimspec import SlimSpecDrafterConfig
from ..modeling_slimspec import LowRankHead, SlimSpecDrafterForCausalLM, TargetHead, TrimmedHead
from .config import SlimSpecConfig
from .data import SlimSpecDataCollator


# The drafter's backbone layers LoRA adapts: the decoder layer's projections and `fc`, which fuses the target's
# three layers into the drafter's width.
logger = logging.getLogger(__name__)

LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "fc")


def build_drafter(target: nn.Module, args: SlimSpecConfig) -> SlimSpecDrafterForCausalLM:
    """A new drafter for `target`, shaped by `args` (`head_type`, `head_rank`, ...), in fp32 (master weights)."""
    overrides: dict[str, Any] = {"head_type": args.head_type, "ttt_steps": args.ttt_steps}
    if args.head_rank is not None:
        overrides["head_rank"] = args.head_rank
    if args.draft_vocab_size is not None:
        overrides["draft_vocab_size"] = args.draft_vocab_size
    if args.target_layer_ids is not None:
        overrides["target_layer_ids"] = list(args.target_layer_ids)
    overrides.update(fc_norm=args.fc_norm, norm_before_fc=args.norm_before_fc, norm_output=args.norm_output)
    config = SlimSpecDrafterConfig.from_target_config(target.config, **overrides)
    torch.manual_seed(args.seed)
    dtype = next(target.parameters()).dtype
    drafter = SlimSpecDrafterForCausalLM(config).to(dtype=torch.float32 if dtype != torch.float32 else dtype)
    if args.num_assistant_tokens is not None:  # a decoding default: the drafter's generation_config holds it
        drafter.generation_config.num_assistant_tokens = int(args.num_assistant_tokens)
    return drafter


@torch.no_grad()
def initialise_layer_from_target(drafter: SlimSpecDrafterForCausalLM, target: nn.Module, strict: bool = True) -> bool:
    """Starts the drafter's decoder layer as the target's last one (`layer_init="target_last_layer"`); returns
    whether it did.

    The layer reads [norm(embedding) ; norm(hidden)] (2d wide): q/k/v get the target's projections on the hidden
    half and zeros on the embedding half; o_proj, the MLP, the post-attention norm and the hidden-state norm (the
    target layer's input norm) are copied, and the drafter's final norm is the target's. `fc` passes the deepest of
    the three fused target layers through unchanged (identity on its block, zeros elsewhere), so that at step 0 the
    layer starts on the target's own residual stream. Where the target's last layer does not fit (another width or
    head layout, a MoE MLP), raises a ValueError, or with `strict=False` (`layer_init="auto"`) keeps the random
    initialisation and logs why.
    """
    try:
        _copy_last_layer(drafter, target)
    except (ValueError, AttributeError) as error:
        if strict:
            raise ValueError(f"`layer_init='target_last_layer'`: {error}; use layer_init='random'.") from None
        logger.info(
            "layer_init='auto': the target's last layer does not fit (%s); the drafter's layer starts random as a "
            "pass-through of the target's deepest fused layer",
            error,
        )
        initialise_layer_as_passthrough(drafter)
        return False
    return True


@torch.no_grad()
def initialise_layer_as_passthrough(drafter: SlimSpecDrafterForCausalLM) -> None:
    """Starts a random decoder layer as the identity on the target's residual stream: `fc` passes the deepest fused
    target layer through and the layer's two residual branches (o_proj, the MLP's down_proj) start at zero, so that at
    step 0 the head reads the target's own deep state (a logit-lens start) instead of a random one. What `auto` does
    where the target's last layer cannot be copied (Gemma-3's extra norms, Qwen3's q/k norms, MoE MLPs): with a target
    whose final norm scales some channels by hundreds (Gemma-3-270M), a random start gives confident nonsense."""
    if drafter.config.target_hidden_size != drafter.config.hidden_size:
        return  # no block of `fc` to pass through
    _pass_deepest_layer_through(drafter)
    drafter.layer.self_attn.o_proj.weight.zero_()
    drafter.layer.mlp.down_proj.weight.zero_()


def _pass_deepest_layer_through(drafter: SlimSpecDrafterForCausalLM) -> None:
    """`fc` as the identity on the deepest fused target layer's block, zero elsewhere."""
    config = drafter.config
    width = config.hidden_size
    deepest = max(range(len(config.target_layer_ids)), key=lambda i: config.target_layer_ids[i])
    drafter.fc.weight.zero_()
    drafter.fc.weight[:, deepest * width : (deepest + 1) * width].copy_(torch.eye(width))
    if drafter.fc.bias is not None:
        drafter.fc.bias.zero_()


# The parameters of a Llama-shaped decoder layer: the ones `_copy_last_layer` has a counterpart for.
_COPIED = {f"self_attn.{n}.{p}" for n in ("q_proj", "k_proj", "v_proj", "o_proj") for p in ("weight", "bias")}
_COPIED |= {f"mlp.{n}.weight" for n in ("gate_proj", "up_proj", "down_proj")}
_COPIED |= {"input_layernorm.weight", "post_attention_layernorm.weight"}


def _copy_last_layer(drafter: SlimSpecDrafterForCausalLM, target: nn.Module) -> None:
    backbone = getattr(target, target.base_model_prefix, target)
    last = backbone.layers[-1]
    config = drafter.config
    extra = sorted(name for name, _ in last.named_parameters() if name not in _COPIED)
    if extra:  # q/k norms (Qwen3), extra feed-forward norms (Gemma-3), experts: not a layer the drafter reproduces
        raise ValueError(f"the target's last layer has {extra}, which the drafter's layer has no counterpart for")
    text = target.config.get_text_config()
    activation = getattr(text, "hidden_act", None) or getattr(text, "hidden_activation", None)
    if activation != config.hidden_act:
        raise ValueError(f"the target's MLP activation ({activation}) is not the drafter's ({config.hidden_act})")
    width = config.hidden_size
    if config.target_hidden_size != width:
        raise ValueError(f"the drafter ({width}) is not as wide as the target ({config.target_hidden_size})")
    layer, attn, source = drafter.layer, drafter.layer.self_attn, last.self_attn
    pairs = [
        (attn.o_proj, source.o_proj),
        (layer.mlp.gate_proj, last.mlp.gate_proj),
        (layer.mlp.up_proj, last.mlp.up_proj),
        (layer.mlp.down_proj, last.mlp.down_proj),
        (layer.hidden_norm, last.input_layernorm),
        (layer.post_attention_layernorm, last.post_attention_layernorm),
        (drafter.norm, backbone.norm),
    ]
    for name in ("q_proj", "k_proj", "v_proj"):  # check every shape before writing anything
        mine, theirs = getattr(attn, name), getattr(source, name)
        if mine.weight.shape != (theirs.weight.shape[0], 2 * theirs.weight.shape[1]):
            raise ValueError(
                f"the drafter's {name} {tuple(mine.weight.shape)} does not take the target's "
                f"{tuple(theirs.weight.shape)}"
            )
    for mine, theirs in pairs:
        for name, param in mine.named_parameters(recurse=False):
            if param.shape != getattr(theirs, name).shape:
                raise ValueError(
                    f"the drafter's {type(mine).__name__}.{name} {tuple(param.shape)} differs from the target's "
                    f"{tuple(getattr(theirs, name).shape)}"
                )
    for name in ("q_proj", "k_proj", "v_proj"):
        mine, theirs = getattr(attn, name), getattr(source, name)
        mine.weight.zero_()
        mine.weight[:, width:].copy_(theirs.weight)
        if mine.bias is not None and theirs.bias is not None:
            mine.bias.copy_(theirs.bias)
    for mine, theirs in pairs:
        for name, param in mine.named_parameters(recurse=False):
            param.copy_(getattr(theirs, name).to(param.dtype))
    _pass_deepest_layer_through(drafter)


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


def second_moment(hidden_states: torch.Tensor) -> torch.Tensor:
    """C = E[h hᵀ] (fp64, d×d) of hidden states (…, d)."""
    h = hidden_states.detach().reshape(-1, hidden_states.shape[-1]).double()
    return h.T @ h / h.shape[0]


def activation_aware_factors(
    weight: torch.Tensor, moment: torch.Tensor, rank: int, token_weights: torch.Tensor | None = None, eps: float = 1e-8
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank-r (down r×d, up V×r) minimising E‖D·(W − up·down)·h‖² for h with second moment C (`moment`, see
    [`second_moment`]): the SVD of D·W·C^½, mapped back by C^-½. D = diag(`token_weights`), the identity when None;
    with `token_weights` the head's rows are first centred (W − 1·w̄ᵀ): softmax and top-1 ignore a shift shared by
    all logits, so no rank is spent on it.

    All in fp64, SVD included: C is often badly conditioned (final hidden states are strongly anisotropic) and C^-½
    amplifies the error of its small eigenvalues, which fp32 loses; eigenvalues are floored at `eps` times the
    largest. Returns the factors in `weight`'s dtype.
    """
    w = weight.detach().double()
    if token_weights is not None:
        if token_weights.shape != (w.shape[0],):
            raise ValueError(f"`token_weights` must have shape ({w.shape[0]},), got {tuple(token_weights.shape)}.")
        w = (w - w.mean(0, keepdim=True)) * token_weights.double()[:, None]
    if not 0 < rank < min(w.shape):
        raise ValueError(f"`rank` ({rank}) must satisfy 0 < rank < min(V, d) = {min(w.shape)}.")
    eigvals, eigvecs = torch.linalg.eigh(moment.double())
    eigvals = eigvals.clamp(min=float(eigvals.max()) * eps)
    root = (eigvecs * eigvals.sqrt()) @ eigvecs.T  # C^½, (d, d)
    inv_root = (eigvecs * eigvals.rsqrt()) @ eigvecs.T  # C^-½
    u, s, vh = torch.linalg.svd(w @ root, full_matrices=False)  # (V, d), (d,), (d, d)
    scale = s[:rank].sqrt()  # singular values split evenly between the factors
    up = u[:, :rank] * scale  # (V, r)
    if token_weights is not None:
        up = up / token_weights.double()[:, None]
    down = (scale[:, None] * vh[:rank]) @ inv_root  # (r, d)
    return down.to(weight.dtype), up.to(weight.dtype)


def response_token_counts(dataset, vocab_size: int) -> torch.Tensor:
    """How often each token id occurs among the response tokens (`loss_mask`) of a tokenised dataset, (vocab_size,)."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for ids, mask in zip(dataset["input_ids"], dataset["loss_mask"]):
        ids = torch.as_tensor(ids)
        counts += torch.bincount(ids[torch.as_tensor(mask).bool()], minlength=vocab_size)
    return counts


def most_frequent_tokens(counts: torch.Tensor, count: int) -> torch.Tensor:
    """The `count` most frequent token ids of `counts` (`response_token_counts`), most frequent first (ties: the
    lower id): the kept vocabulary of a trimmed head (VocabTrim / FR-Spec)."""
    return torch.argsort(counts, descending=True, stable=True)[:count]


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
        counts = response_token_counts(train_dataset, drafter.config.vocab_size)
        token_ids = most_frequent_tokens(counts, head.token_ids.numel())
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
            drafter.norm.weight.copy_(effective_norm_scale(target_norm))


@torch.no_grad()
def effective_norm_scale(norm: nn.Module) -> torch.Tensor:
    """The per-channel scale an RMS norm applies, whatever its parametrisation: `w` (Llama) or `1 + w` (Gemma, whose
    stored weights are offsets), read from the module itself as its output on a vector of ones (RMS 1), in fp32."""
    ones = torch.ones(1, norm.weight.shape[-1], dtype=norm.weight.dtype, device=norm.weight.device)
    eps = getattr(norm, "eps", getattr(norm, "variance_epsilon", 0.0)) or 0.0
    return norm(ones)[0].float() * (1.0 + eps) ** 0.5  # undo the eps in 1 / sqrt(1 + eps)


def freeze_backbone(drafter: SlimSpecDrafterForCausalLM) -> SlimSpecDrafterForCausalLM:
    """Leaves only the LM head trainable (head-only fine-tunes, e.g. of converted drafters)."""
    for name, param in drafter.named_parameters():
        param.requires_grad_(name.startswith("lm_head."))
    return drafter


def apply_lora(drafter: SlimSpecDrafterForCausalLM, peft_config):
    """LoRA on the drafter's backbone, the LM head trained in full (PEFT's `modules_to_save`): the package's LoRA helper
    of the package, for training and for head fine-tunes of converted drafters alike.

    `peft_config.target_modules` defaults (None or "all-linear") to [`LORA_TARGET_MODULES`], the layer's projections
    and the `fc` that fuses the target's three layers; modules of the head are refused. The caller's config is
    never modified. Returns the `PeftModel`.
    """
    try:
        from peft import PeftConfig, get_peft_model
    except ImportError as error:
        raise ImportError("LoRA needs PEFT, a dependency of slimspec-hf: pip install peft") from error
    if not isinstance(peft_config, PeftConfig):
        raise TypeError(
            f"`peft_config` must be a `peft.PeftConfig` (e.g. a LoraConfig), got {type(peft_config).__name__}."
        )
    peft_config = copy.deepcopy(peft_config)  # never mutate the caller's config
    if peft_config.target_modules in (None, "all-linear"):
        peft_config.target_modules = list(LORA_TARGET_MODULES)
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
    if drafter.config.head_type != "target":
        peft_config.modules_to_save = sorted(set(peft_config.modules_to_save or []) | {"lm_head"})
    return get_peft_model(drafter, peft_config)


def prepare_head_finetune(drafter: SlimSpecDrafterForCausalLM, lora_config=None):
    """Readies a (e.g. converted) drafter for recovering acceptance: only the head trains, plus LoRA adapters on
    the backbone when `lora_config` is given ([`apply_lora`]; the `PeftModel` is returned), else the backbone is
    frozen in place ([`freeze_backbone`]) and the drafter is returned."""
    if lora_config is None:
        return freeze_backbone(drafter)
    return apply_lora(drafter, lora_config)


__all__ = [
    "LORA_TARGET_MODULES",
    "build_drafter",
    "target_hidden_second_moment",
    "second_moment",
    "activation_aware_factors",
    "initialise_head",
    "most_frequent_tokens",
    "response_token_counts",
    "initialise_layer_from_target",
    "freeze_backbone",
    "apply_lora",
    "prepare_head_finetune",
]
