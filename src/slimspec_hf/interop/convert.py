# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""EAGLE-3 checkpoints ⇄ SlimSpec drafters.

`slimspec convert` reads an existing EAGLE-3 or EAGLE-3.1 drafter — SafeAILab EAGLE / SpecForge
(`LlamaForCausalLMEagle3`, weights under `midlayer.*`), vLLM speculators (`speculators_model_type: "eagle3"`, weights
under `layers.0.*`) or TorchSpec (the SafeAILab layout with a low-rank head, `lm_head_rank_divisor`) — and turns it
into a SlimSpec drafter: same backbone, its draft-vocabulary head expanded to the full vocabulary and factored to
rank r by truncated SVD (a TorchSpec head's two factors are taken as they are). The way back out, `slimspec export --to speculators`, is [`~interop.export`].

Conventions, and where the formats differ (every row is checked below; what cannot be mapped is refused):

| convention | SafeAILab EAGLE | vLLM speculators | SlimSpec |
|---|---|---|---|
| target layers | not stored: inputs of decoder layers {2, L//2, L-3}; SpecForge/SGLang's `eagle_config.eagle_aux_hidden_state_layer_ids` name layer *outputs* (SGLang captures layer id+1) | `eagle_aux_hidden_state_layer_ids`: inputs of decoder layers (vLLM appends `hidden_states + residual` before layer i); id L is the pre-norm last output | indices into HF `outputs.hidden_states` (0 = embeddings, i = input of layer i; HF's index L is post-norm) |
| attention input | `cat([norm(emb), norm(h)])` | same | same |
| residual | the fused state h | h if `norm_before_residual` is false; `hidden_norm(h)` if true (vLLM reads a missing value as true) | h, or `hidden_norm(h)` with `norm_before_residual` |
| fc input | raw `cat(h_a, h_b, h_c)`; SpecForge/TorchSpec's `fc_norm`: an RMSNorm per layer | `norm_before_fc` (one RMSNorm over the concatenation, `input_norm`) / `fc_norm` (one per layer, `fc_norm.{i}`) | the same flags and weight names |
| state fed back | the layer's pre-norm output; post-norm with SpecForge/TorchSpec's `norm_output` | same, unless `norm_output` (post-norm) | the same flag |
| embedding | the target's, not stored | optional `embed_tokens.weight` | the target's, never stored |
| head | K draft-vocab rows, `d2t` offsets (target id = draft id + d2t[draft id]), `t2d` mask; TorchSpec: `lm_head.down` (r, d), `lm_head.up` (V, r), r = d // `lm_head_rank_divisor` | same; `d2t`/`t2d` absent when K = V | full vocabulary (low-rank, full or trimmed) |
"""

import dataclasses
import json
import logging
import os
from pathlib import Path

import torch

from ..configuration_slimspec import HEAD_TYPES, SlimSpecDrafterConfig
from ..modeling_slimspec import (
    FullHead,
    LowRankHead,
    SlimSpecDrafterForCausalLM,
    TrimmedHead,
    check_safetensors_checkpoint,
)
from ..training.config import HEAD_INITS


logger = logging.getLogger(__name__)

SOURCE_FORMATS = ("eagle", "speculators", "torchspec")
# `slimspec convert --from FAMILY`: the formats each family name covers
FAMILIES = {"eagle3": ("eagle", "speculators"), "torchspec": ("torchspec",)}
EAGLE31_FLAGS = ("fc_norm", "norm_before_fc", "norm_output")
EAGLE_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
# A converted drafter has its own head (not the target's); its head init needs no training data.
CONVERT_HEAD_TYPES = tuple(h for h in HEAD_TYPES if h != "target")
CONVERT_HEAD_INITS = tuple(h for h in HEAD_INITS if h != "activation_svd")
# A stored drafter embedding counts as "the target's" when ‖E_src − E_target‖_F ≤ tol · ‖E_target‖_F; 1e-2 covers
# bf16/fp16 rounding of the same matrix (relative error ≲ 4e-3) and rejects any trained or different embedding.
EMBEDDING_TOLERANCE = 1e-2
# Weights a speculators checkpoint may carry that belong to the verifier, not to the drafter (never used here).
SPECULATORS_VERIFIER_KEYS = ("verifier_lm_head.weight", "verifier_norm.weight")


# ----------------------------------------------------------------------------------------------------------------
# Reading a source checkpoint
# ----------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Eagle3Checkpoint:
    """An EAGLE-3 drafter read from disk, with its weights renamed to SlimSpec names.

    `backbone` holds `fc.weight`, `layer.*`, `norm.weight` and EAGLE-3.1's `fc_norm.{i}.weight` / `input_norm.weight`;
    the head is kept apart as `lm_head` (K×d) with `draft_token_ids` (K,), the full-vocabulary id of each head row
    (target id = draft id + d2t[draft id]); a TorchSpec low-rank head also as its two factors (`lm_head_factors`),
    `lm_head` being their product.
    `target_layer_ids` are already in SlimSpec's indexing (into `outputs.hidden_states`), or None for EAGLE-3's
    default {2, L//2, L-3} of the target. `norm_before_residual` is the layer variant whose residual is taken after
    `hidden_norm` (speculators only; SafeAILab layers always add the un-normed state).
    """

    format: str
    path: str
    config: dict
    layer_config: dict
    backbone: dict
    lm_head: torch.Tensor
    draft_token_ids: torch.Tensor
    vocab_size: int | None
    embed_tokens: torch.Tensor | None
    target_layer_ids: list[int] | None
    layer_ids_origin: str
    norm_before_residual: bool = False
    norm_before_residual_origin: str = "SafeAILab layer: residual is the fused state"
    flags: dict = dataclasses.field(default_factory=dict)  # EAGLE-3.1: fc_norm, norm_before_fc, norm_output
    lm_head_factors: tuple[torch.Tensor, torch.Tensor] | None = None  # TorchSpec: (down (r, d), up (V, r))

    @property
    def draft_vocab_size(self) -> int:
        return self.lm_head.shape[0]


def detect_format(config: dict) -> str:
    """`"speculators"` or `"eagle"` (SafeAILab) from a checkpoint's config.json; anything else is refused."""
    if "speculators_model_type" in config:
        kind = config["speculators_model_type"]
        if kind != "eagle3":
            raise ValueError(
                f"`speculators_model_type` is {kind!r}; only 'eagle3' drafters can be converted to SlimSpec."
            )
        return "speculators"
    architectures = config.get("architectures") or []
    if any(a in EAGLE_ARCHITECTURES for a in architectures):
        return "torchspec" if config.get("lm_head_rank_divisor") else "eagle"
    raise ValueError(
        f"Unknown drafter format: config.json has `architectures` {architectures} and no `speculators_model_type`. "
        f"Expected a SafeAILab EAGLE-3 drafter (architectures one of {list(EAGLE_ARCHITECTURES)}) or a vLLM "
        "speculators drafter (speculators_model_type 'eagle3')."
    )


def load_safetensors_folder(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """All tensors of a folder's safetensors files (sharded or not). Pickled weights (.bin/.pt) are refused."""
    from safetensors import safe_open

    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"No checkpoint folder at {str(folder)!r}.")
    check_safetensors_checkpoint(str(folder))
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({folder / name for name in json.loads(index.read_text())["weight_map"].values()})
    else:
        files = sorted(folder.glob("*.safetensors"))
    tensors = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                if key in tensors:
                    raise ValueError(f"Tensor `{key}` appears in more than one safetensors file of {str(folder)!r}.")
                tensors[key] = handle.get_tensor(key)
    return tensors


def read_eagle3_checkpoint(path: str | os.PathLike, *, norm_before_residual: bool | None = None) -> Eagle3Checkpoint:
    """Reads a SafeAILab or speculators EAGLE-3 checkpoint folder (config.json + safetensors).

    `norm_before_residual` overrides the speculators config's value (needed when the key is missing, which vLLM
    and the speculators library read differently); None keeps the checkpoint's.
    """
    folder = Path(path)
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"No config.json in {str(folder)!r}; pass the folder of an EAGLE-3 drafter.")
    config = json.loads(config_file.read_text())
    fmt = detect_format(config)
    # Checked before the weights are read: the config alone decides whether the layer is mappable.
    residual = resolve_norm_before_residual(fmt, config, norm_before_residual)
    if fmt == "speculators":
        _check_speculators_config(config)
    flags = eagle31_flags(fmt, config)
    tensors = load_safetensors_folder(folder)
    factors = _torchspec_factors(str(folder), config, tensors) if fmt == "torchspec" else None
    read = _read_speculators if fmt == "speculators" else _read_eagle
    ckpt = read(str(folder), config, tensors)
    return dataclasses.replace(
        ckpt,
        format=fmt,
        norm_before_residual=residual[0],
        norm_before_residual_origin=residual[1],
        flags=flags,
        lm_head_factors=factors,
    )


def eagle31_flags(fmt: str, config: dict) -> dict:
    """The EAGLE-3.1 flags of a checkpoint's config (top level, as speculators, vLLM, SpecForge and TorchSpec write
    them; vLLM also reads `norm_before_fc` from `eagle_config`): JSON booleans, at most one norm in front of `fc`."""
    flags = {}
    for flag in EAGLE31_FLAGS:
        value = config.get(flag, False)
        if fmt != "speculators" and flag == "norm_before_fc":
            value = (config.get("eagle_config") or {}).get(flag, value)
        if not isinstance(value, bool):
            raise ValueError(f"`{flag}` in config.json is {value!r}; it must be true or false (a JSON boolean).")
        flags[flag] = value
    if flags["fc_norm"] and flags["norm_before_fc"]:
        raise ValueError(
            "config.json sets both `fc_norm` and `norm_before_fc`; an EAGLE-3.1 drafter has at most one norm in front "
            "of `fc` (speculators refuses both as well), so its forward is ambiguous."
        )
    return flags


def _torchspec_factors(path: str, config: dict, tensors: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """TorchSpec's low-rank head, checked against its config (r = hidden_size // lm_head_rank_divisor, the full
    vocabulary); replaced in `tensors` by the merged `lm_head.weight` the EAGLE-3 reader expects."""
    divisor, hidden = config.get("lm_head_rank_divisor"), config.get("hidden_size")
    if isinstance(divisor, bool) or not isinstance(divisor, int) or divisor < 2:
        raise ValueError(f"`lm_head_rank_divisor` in config.json is {divisor!r}; TorchSpec requires an integer >= 2.")
    vocab, draft_vocab = config.get("vocab_size"), config.get("draft_vocab_size", config.get("vocab_size"))
    if draft_vocab != vocab:
        raise ValueError(
            f"`draft_vocab_size` ({draft_vocab}) differs from `vocab_size` ({vocab}); TorchSpec's low-rank head "
            "covers the full vocabulary, so this checkpoint is inconsistent."
        )
    rank = int(hidden) // divisor if isinstance(hidden, int) else None
    down, up = tensors.pop("lm_head.down.weight", None), tensors.pop("lm_head.up.weight", None)
    for name, value, shape in (
        ("lm_head.down.weight", down, (rank, hidden)),
        ("lm_head.up.weight", up, (vocab, rank)),
    ):
        if value is None or tuple(value.shape) != shape:
            found = "missing" if value is None else f"of shape {tuple(value.shape)}"
            raise ValueError(
                f"`{name}` is {found}; `lm_head_rank_divisor` {divisor} and hidden_size {hidden} give rank {rank}, "
                f"so it must be {shape}."
            )
    if "lm_head.weight" in tensors:
        raise ValueError(f"{path!r} holds both a dense `lm_head.weight` and TorchSpec's two factors.")
    tensors["lm_head.weight"] = up.float() @ down.float()  # (V, d): what the EAGLE-3 reader and a full head take
    return down, up


def resolve_norm_before_residual(fmt: str, config: dict, override: bool | None = None) -> tuple[bool, str]:
    """The drafter layer's `norm_before_residual` and where it came from.

    SafeAILab layers add the un-normed fused state: always false (an override of true is refused). A speculators
    config must state the value — vLLM reads a missing key as true, the speculators library as false — unless
    `override` settles it.
    """
    if override is not None and not isinstance(override, bool):
        raise TypeError(f"`norm_before_residual` must be a bool or None, got {override!r}.")
    if fmt != "speculators":  # SafeAILab's layer (SpecForge's and TorchSpec's too)
        if override:
            raise ValueError(
                "`norm_before_residual=True` was passed for a SafeAILab EAGLE-3 checkpoint, whose layer always adds "
                "the un-normed fused state as its residual; drop the override (--norm-before-residual)."
            )
        return False, "SafeAILab layer: residual is the fused state"
    stored = config.get("norm_before_residual")
    if stored is not None and not isinstance(stored, bool):
        raise ValueError(
            f"`norm_before_residual` in the speculators config is {stored!r}; it must be true or false (JSON booleans)."
        )
    if override is not None:
        if stored is not None and stored != override:
            logger.warning(
                "The speculators config says `norm_before_residual: %s`; using the override %s instead.",
                str(stored).lower(),
                str(override).lower(),
            )
        return override, "--norm-before-residual override"
    if stored is None:
        raise ValueError(
            "The speculators config has no `norm_before_residual`: vLLM reads a missing value as true (residual = "
            "hidden_norm(h)), the speculators library as false (residual = h), so the drafter's forward is "
            "ambiguous. Pass --norm-before-residual true|false (Python: norm_before_residual=...), or add "
            '`"norm_before_residual": false` (or true) to its config.json, whichever it was trained with.'
        )
    return stored, "config.json"


def _read_eagle(path: str, config: dict, tensors: dict) -> Eagle3Checkpoint:
    # Layer ids. SafeAILab stores none (its target model captures the inputs of layers 2, L//2, L-3). SpecForge
    # writes `eagle_config.eagle_aux_hidden_state_layer_ids` as layer *outputs* (SGLang captures id + 1); vLLM reads
    # a top-level `eagle_aux_hidden_state_layer_ids` as layer inputs.
    ids, origin = None, "EAGLE-3 default: inputs of target layers {2, L//2, L-3}"
    sglang_ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    vllm_ids = config.get("eagle_aux_hidden_state_layer_ids")
    if sglang_ids:
        ids = [int(i) + 1 for i in sglang_ids]
        origin = f"eagle_config.eagle_aux_hidden_state_layer_ids {list(sglang_ids)} (layer outputs, +1)"
    if vllm_ids:
        if ids is not None and ids != [int(i) for i in vllm_ids]:
            raise ValueError(
                f"`eagle_config.eagle_aux_hidden_state_layer_ids` {list(sglang_ids)} (layer outputs → hidden_states "
                f"{ids}) and `eagle_aux_hidden_state_layer_ids` {list(vllm_ids)} (layer inputs) disagree; remove the "
                "wrong one or pass --layer-ids."
            )
        ids = [int(i) for i in vllm_ids]
        origin = f"eagle_aux_hidden_state_layer_ids {ids} (layer inputs)"
    vllm_names = any(k.startswith("layers.0.") for k in tensors) and not any(
        k.startswith("midlayer.") for k in tensors
    )
    return _split_weights(
        path,
        "eagle",
        config,
        layer_config=config,
        tensors=tensors,
        layer_prefix="layers.0." if vllm_names else "midlayer.",  # TorchSpec's `--vllm` export renames the layer
        vocab_size=config.get("vocab_size"),
        draft_vocab_size=config.get("draft_vocab_size"),
        target_layer_ids=ids,
        layer_ids_origin=origin,
    )


def _check_speculators_config(config: dict) -> None:
    """Refuses speculators layer variants that the SlimSpec layer cannot represent."""
    layer_config = config.get("transformer_layer_config")
    if not isinstance(layer_config, dict):
        raise ValueError(
            f"`transformer_layer_config` must be a dict in a speculators config, got {type(layer_config).__name__}."
        )
    model_type = layer_config.get("model_type", "llama")
    if model_type != "llama":
        raise ValueError(
            f"`transformer_layer_config.model_type` is {model_type!r}; only Llama-style decoder layers (model_type "
            "'llama': no q/k norms, no sliding window) map onto the SlimSpec layer."
        )
    num_layers = layer_config.get("num_hidden_layers", 1)
    if num_layers != 1:
        raise ValueError(
            f"`transformer_layer_config.num_hidden_layers` is {num_layers}; SlimSpec drafters have exactly one "
            "decoder layer."
        )
    if layer_config.get("mlp_bias"):
        raise ValueError("`transformer_layer_config.mlp_bias` is true; the SlimSpec MLP has no biases.")
    partial = layer_config.get("partial_rotary_factor", 1.0)
    if partial not in (None, 1, 1.0):
        raise ValueError(f"`transformer_layer_config.partial_rotary_factor` is {partial}; only full RoPE maps.")
    sliding = [t for t in (layer_config.get("layer_types") or []) if t != "full_attention"]
    if sliding:
        raise ValueError(f"`transformer_layer_config.layer_types` has {sliding}; the SlimSpec layer attends fully.")


def _read_speculators(path: str, config: dict, tensors: dict) -> Eagle3Checkpoint:
    layer_config = config["transformer_layer_config"]
    tensors = {k: v for k, v in tensors.items() if k not in SPECULATORS_VERIFIER_KEYS}
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    ids = [int(i) for i in ids] if ids else None
    origin = (
        f"eagle_aux_hidden_state_layer_ids {ids} (layer inputs)"
        if ids
        else "EAGLE-3 default: inputs of target layers {2, L//2, L-3}"
    )
    return _split_weights(
        path,
        "speculators",
        config,
        layer_config=layer_config,
        tensors=tensors,
        layer_prefix="layers.0.",
        vocab_size=layer_config.get("vocab_size"),
        draft_vocab_size=config.get("draft_vocab_size"),
        target_layer_ids=ids,
        layer_ids_origin=origin,
    )


def _split_weights(
    path,
    fmt,
    config,
    *,
    layer_config,
    tensors,
    layer_prefix,
    vocab_size,
    draft_vocab_size,
    target_layer_ids,
    layer_ids_origin,
) -> Eagle3Checkpoint:
    backbone, unexpected = {}, []
    for key, value in tensors.items():
        if key.startswith(layer_prefix):
            backbone["layer." + key[len(layer_prefix) :]] = value
        elif key in ("fc.weight", "norm.weight", "input_norm.weight") or key.startswith("fc_norm."):
            backbone[key] = value
        elif key not in ("lm_head.weight", "d2t", "t2d", "embed_tokens.weight"):
            unexpected.append(f"{key} {tuple(value.shape)}")
    if unexpected:
        raise ValueError(
            f"{path!r} holds weights with no counterpart in a SlimSpec drafter: {unexpected}. The drafter uses "
            "another architecture (e.g. more decoder layers, q/k norms, fc norms) and cannot be converted faithfully."
        )
    if "lm_head.weight" not in tensors:
        raise ValueError(f"{path!r} has no `lm_head.weight`; an EAGLE-3 drafter stores its own (draft-vocab) head.")
    lm_head = tensors["lm_head.weight"]
    num_rows = lm_head.shape[0]
    if draft_vocab_size is not None and int(draft_vocab_size) != num_rows:
        raise ValueError(
            f"`lm_head.weight` has shape {tuple(lm_head.shape)} but config `draft_vocab_size` is {draft_vocab_size}."
        )
    token_ids = _draft_token_ids(path, num_rows, vocab_size, tensors.get("d2t"), tensors.get("t2d"))
    return Eagle3Checkpoint(
        format=fmt,
        path=path,
        config=config,
        layer_config=dict(layer_config),
        backbone=backbone,
        lm_head=lm_head,
        draft_token_ids=token_ids,
        vocab_size=int(vocab_size) if vocab_size is not None else None,
        embed_tokens=tensors.get("embed_tokens.weight"),
        target_layer_ids=target_layer_ids,
        layer_ids_origin=layer_ids_origin,
    )


def _draft_token_ids(path, num_rows: int, vocab_size, d2t, t2d) -> torch.Tensor:
    """Full-vocabulary id of each head row: draft id + d2t[draft id]; checked against `t2d` when present."""
    if d2t is None:
        if vocab_size is not None and num_rows != vocab_size:
            raise ValueError(
                f"{path!r} has no `d2t`, but its head has {num_rows} rows (draft_vocab_size) for a vocabulary of "
                f"{vocab_size}: without `d2t` (shape ({num_rows},), target id = draft id + d2t[draft id]) the rows "
                "cannot be placed in the full vocabulary."
            )
        return torch.arange(num_rows)
    if d2t.shape != (num_rows,) or d2t.is_floating_point():
        raise ValueError(
            f"`d2t` must be an integer tensor of shape ({num_rows},) (one offset per `lm_head.weight` row), got "
            f"{d2t.dtype} {tuple(d2t.shape)}."
        )
    token_ids = torch.arange(num_rows) + d2t.long()
    limit = vocab_size if vocab_size is not None else (t2d.shape[0] if t2d is not None else None)
    if int(token_ids.min()) < 0 or (limit is not None and int(token_ids.max()) >= limit):
        raise ValueError(
            f"`d2t` maps draft ids to {int(token_ids.min())}..{int(token_ids.max())}, outside [0, {limit})."
        )
    if token_ids.unique().numel() != num_rows:
        raise ValueError("`d2t` maps two draft ids to the same target id.")
    if t2d is not None:
        if vocab_size is not None and t2d.shape != (vocab_size,):
            raise ValueError(f"`t2d` must have shape ({vocab_size},) (the vocabulary), got {tuple(t2d.shape)}.")
        mask = t2d.bool()
        if int(mask.sum()) != num_rows or not bool(mask[token_ids].all()):
            raise ValueError(
                f"`t2d` ({int(mask.sum())} tokens set) disagrees with `d2t` ({num_rows} draft tokens): the two maps "
                "must describe the same draft vocabulary."
            )
    return token_ids


# ----------------------------------------------------------------------------------------------------------------
# Converting into a SlimSpec drafter
# ----------------------------------------------------------------------------------------------------------------


def resolve_target_layer_ids(checkpoint: Eagle3Checkpoint, num_target_layers: int, override=None) -> list[int]:
    """The checkpoint's target layers as indices into `outputs.hidden_states` of a target with L layers."""
    L = num_target_layers
    if override is not None:
        ids = [int(i) for i in override]
    elif checkpoint.target_layer_ids is not None:
        ids = list(checkpoint.target_layer_ids)
    else:
        # The SafeAILab target model appends hidden_states at `idx in {2, L//2, L-3}` in increasing idx, once each.
        ids = sorted({2, L // 2, L - 3})
        if len(ids) != 3 or ids[0] < 0:
            raise ValueError(
                f"EAGLE-3's default target layers {{2, L//2, L-3}} = {ids} for L = {L} are not three distinct layers; "
                "pass the layers the drafter was trained on with --layer-ids."
            )
    if len(ids) != 3:
        raise ValueError(f"SlimSpec drafters fuse three target layers; the checkpoint names {ids}.")
    if L in ids and override is None and checkpoint.format == "speculators":
        raise ValueError(
            f"`eagle_aux_hidden_state_layer_ids` {ids} includes {L}, the last layer's pre-norm output in vLLM; HF's "
            f"`hidden_states[{L}]` is post-norm, so it cannot be captured faithfully."
        )
    bad = [i for i in ids if not 0 <= i < L + 1]
    if bad:
        raise ValueError(f"Target layer ids {ids} include {bad}, outside [0, {L}] for a target with {L} layers.")
    return ids


def _layer_hyperparameters(checkpoint: Eagle3Checkpoint) -> dict:
    """SlimSpec config fields of the checkpoint's decoder layer; head_dim and widths are read off the weights."""
    from transformers import LlamaConfig

    raw = {k: v for k, v in checkpoint.layer_config.items() if k not in ("architectures", "auto_map", "model_type")}
    layer = LlamaConfig(**raw)  # normalises rope_theta / rope_scaling into rope_parameters
    backbone = checkpoint.backbone
    for key in ("layer.self_attn.q_proj.weight", "layer.self_attn.k_proj.weight", "fc.weight"):
        if key not in backbone:
            raise ValueError(f"{checkpoint.path!r} has no `{_source_name(checkpoint, key)}`.")
    hidden_size = backbone["fc.weight"].shape[0]
    heads, kv_heads = layer.num_attention_heads, layer.num_key_value_heads or layer.num_attention_heads
    q_rows, k_rows = (
        backbone["layer.self_attn.q_proj.weight"].shape[0],
        backbone["layer.self_attn.k_proj.weight"].shape[0],
    )
    if q_rows % heads or k_rows != kv_heads * (q_rows // heads):
        raise ValueError(
            f"`{_source_name(checkpoint, 'layer.self_attn.q_proj.weight')}` has {q_rows} rows and "
            f"`{_source_name(checkpoint, 'layer.self_attn.k_proj.weight')}` {k_rows}, which do not fit "
            f"num_attention_heads = {heads} and num_key_value_heads = {kv_heads}."
        )
    rope = dict(layer.rope_parameters or {"rope_type": "default", "rope_theta": 10000.0})
    return {
        "hidden_size": hidden_size,
        "intermediate_size": layer.intermediate_size,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": q_rows // heads,
        "hidden_act": layer.hidden_act,
        "rms_norm_eps": layer.rms_norm_eps,
        "rope_parameters": rope,
        "max_position_embeddings": layer.max_position_embeddings,
        # SafeAILab's layer has no biases whatever its config says; speculators follows the Llama config.
        "attention_bias": "layer.self_attn.q_proj.bias" in backbone,
    }


def _source_name(checkpoint: Eagle3Checkpoint, name: str) -> str:
    if name.startswith("layer."):
        prefix = "layers.0." if checkpoint.format == "speculators" else "midlayer."
        return prefix + name[len("layer.") :]
    return name


def expand_draft_head(draft_weight: torch.Tensor, token_ids: torch.Tensor, fill_weight: torch.Tensor) -> torch.Tensor:
    """The full-vocabulary head (V×d, fp32): row `token_ids[j]` is draft row j, every other row is `fill_weight`'s.

    `fill_weight` is the target's LM head (V×d): it scores tokens outside the draft vocabulary as the target would
    score the drafter's normed state — an initialisation that a head fine-tune refines.
    """
    if fill_weight.dim() != 2 or draft_weight.shape[1] != fill_weight.shape[1]:
        raise ValueError(
            f"The draft head {tuple(draft_weight.shape)} and the fill head {tuple(fill_weight.shape)} must share their "
            "width d."
        )
    if token_ids.shape != (draft_weight.shape[0],):
        raise ValueError(f"`token_ids` must have shape ({draft_weight.shape[0]},), got {tuple(token_ids.shape)}.")
    weight = fill_weight.detach().float().clone()
    weight[token_ids.to(weight.device)] = draft_weight.detach().float().to(weight.device)
    return weight


def _check_embedding(checkpoint: Eagle3Checkpoint, target) -> None:
    """A stored drafter embedding is dropped (SlimSpec borrows the target's) — only if it is the target's."""
    stored = checkpoint.embed_tokens
    if stored is None:
        return
    own = target.get_input_embeddings().weight.detach().float()
    if tuple(stored.shape) != tuple(own.shape):
        raise ValueError(
            f"`embed_tokens.weight` has shape {tuple(stored.shape)}, the target's embedding {tuple(own.shape)}; "
            "SlimSpec drafters borrow the target's embedding, so this drafter cannot be converted faithfully."
        )
    error = float((stored.float() - own).norm() / own.norm().clamp_min(1e-12))
    if error > EMBEDDING_TOLERANCE:
        raise ValueError(
            f"`embed_tokens.weight` differs from the target's embedding (relative error {error:.3g} > "
            f"{EMBEDDING_TOLERANCE}); SlimSpec drafters borrow the target's embedding, so a drafter trained with its "
            "own embedding cannot be converted faithfully. Check that --target is the model it was trained for."
        )


def convert_eagle3(
    source: str | os.PathLike | Eagle3Checkpoint,
    target,
    *,
    head_type: str = "low_rank",
    rank: int | None = None,
    head_init: str = "svd",
    layer_ids: list[int] | None = None,
    norm_before_residual: bool | None = None,
) -> SlimSpecDrafterForCausalLM:
    """A SlimSpec drafter (fp32, eval mode, attached to `target`) from an EAGLE-3 checkpoint.

    Args:
        source: folder of a SafeAILab or speculators EAGLE-3 drafter (or a read [`Eagle3Checkpoint`]).
        target: the target model the drafter was trained for (supplies the embedding, the LM-head rows outside
            the draft vocabulary, and the layer count).
        head_type: `"low_rank"` (SlimSpec), `"full"` (the expanded V×d head) or `"trimmed"` (the source's
            draft-vocab head as is: exactly the source drafter).
        rank: head rank for `"low_rank"` (default hidden_size // 8).
        head_init: `"svd"` (truncated SVD of the expanded head) or `"random"` (to train the head from scratch).
        layer_ids: override of the target layers (indices into `outputs.hidden_states`).
        norm_before_residual: override of the speculators layer variant (residual after `hidden_norm`); needed
            when the config lacks the key. None keeps the checkpoint's value (always false for SafeAILab).
    """
    if head_type not in CONVERT_HEAD_TYPES:
        raise ValueError(f"`head_type` must be one of {list(CONVERT_HEAD_TYPES)}, got {head_type!r}.")
    if head_init not in CONVERT_HEAD_INITS:
        raise ValueError(f"`head_init` must be one of {list(CONVERT_HEAD_INITS)}, got {head_init!r}.")
    if isinstance(source, Eagle3Checkpoint):
        ckpt = source
        if norm_before_residual is not None:
            value, origin = resolve_norm_before_residual(ckpt.format, ckpt.config, norm_before_residual)
            ckpt = dataclasses.replace(ckpt, norm_before_residual=value, norm_before_residual_origin=origin)
    else:
        ckpt = read_eagle3_checkpoint(source, norm_before_residual=norm_before_residual)
    tcfg = target.config.get_text_config()
    if ckpt.vocab_size is not None and ckpt.vocab_size != tcfg.vocab_size:
        raise ValueError(
            f"The drafter's vocabulary ({ckpt.vocab_size}) differs from the target's ({tcfg.vocab_size}); pass the "
            "target it was trained for."
        )
    overrides = _layer_hyperparameters(ckpt)
    overrides["target_layer_ids"] = resolve_target_layer_ids(ckpt, tcfg.num_hidden_layers, layer_ids)
    overrides["head_type"] = head_type
    overrides["norm_before_residual"] = bool(ckpt.norm_before_residual)
    overrides.update(ckpt.flags)
    if ckpt.lm_head_factors is not None and head_type == "low_rank" and rank is None:
        rank = ckpt.lm_head_factors[0].shape[0]  # TorchSpec's own rank: its factors are taken as they are
    if head_type == "low_rank" and rank is not None:
        overrides["head_rank"] = int(rank)
    if head_type == "trimmed":
        overrides["draft_vocab_size"] = ckpt.draft_vocab_size
    config = SlimSpecDrafterConfig.from_target_config(target.config, **overrides)
    drafter = SlimSpecDrafterForCausalLM(config).float().eval()
    _load_backbone(drafter, ckpt)
    _check_embedding(ckpt, target)
    _load_head(drafter, ckpt, target, head_init)
    return drafter.attach_target(target)


@torch.no_grad()
def _load_backbone(drafter: SlimSpecDrafterForCausalLM, ckpt: Eagle3Checkpoint) -> None:
    expected = {k: v for k, v in drafter.state_dict().items() if not k.startswith("lm_head.")}
    missing = [f"{_source_name(ckpt, k)} {tuple(v.shape)}" for k, v in expected.items() if k not in ckpt.backbone]
    extra = [f"{_source_name(ckpt, k)} {tuple(v.shape)}" for k, v in ckpt.backbone.items() if k not in expected]
    if missing or extra:
        raise ValueError(
            f"{ckpt.path!r} does not match the SlimSpec EAGLE-3 layer: missing {missing}, unexpected {extra}. "
            "EAGLE-3.1 norms need their config flag (`fc_norm`, `norm_before_fc`); a drafter with other weights "
            "(q/k norms, biases, more layers) cannot be converted faithfully."
        )
    for name, param in expected.items():
        value = ckpt.backbone[name]
        if tuple(value.shape) != tuple(param.shape):
            raise ValueError(
                f"`{_source_name(ckpt, name)}` has shape {tuple(value.shape)}, expected {tuple(param.shape)} for "
                f"this target and config (hidden_size {drafter.config.hidden_size}, target_hidden_size "
                f"{drafter.config.target_hidden_size})."
            )
        param.copy_(value.to(param.dtype))


@torch.no_grad()
def _load_head(drafter: SlimSpecDrafterForCausalLM, ckpt: Eagle3Checkpoint, target, head_init: str) -> None:
    head = drafter.lm_head
    draft = ckpt.lm_head
    if draft.shape[1] != drafter.config.hidden_size:
        raise ValueError(
            f"`lm_head.weight` has shape {tuple(draft.shape)}, expected (K, {drafter.config.hidden_size})."
        )
    if isinstance(head, TrimmedHead):
        head.set_token_ids(ckpt.draft_token_ids)
        head.weight.copy_(draft.to(head.weight.dtype))
        return
    factors = ckpt.lm_head_factors
    if isinstance(head, LowRankHead) and factors is not None and factors[0].shape[0] == head.rank:
        head.down.weight.copy_(factors[0].to(head.down.weight.dtype))
        head.up.weight.copy_(factors[1].to(head.up.weight.dtype))
        return
    dense = full_vocab_head(ckpt, target, drafter.config.hidden_size)
    if isinstance(head, FullHead):
        head.weight.copy_(dense.to(head.weight.dtype))
    elif isinstance(head, LowRankHead) and head_init == "svd":
        head.init_from_dense(dense.to(head.up.weight.dtype))


def full_vocab_head(ckpt: Eagle3Checkpoint, target, hidden_size: int) -> torch.Tensor:
    """The checkpoint's head expanded to the target's vocabulary (V×d, fp32)."""
    vocab_size = target.config.get_text_config().vocab_size
    if ckpt.draft_vocab_size == vocab_size:
        order = torch.argsort(ckpt.draft_token_ids)
        return ckpt.lm_head.detach().float()[order]
    fill = target.get_output_embeddings().weight
    if fill.shape[1] != hidden_size:
        raise ValueError(
            f"The drafter's head covers {ckpt.draft_vocab_size} of {vocab_size} tokens and the rest would come from "
            f"the target's LM head, but that head is {tuple(fill.shape)} while the drafter is {hidden_size} wide. "
            "Convert with head_type='trimmed' instead."
        )
    return expand_draft_head(ckpt.lm_head, ckpt.draft_token_ids, fill)


__all__ = [
    "Eagle3Checkpoint",
    "detect_format",
    "load_safetensors_folder",
    "read_eagle3_checkpoint",
    "resolve_norm_before_residual",
    "resolve_target_layer_ids",
    "expand_draft_head",
    "full_vocab_head",
    "convert_eagle3",
]
