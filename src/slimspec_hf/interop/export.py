# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""SlimSpec drafters → EAGLE-3 checkpoints for serving engines (`slimspec export --to FORMAT`).

- `speculators`: merged dense head, speculators layout: any engine reading speculators EAGLE-3 (vLLM).
- `eagle3`: SafeAILab layout (`midlayer.*`), merged head: SGLang, SpecForge, OpenVINO GenAI.
- `vllm`: the two head factors kept, for the package's vLLM plugin (`integrations/vllm`).
- `torchspec`: the SafeAILab layout with the two head factors kept, as TorchSpec writes its low-rank drafters.

EAGLE-3.1 flags (`fc_norm`, `norm_before_fc`, `norm_output`) are written with their norms where the format has them
(speculators and vllm: all three; eagle3 and torchspec: SpecForge's `fc_norm` and `norm_output`).

The conventions of the formats are tabled in [`~interop.convert`], the way in.
"""

import logging
import os
from pathlib import Path

import torch

from ..modeling_slimspec import FullHead, LowRankHead, SlimSpecDrafterForCausalLM, TargetHead, TrimmedHead
from ..utils import atomic_path, atomic_write_json


logger = logging.getLogger(__name__)

EXPORT_FORMATS = ("speculators", "eagle3", "vllm", "torchspec")
# The proposal length written for a drafter that records no training depth (`ttt_steps`), e.g. an untrained one.
DEFAULT_SPECULATIVE_TOKENS = 3


@torch.no_grad()
def speculators_state_dict(drafter: SlimSpecDrafterForCausalLM) -> tuple[dict[str, torch.Tensor], int]:
    """Speculators-named tensors of a drafter and the exported draft_vocab_size.

    Low-rank heads are merged (W_up·W_down, fp32) into one V×d head: speculators and vLLM run a dense head.
    Trimmed heads are written with rows in increasing token order (SafeAILab's `t2d` masking assumes it).
    """
    head = drafter.lm_head
    vocab_size = drafter.config.vocab_size
    if isinstance(head, LowRankHead):
        weight, token_ids = head.merged_weight(), torch.arange(vocab_size)
    elif isinstance(head, FullHead):
        weight, token_ids = head.weight.detach().float(), torch.arange(vocab_size)
    elif isinstance(head, TrimmedHead):
        if not head.has_token_set:
            raise ValueError("The trimmed head has no token set (`lm_head.token_ids` is unset); nothing to export.")
        order = torch.argsort(head.token_ids.cpu())
        weight, token_ids = head.weight.detach().float().cpu()[order], head.token_ids.cpu()[order]
    elif isinstance(head, TargetHead):
        raise ValueError(
            "head_type='target' drafters borrow the target's LM head and store none; export needs a drafter with "
            "its own head (low_rank, full or trimmed)."
        )
    else:
        raise TypeError(f"Cannot export a head of type {type(head).__name__}.")
    tensors = {**backbone_tensors(drafter), "lm_head.weight": weight}
    draft_vocab = weight.shape[0]
    # vLLM creates `draft_id_to_target_id` only when draft_vocab_size < vocab_size (and refuses a `d2t` otherwise);
    # the speculators library reads none for a full-vocabulary head either.
    if draft_vocab < vocab_size:
        tensors.update(token_maps(token_ids, vocab_size))
    return {k: v.detach().cpu().contiguous() for k, v in tensors.items()}, draft_vocab


def backbone_tensors(drafter: SlimSpecDrafterForCausalLM) -> dict[str, torch.Tensor]:
    """Everything but the head, speculators-named: `fc`, the norms EAGLE-3.1 puts in front of it (as speculators,
    vLLM, SpecForge and TorchSpec name them), `layers.0.*`, `norm` (detached, on the CPU, contiguous)."""
    tensors = {"fc.weight": drafter.fc.weight, "norm.weight": drafter.norm.weight}
    tensors.update({"layers.0." + name: value for name, value in drafter.layer.state_dict().items()})
    if drafter.config.fc_norm:
        tensors.update({f"fc_norm.{i}.weight": norm.weight for i, norm in enumerate(drafter.fc_norm)})
    if drafter.config.norm_before_fc:
        tensors["input_norm.weight"] = drafter.input_norm.weight
    return {k: v.detach().cpu().contiguous() for k, v in tensors.items()}


def token_maps(token_ids: torch.Tensor, vocab_size: int) -> dict[str, torch.Tensor]:
    """EAGLE-3's `d2t` (target id = draft id + d2t[draft id]) and `t2d` (draft-token mask) for head rows `token_ids`."""
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[token_ids] = True
    return {"d2t": (token_ids - torch.arange(token_ids.numel())).long(), "t2d": t2d}


def speculators_config(
    drafter: SlimSpecDrafterForCausalLM,
    draft_vocab_size: int,
    dtype: torch.dtype,
    verifier_name_or_path: str | None = None,
) -> dict:
    """config.json of the speculators EAGLE-3 format, readable by vLLM (`--speculative-config '{"model": DIR}'`)."""
    cfg = drafter.config
    rope = dict(cfg.rope_parameters or {"rope_type": "default", "rope_theta": 10000.0})
    rope_theta = rope.get("rope_theta", 10000.0)
    rope_scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
    if rope_scaling.get("rope_type", "default") == "default":
        rope_scaling = None
    dtype_name = str(dtype).replace("torch.", "")
    layer_config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": 1,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": cfg.hidden_act,
        "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_position_embeddings,
        "attention_bias": bool(cfg.attention_bias),
        "mlp_bias": False,
        "tie_word_embeddings": False,
        # transformers 4.x reads rope_theta/rope_scaling, 5.x rope_parameters; both describe the same RoPE.
        "rope_theta": rope_theta,
        "rope_scaling": rope_scaling,
        "rope_parameters": rope,
        "torch_dtype": dtype_name,
    }
    verifier = verifier_name_or_path or cfg.target_model_name_or_path
    proposed = int(cfg.ttt_steps or DEFAULT_SPECULATIVE_TOKENS)  # the drafter's training depth
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": proposed}],  # speculators' key
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier, "architectures": []},
        },
        "transformer_layer_config": layer_config,
        "draft_vocab_size": int(draft_vocab_size),
        # Always written: vLLM reads a missing value as true, the speculators library as false.
        "norm_before_residual": bool(cfg.norm_before_residual),
        "norm_before_fc": bool(cfg.norm_before_fc),
        "fc_norm": bool(cfg.fc_norm),
        "norm_output": bool(cfg.norm_output),
        "target_hidden_size": cfg.target_hidden_size if cfg.target_hidden_size != cfg.hidden_size else None,
        # SlimSpec ids index hidden_states (input of layer i), exactly how vLLM reads these ids.
        "eagle_aux_hidden_state_layer_ids": list(cfg.target_layer_ids),
        "torch_dtype": dtype_name,
    }


