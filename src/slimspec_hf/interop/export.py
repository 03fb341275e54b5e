# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""SlimSpec drafters → speculators-format EAGLE-3 checkpoints (`slimspec export --to speculators`).

The checkpoint carries a merged, full-vocabulary head that vLLM serves; the conventions of the format are tabled in
[`~interop.convert`], the way in.
"""

import logging
import os
from pathlib import Path

import torch

from ..modeling_slimspec import FullHead, LowRankHead, SlimSpecDrafterForCausalLM, TargetHead, TrimmedHead
from ..utils import atomic_path, atomic_write_json


logger = logging.getLogger(__name__)

EXPORT_FORMATS = ("speculators",)


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
    tensors = {"fc.weight": drafter.fc.weight, "norm.weight": drafter.norm.weight}
    for name, value in drafter.layer.state_dict().items():
        tensors["layers.0." + name] = value
    tensors["lm_head.weight"] = weight
    draft_vocab = weight.shape[0]
    tensors["d2t"] = (token_ids - torch.arange(draft_vocab)).long()  # zeros for a full-vocabulary head
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[token_ids] = True  # all true for a full-vocabulary head
    tensors["t2d"] = t2d
    return {k: v.detach().cpu().contiguous() for k, v in tensors.items()}, draft_vocab


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
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": int(cfg.num_speculative_tokens)}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier, "architectures": []},
        },
        "transformer_layer_config": layer_config,
        "draft_vocab_size": int(draft_vocab_size),
        # Always written: vLLM reads a missing value as true, the speculators library as false.
        "norm_before_residual": bool(cfg.norm_before_residual),
        "norm_before_fc": False,
        "fc_norm": False,
        "norm_output": False,
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

    The low-rank head is merged into a dense V×d head (draft_vocab_size = V, `d2t` zeros, `t2d` all true): vLLM
    serves it as a plain EAGLE-3 drafter, without the low-rank speed-up. `dtype` defaults to the drafter's.
    """
    from safetensors.torch import save_file

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
    dtype = dtype or drafter.fc.weight.dtype
    tensors, draft_vocab = speculators_state_dict(drafter)
    tensors = {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}
    config = speculators_config(drafter, draft_vocab, dtype, verifier_name_or_path)
    if config["speculators_config"]["verifier"]["name_or_path"] is None:
        logger.warning("The drafter names no target (`target_model_name_or_path`); pass `verifier_name_or_path`.")
    out = Path(out_dir)
    with atomic_path(out / "model.safetensors") as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    atomic_write_json(out / "config.json", config, sort_keys=True)
    return out


__all__ = ["EXPORT_FORMATS", "speculators_state_dict", "speculators_config", "export_speculators"]
