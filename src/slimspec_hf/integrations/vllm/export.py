# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""`slimspec export --to vllm`: a SlimSpec drafter as an EAGLE-3 checkpoint that keeps the low-rank head.

The folder is what `speculative_config={"method": "eagle3", "model": DIR}` takes when the slimspec vLLM plugin is
installed. It is a plain (non-speculators) EAGLE-3 config, because vLLM's speculators reader rewrites
`architectures` to its own class, while a plain config keeps a name that starts with "Eagle3":

- `config.json`: the drafter's one-layer Llama config, `architectures: ["Eagle3SlimSpecLlamaForCausalLM"]`,
  `head_rank`, `draft_vocab_size` = `vocab_size` (no d2t/t2d), `eagle_aux_hidden_state_layer_ids` (inputs of
  target layers, vLLM's reading and SlimSpec's), `norm_before_residual`, the EAGLE-3.1 flags (`fc_norm`,
  `norm_before_fc`, `norm_output`), `target_hidden_size`.
- `model.safetensors`: `fc.weight`, `fc_norm.{i}.weight` / `input_norm.weight` (EAGLE-3.1), `layers.0.*`,
  `norm.weight`, `lm_head.down.weight` (r, d), `lm_head.up.weight` (V, r).
"""

import os
from pathlib import Path

import torch

from ...interop.export import backbone_tensors, load_exportable, speculators_config, write_export
from ...modeling_slimspec import LowRankHead, SlimSpecDrafterForCausalLM
from . import ARCHITECTURE


def vllm_state_dict(drafter: SlimSpecDrafterForCausalLM) -> dict[str, torch.Tensor]:
    """Tensors of the plugin's checkpoint: the speculators backbone names and the two head factors."""
    head = drafter.lm_head
    if not isinstance(head, LowRankHead):
        raise ValueError(
            f"`slimspec export --to vllm` keeps a low-rank head's two factors, but this drafter's head is "
            f"{drafter.config.head_type!r}; export it with --to speculators (a dense head vLLM serves as is)."
        )
    # The backbone exactly as the speculators export writes it, then the head's two factors (never merged).
    tensors = backbone_tensors(drafter)
    tensors["lm_head.down.weight"] = head.down.weight.detach().cpu().contiguous()  # (r, d)
    tensors["lm_head.up.weight"] = head.up.weight.detach().cpu().contiguous()  # (V, r), row-major on disk
    return tensors


def vllm_config(drafter: SlimSpecDrafterForCausalLM, dtype: torch.dtype, verifier_name_or_path=None) -> dict:
    cfg = drafter.config
    spec = speculators_config(drafter, cfg.vocab_size, dtype, verifier_name_or_path)
    config = dict(spec["transformer_layer_config"])
    config.update(
        architectures=[ARCHITECTURE],
        head_rank=int(cfg.head_rank),
        draft_vocab_size=int(cfg.vocab_size),
        eagle_aux_hidden_state_layer_ids=list(spec["eagle_aux_hidden_state_layer_ids"]),
        norm_before_residual=bool(cfg.norm_before_residual),
        # EAGLE-3.1, read by vLLM's llama_eagle3 from the top level (norms in `fc_norm.{i}` / `input_norm`)
        norm_before_fc=bool(cfg.norm_before_fc),
        fc_norm=bool(cfg.fc_norm),
        norm_output=bool(cfg.norm_output),
        bos_token_id=cfg.bos_token_id,
        eos_token_id=cfg.eos_token_id,
        # kept for the record: which target the drafter was trained for, and the shipped draft length
        slimspec={
            "verifier": spec["speculators_config"]["verifier"]["name_or_path"],
            # vLLM's name for it: the speculators proposal length, i.e. the drafter's `ttt_steps`
            "num_speculative_tokens": spec["speculators_config"]["proposal_methods"][0]["speculative_tokens"],
        },
    )
    if spec["target_hidden_size"] is not None:
        config["target_hidden_size"] = spec["target_hidden_size"]
    return config


def export_vllm(
    drafter: SlimSpecDrafterForCausalLM | str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    dtype: torch.dtype | None = None,
    verifier_name_or_path: str | None = None,
) -> Path:
    """Writes `drafter` (or the folder it names) for the slimspec vLLM plugin; `dtype` defaults to the drafter's."""
    drafter = load_exportable(drafter)
    dtype = dtype or drafter.fc.weight.dtype
    tensors = vllm_state_dict(drafter)
    return write_export(out_dir, tensors, vllm_config(drafter, dtype, verifier_name_or_path), dtype)


__all__ = ["export_vllm", "vllm_config", "vllm_state_dict"]