def export_speculators(
    drafter: SlimSpecDrafterForCausalLM | str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    dtype: torch.dtype | None = None,
    verifier_name_or_path: str | None = None,
) -> Path:
    """Writes `drafter` (or the SlimSpec drafter folder it names) as a speculators EAGLE-3 checkpoint.

    The low-rank head is merged into a dense V×d head (draft_vocab_size = V, no `d2t`/`t2d`): vLLM serves it as a
    plain EAGLE-3 drafter, without the low-rank speed-up (`slimspec export --to vllm` keeps the factors for the
    package's vLLM plugin). `dtype` defaults to the drafter's.
    """
    drafter = load_exportable(drafter)
    dtype = dtype or drafter.fc.weight.dtype
    tensors, draft_vocab = speculators_state_dict(drafter)
    config = speculators_config(drafter, draft_vocab, dtype, verifier_name_or_path)
    if config["speculators_config"]["verifier"]["name_or_path"] is None:
        logger.warning("The drafter names no target (`target_model_name_or_path`); pass `verifier_name_or_path`.")
    return write_export(out_dir, tensors, config, dtype)


def load_exportable(drafter) -> SlimSpecDrafterForCausalLM:
    """The drafter (loaded if a folder is given), checked for what every export format needs."""
    if not isinstance(drafter, SlimSpecDrafterForCausalLM):
        drafter = SlimSpecDrafterForCausalLM.from_pretrained(drafter)
    if drafter.config.target_layer_ids is None:
        raise ValueError("The drafter config has no `target_layer_ids`; set them before exporting.")
    num_layers = drafter.config.target_num_hidden_layers
    if num_layers is not None and num_layers in drafter.config.target_layer_ids:
        raise ValueError(
            f"`target_layer_ids` {drafter.config.target_layer_ids} includes {num_layers}: HF's hidden_states[{num_layers}] "
            "is post-norm, vLLM's layer id of the same number is the pre-norm output, so vLLM would feed this drafter "
            "other features."
        )
    return drafter


def write_export(out_dir, tensors: dict[str, torch.Tensor], config: dict, dtype: torch.dtype) -> Path:
    """Writes `model.safetensors` (floating tensors cast to `dtype`) and `config.json` into `out_dir`, atomically."""
    from safetensors.torch import save_file

    tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}
    out = Path(out_dir)
    with atomic_path(out / "model.safetensors") as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    atomic_write_json(out / "config.json", config, sort_keys=True)
    return out


def export_eagle3(
    drafter: SlimSpecDrafterForCausalLM | str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    dtype: torch.dtype | None = None,
) -> Path:
    """Writes `drafter` as a SafeAILab EAGLE-3 checkpoint (`LlamaForCausalLMEagle3`, `midlayer.*`), the layout
    SGLang, SpecForge and OpenVINO GenAI read. The head is merged into a dense one (as for speculators); `d2t`
    (zeros) and `t2d` (all true) are always written, since SafeAILab's model registers both buffers.

    SafeAILab stores no layer ids: every reader assumes the inputs of target layers {2, L//2, L-3}. Other ids are
    written as SpecForge/SGLang's `eagle_config.eagle_aux_hidden_state_layer_ids` (layer outputs: SlimSpec id − 1),
    which vLLM reads as layer inputs — so such a drafter is only right in SGLang (a warning says so). A residual
    after `hidden_norm` (`norm_before_residual`) has no SafeAILab counterpart and is refused. vLLM refuses a `d2t`
    for a full-vocabulary head: serve vLLM the `speculators` (or `vllm`) export.
    """
    drafter = load_exportable(drafter)
    dtype = dtype or drafter.fc.weight.dtype
    tensors, draft_vocab = speculators_state_dict(drafter)
    config = safeailab_config(drafter, draft_vocab, dtype)  # refuses what the layout cannot hold, before writing
    if "d2t" not in tensors:
        tensors.update(token_maps(torch.arange(draft_vocab), drafter.config.vocab_size))
    return write_export(out_dir, native_names(tensors), config, dtype)


def native_names(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """SafeAILab's (SpecForge's, TorchSpec's) names for the decoder layer: `midlayer.*` instead of `layers.0.*`."""
    return {("midlayer." + k[len("layers.0.") :] if k.startswith("layers.0.") else k): v for k, v in tensors.items()}


def safeailab_config(drafter: SlimSpecDrafterForCausalLM, draft_vocab: int, dtype: torch.dtype) -> dict:
    """config.json of the SafeAILab layout (`LlamaForCausalLMEagle3`), with SpecForge's EAGLE-3.1 flags and layer
    ids; what SafeAILab's layer cannot do is refused."""
    cfg = drafter.config
    if cfg.norm_before_residual:
        raise ValueError(
            "`norm_before_residual` is true, but SafeAILab's EAGLE-3 layer always adds the un-normed fused state; "
            "export this drafter with --to speculators (or --to vllm) instead."
        )
    if cfg.norm_before_fc:
        raise ValueError(
            "`norm_before_fc` is true, but SpecForge, SGLang and TorchSpec have no single norm over the concatenated "
            "target states (only `fc_norm`, one per layer); export this drafter with --to speculators or --to vllm."
        )
    if 0 in cfg.target_layer_ids:
        raise ValueError(
            f"`target_layer_ids` {cfg.target_layer_ids} includes 0 (the embeddings), which SGLang's layer-output ids "
            "cannot name; export with --to speculators instead."
        )
    layer = speculators_config(drafter, draft_vocab, dtype)["transformer_layer_config"]
    config = {
        **layer,
        "architectures": ["LlamaForCausalLMEagle3"],
        "draft_vocab_size": int(draft_vocab),
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": cfg.eos_token_id,
        "pad_token_id": cfg.pad_token_id,
    }
    if cfg.fc_norm or cfg.norm_output:  # EAGLE-3.1 as SpecForge and TorchSpec write it (readers before 3.1 refuse)
        config.update(fc_norm=bool(cfg.fc_norm), norm_output=bool(cfg.norm_output))
    num_layers = cfg.target_num_hidden_layers
    if num_layers is None or sorted(cfg.target_layer_ids) != sorted({2, num_layers // 2, num_layers - 3}):
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [int(i) - 1 for i in cfg.target_layer_ids]}
        logger.warning(
            "`target_layer_ids` %s are not EAGLE-3's default {2, L//2, L-3}: written as SGLang's layer-output ids %s, "
            "which vLLM would read as layer inputs; serve vLLM the speculators export.",
            list(cfg.target_layer_ids),
            config["eagle_config"]["eagle_aux_hidden_state_layer_ids"],
        )
    if cfg.target_hidden_size != cfg.hidden_size:
        config["target_hidden_size"] = cfg.target_hidden_size
    return config


def export_torchspec(
    drafter: SlimSpecDrafterForCausalLM | str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    dtype: torch.dtype | None = None,
) -> Path:
    """Writes a low-rank `drafter` as TorchSpec writes its low-rank drafters (`tools/convert_to_hf.py`): the
    SafeAILab layout (`LlamaForCausalLMEagle3`, `midlayer.*`) with `lm_head_rank_divisor` = d / r and the two factors
    `lm_head.down.weight` (r, d) and `lm_head.up.weight` (V, r) kept, `draft_vocab_size` = V and no token maps.
    TorchSpec derives r = d // divisor, so r must divide d."""
    drafter = load_exportable(drafter)
    cfg, head = drafter.config, drafter.lm_head
    if not isinstance(head, LowRankHead):
        raise ValueError(
            f"TorchSpec's factored head is low-rank; this drafter's head is {cfg.head_type!r}. Export a dense head with "
            "--to eagle3 (the same layout, `lm_head.weight`)."
        )
    divisor = cfg.hidden_size // cfg.head_rank
    if cfg.hidden_size % cfg.head_rank or divisor < 2:
        raise ValueError(
            f"TorchSpec stores the head's rank as `lm_head_rank_divisor` (r = hidden_size // divisor), which cannot "
            f"give r = {cfg.head_rank} for hidden_size {cfg.hidden_size}; export with --to vllm or --to speculators."
        )
    dtype = dtype or drafter.fc.weight.dtype
    factors = {"lm_head.down.weight": head.down.weight, "lm_head.up.weight": head.up.weight}
    tensors = {
        **native_names(backbone_tensors(drafter)),
        **{k: v.detach().cpu().contiguous() for k, v in factors.items()},
    }
    config = safeailab_config(drafter, cfg.vocab_size, dtype)
    config.update(lm_head_rank_divisor=divisor, fc_norm=bool(cfg.fc_norm), norm_output=bool(cfg.norm_output))
    return write_export(out_dir, tensors, config, dtype)


__all__ = [
    "DEFAULT_SPECULATIVE_TOKENS",
    "EXPORT_FORMATS",
    "backbone_tensors",
    "speculators_state_dict",
    "speculators_config",
    "token_maps",
    "load_exportable",
    "write_export",
    "export_speculators",
    "export_eagle3",
    "export_torchspec",
]
