# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""SlimSpec drafters: the EAGLE-3 backbone and the model (heads in `heads_slimspec.py`, its KV cache in
`cache_slimspec.py`; decoding is reached through `generation_slimspec.py`, never imported here).

Self-contained on purpose: it imports only `torch`, `transformers` and its siblings, so that
`save_pretrained` can copy it next to the weights and `AutoModelForCausalLM.from_pretrained(...,
trust_remote_code=True)` works where `slimspec_hf` is not installed. Building or loading a drafter (either way)
installs the `generate()` wrapper that makes `target.generate(**inputs, assistant_model=drafter)` draft with
SlimSpec (`generation_slimspec.install_generation_hook`).

Shapes: B batch, T positions, d drafter width, d_t target width, V vocabulary, r head rank, K trimmed vocab.
"""

import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationConfig, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import ModelOutput
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb

from .cache_slimspec import SlimSpecDrafterCache
from .configuration_slimspec import SlimSpecDrafterConfig
from .drafting_slimspec import draft_generation_config
from .generation_slimspec import install_generation_hook
from .heads_slimspec import (  # noqa: F401  (re-exported: the heads are part of the model's API)
    FullHead,
    LowRankHead,
    TargetHead,
    TrimmedHead,
    build_head,
    low_rank_factors,
    store_column_major,
)


# ----------------------------------------------------------------------------------------------------------------
# EAGLE-3 backbone
# ----------------------------------------------------------------------------------------------------------------


class SlimSpecDrafterAttention(nn.Module):
    """Attention whose q/k/v read the concatenation [norm(embedding), norm(hidden)] (2d)."""

    def __init__(self, config: SlimSpecDrafterConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.num_groups = self.num_heads // self.num_kv_heads
        bias = config.attention_bias
        self.q_proj = nn.Linear(2 * config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(2 * config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(2 * config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)

    def project(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rotated queries (B, H, T, hd), keys and values (B, H_kv, T, hd) of x (B, T, 2d)."""
        bsz, seq_len, _ = x.shape
        q = self.q_proj(x).view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, seq_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, seq_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return q, k, v

    def output(self, attn: torch.Tensor) -> torch.Tensor:
        bsz, _, seq_len, _ = attn.shape
        return self.o_proj(attn.transpose(1, 2).reshape(bsz, seq_len, self.num_heads * self.head_dim))

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        attention_mask: torch.Tensor | None,
        cache: SlimSpecDrafterCache | None,
        ttt_context: tuple[tuple[torch.Tensor, torch.Tensor], ...] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Returns the attention output (B, T, d) and this call's keys/values (B, H_kv, T, hd).

        With `ttt_context` (the keys/values of the earlier training-time-test steps, step 0 first), the queries of
        step k = len(ttt_context) attend as at inference (see `ttt_attention`); `attention_mask` is then the (B, T)
        key mask of padded positions.
        """
        q, k, v = self.project(x, cos, sin)
        if ttt_context is not None:
            attn = ttt_attention(q, [*ttt_context, (k, v)], attention_mask, self.num_groups)
            return self.output(attn), (k, v)
        new_kv = (k, v)
        if cache is not None:
            k, v = cache.update(k, v)
        q_len, kv_len = q.shape[2], k.shape[2]
        if attention_mask is None and q_len > 1:
            # Causal over the new positions, all cached positions visible.
            attention_mask = causal_mask(q_len, kv_len, q.device)
        if q_len == 1 and self.num_groups > 1:
            # one query token: its heads folded onto their key/value heads (B, H_kv, groups, hd), the masks shared
            # by all heads as they are; PyTorch's CPU kernel with `enable_gqa` on one query is several times slower
            # (`verification_slimspec.shared_kv_heads`)
            batch, heads, _, dim = q.shape
            folded = q.reshape(batch, heads // self.num_groups, self.num_groups, dim)
            attn = F.scaled_dot_product_attention(folded, k, v, attn_mask=attention_mask)
            return self.output(attn.reshape(batch, heads, 1, dim)), new_kv
        attn = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attention_mask, enable_gqa=self.num_groups > 1
        )  # (B, H, T, hd)
        return self.output(attn), new_kv


def causal_mask(q_len: int, kv_len: int, device: torch.device) -> torch.Tensor:
    """Boolean (q_len, kv_len) mask: query i (the i-th of the last q_len positions) sees keys 0..kv_len-q_len+i."""
    offset = kv_len - q_len
    rows = torch.arange(q_len, device=device)[:, None] + offset
    return torch.arange(kv_len, device=device)[None, :] <= rows


class SlimSpecDrafterMLP(nn.Module):
    def __init__(self, config: SlimSpecDrafterConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class SlimSpecDrafterLayer(GradientCheckpointingLayer):
    """EAGLE-3's single decoder layer: attention over [norm(emb), norm(h)], residual on h, SwiGLU MLP.

    Checkpointed the transformers way (`drafter.gradient_checkpointing_enable()`).
    """

    def __init__(self, config: SlimSpecDrafterConfig):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)  # on the token embedding
        self.hidden_norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)  # on the fed hidden state
        self.self_attn = SlimSpecDrafterAttention(config)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = SlimSpecDrafterMLP(config)
        self.norm_before_residual = bool(config.norm_before_residual)

    def forward(
        self, inputs_embeds, hidden_states, cos, sin, attention_mask=None, cache=None, ttt_context=None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Returns the layer's pre-final-norm output (B, T, d) and its attention keys/values.

        The residual is the fed hidden state itself, or its normed version with `norm_before_residual` (the vLLM
        speculators variant).
        """
        x = torch.cat([self.input_layernorm(inputs_embeds), self.hidden_norm(hidden_states)], dim=-1)  # (B, T, 2d)
        attn_out, kv = self.self_attn(x, cos, sin, attention_mask, cache, ttt_context)
        if self.norm_before_residual:
            hidden_states = self.hidden_norm(hidden_states)
        hidden_states = hidden_states + attn_out
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states)), kv


@dataclass
class SlimSpecDrafterOutput(ModelOutput):
    """
    logits (`torch.FloatTensor` of shape `(B, T, V)`): full-vocabulary logits of the next-next token.
    hidden_states (`torch.FloatTensor` of shape `(B, T, d)`): the state fed to the next step: the layer's pre-norm
        output (post-norm with `config.norm_output`).
    cache (`SlimSpecDrafterCache`): the drafter's cache, when `use_cache=True`.
    """

    logits: torch.FloatTensor | None = None
    hidden_states: torch.FloatTensor | None = None
    cache: Any | None = None


class SlimSpecDrafterPreTrainedModel(PreTrainedModel):
    config_class = SlimSpecDrafterConfig
    config: SlimSpecDrafterConfig
    base_model_prefix = ""  # no inner base model: the drafter (fc, one layer, norm, head) is its own
    _no_split_modules = ["SlimSpecDrafterLayer"]
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, TrimmedHead):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, LlamaRMSNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, LlamaRotaryEmbedding):
            # from the config, whatever the RoPE type: `from_pretrained` starts from empty buffers
            if module.rope_type == "default":
                inv_freq, _ = module.compute_default_rope_parameters(module.config)
            else:
                inv_freq, _ = ROPE_INIT_FUNCTIONS[module.rope_type](module.config, module.inv_freq.device)
            module.inv_freq.copy_(inv_freq)
            module.original_inv_freq.copy_(inv_freq)


_GENERATION_CONFIG_KWARGS = (
    "subfolder",
    "revision",
    "token",
    "cache_dir",
    "local_files_only",
    "force_download",
    "proxies",
)


class SlimSpecDrafterForCausalLM(SlimSpecDrafterPreTrainedModel):
    """An EAGLE-3 drafter with a SlimSpec low-rank head (or a baseline head).

    Inputs per position t: the embedding of token x_{t+1} and a hidden state — either the target's three fused
    layers at t (B, T, 3·d_t), or the drafter's own output at t (B, T, d). Output: logits for x_{t+2} and the
    hidden state to feed back (pre-norm; post-norm with `norm_output`, EAGLE-3.1).

    The token embedding (and the LM head for `head_type="target"`) is borrowed from the target with
    [`attach_target`]; it is never part of the drafter's checkpoint.
    """

    _keys_to_ignore_on_load_unexpected = [r"embed_tokens\.weight"]

    def __init__(self, config: SlimSpecDrafterConfig):
        super().__init__(config)
        width, eps = config.target_hidden_size, config.rms_norm_eps
        if config.norm_before_fc:  # EAGLE-3.1: one norm over the concatenated target states
            self.input_norm = LlamaRMSNorm(3 * width, eps=eps)
        if config.fc_norm:  # EAGLE-3.1: one norm per target layer
            self.fc_norm = nn.ModuleList(LlamaRMSNorm(width, eps=eps) for _ in range(3))
        self.fc = nn.Linear(3 * width, config.hidden_size, bias=False)
        self.layer = SlimSpecDrafterLayer(config)
        self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config)
        self.lm_head = build_head(config)
        self._embed_tokens = None  # borrowed, see attach_target
        self.post_init()
        # The decoding defaults (k, early stop, hybrid lookup, tree) live here, as for transformers' assistant models;
        # a `generate()` keyword overrides them per call. Saved as generation_config.json next to the weights.
        self.generation_config = draft_generation_config()
        install_generation_hook()  # idempotent: `target.generate(..., assistant_model=self)` decodes with SlimSpec

    # -- borrowing from the target -----------------------------------------------------------------------------
    def get_input_embeddings(self) -> nn.Module | None:
        return self._embed_tokens

    def set_input_embeddings(self, value: nn.Module) -> None:
        object.__setattr__(self, "_embed_tokens", value)  # not registered: never saved, never trained

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def attach_target(self, target: nn.Module) -> "SlimSpecDrafterForCausalLM":
        """Borrows the target's input embedding (and its LM head for `head_type="target"`); out of training, keeps
        its own head's weight in the faster memory order for this CPU and dtype (`fit_layout`, timed once)."""
        self.set_input_embeddings(target.get_input_embeddings())
        if isinstance(self.lm_head, TargetHead):
            self.lm_head.set_target_head(target.get_output_embeddings())
        elif not self.training and hasattr(self.lm_head, "fit_layout"):
            self.lm_head.fit_layout()
        return self

    def push_to_hub(self, repo_id: str, **kwargs):
        """Publishes weights, config, remote code and the SlimSpec model card (`slimspec_hf.interop.hub`); where the
        package is not installed (remote code), transformers' own `push_to_hub` with its generic card."""
        try:
            from slimspec_hf.interop.hub import push_to_hub
        except ImportError:
            return super().push_to_hub(repo_id, **kwargs)
        return push_to_hub(self, repo_id, **kwargs)

    def tie_weights(self, *args, **kwargs):
        return  # nothing to tie: the embedding is borrowed, the head is the drafter's own

    # -- checkpoints: safetensors only, checked before loading, written atomically ------------------------------
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        local = os.path.join(str(pretrained_model_name_or_path), kwargs.get("subfolder") or "")
        if os.path.isdir(local):
            check_safetensors_checkpoint(local)
        kwargs.setdefault("use_safetensors", True)
        model = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        if hasattr(model.lm_head, "store_column_major"):
            model.lm_head.store_column_major()  # loading materialises weights row-major
        # transformers loads generation_config.json only for models that generate on their own.
        hub_kwargs = {k: kwargs[k] for k in _GENERATION_CONFIG_KWARGS if kwargs.get(k) is not None}
        try:
            model.generation_config = GenerationConfig.from_pretrained(pretrained_model_name_or_path, **hub_kwargs)
        except OSError:
            pass  # a folder saved without generation_config.json keeps the defaults
        return model

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Like `PreTrainedModel.save_pretrained`, but files are written to a temporary folder first and then
        moved into place one by one, so an interrupted save never leaves a half-written file behind."""
        if kwargs.get("safe_serialization") is False:
            raise ValueError(
                "`safe_serialization=False` is not supported: SlimSpec drafters are saved as safetensors."
            )
        kwargs.pop("safe_serialization", None)
        if kwargs.get("push_to_hub"):
            return super().save_pretrained(save_directory, *args, **kwargs)  # uploads right after saving
        save_directory = os.fspath(save_directory)
        os.makedirs(save_directory, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-save-", dir=save_directory)
        try:
            super().save_pretrained(tmp, *args, **kwargs)
            self.generation_config.save_pretrained(tmp)  # transformers skips it for models that cannot generate
            written = set(os.listdir(tmp))
            for name in sorted(written):
                os.replace(os.path.join(tmp, name), os.path.join(save_directory, name))
            # Weights of an earlier save that this one did not rewrite (e.g. a single file replaced by shards)
            # would otherwise be loaded instead of, or next to, the new ones.
            for name in os.listdir(save_directory):
                stale = name.startswith("model") and name.endswith((".safetensors", ".safetensors.index.json"))
                if stale and name not in written:
                    os.remove(os.path.join(save_directory, name))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # -- forward -----------------------------------------------------------------------------------------------
    def embed(self, input_ids: torch.LongTensor) -> torch.Tensor:
        if self._embed_tokens is None:
            raise ValueError(
                "The drafter borrows the target's token embedding: call `drafter.attach_target(target)` or pass "
                "`inputs_embeds`."
            )
        return self._embed_tokens(input_ids)

    def fuse(self, target_features: torch.Tensor) -> torch.Tensor:
        """Maps the target's fused features (…, 3·d_t) to the drafter width (…, d)."""
        expected = 3 * self.config.target_hidden_size
        if target_features.shape[-1] != expected:
            raise ValueError(
                f"`target_features` must have last dimension 3 * target_hidden_size = {expected} (three target "
                f"layers concatenated), got {target_features.shape[-1]}."
            )
        features = target_features.to(self.fc.weight.dtype)
        if self.config.norm_before_fc:
            features = self.input_norm(features)
        if self.config.fc_norm:
            features = torch.cat([norm(part) for norm, part in zip(self.fc_norm, features.chunk(3, dim=-1))], dim=-1)
        return self.fc(features)

    def _step_states(self, target_features, hidden_states) -> torch.Tensor:
        """The states a step reads: the fused target features, or the drafter's own states (exactly one)."""
        if (target_features is None) == (hidden_states is None):
            raise ValueError(
                "Pass exactly one of `target_features` (the target's three layers, (B, T, 3·d_t)) and "
                "`hidden_states` (the drafter's own states fed back, (B, T, d))."
            )
        if target_features is not None:
            return self.fuse(target_features)
        if hidden_states.shape[-1] != self.config.hidden_size:
            raise ValueError(
                f"`hidden_states` are the drafter's own states, of width hidden_size = {self.config.hidden_size}; "
                f"got {hidden_states.shape[-1]}. Pass the target's features as `target_features=`."
            )
        return hidden_states

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary logits of pre-norm drafter states (…, d) → (…, V)."""
        return self.lm_head(self.norm(hidden_states))

    def feedback(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The state the next drafting step reads from the layer's pre-norm output: itself, or its final norm's
        output with `norm_output` (EAGLE-3.1)."""
        return self.norm(hidden_states) if self.config.norm_output else hidden_states

    def head_states(self, fed: torch.Tensor) -> torch.Tensor:
        """The LM head's input (…, d) from the states `forward` returns (`hidden_states`, the fed-back ones)."""
        return fed if self.config.norm_output else self.norm(fed)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        target_features: torch.Tensor | None = None,
        hidden_states: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: SlimSpecDrafterCache | None = None,
        use_cache: bool = False,
        logits_to_keep: int = 0,
        **kwargs,
    ) -> SlimSpecDrafterOutput:
        r"""
        input_ids (`torch.LongTensor` of shape `(B, T)`): tokens x_{t+1} (or pass `inputs_embeds`).
        target_features (`torch.Tensor` of shape `(B, T, 3·d_t)`): the target's three layers at t, concatenated.
        hidden_states (`torch.Tensor` of shape `(B, T, d)`): or the drafter's own states at t, fed back.
        position_ids (`torch.LongTensor` of shape `(B, T)`): positions t; defaults to continuing the cache.
        attention_mask (`torch.Tensor`): either a 2-D key mask `(B, past + T)` (1 = attend) or a boolean 4-D mask.
        logits_to_keep (`int`): if > 0, only the last `logits_to_keep` positions get logits; -1 for none.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `input_ids` and `inputs_embeds`.")
        hidden_states = self._step_states(target_features, hidden_states)
        if inputs_embeds is None:
            inputs_embeds = self.embed(input_ids)
        inputs_embeds = inputs_embeds.to(hidden_states.dtype)
        bsz, seq_len, _ = hidden_states.shape
        if use_cache and cache is None:
            cache = SlimSpecDrafterCache()
        past = cache.get_seq_length() if cache is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + seq_len, device=hidden_states.device)[None].expand(bsz, -1)
        mask = None
        if attention_mask is not None:
            if attention_mask.dim() == 2:
                keys = attention_mask[:, None, None, :].bool()  # (B, 1, 1, past+T)
                mask = keys & causal_mask(seq_len, attention_mask.shape[-1], hidden_states.device)
            else:
                mask = attention_mask.bool()
        cos, sin = self.rotary_emb(hidden_states, position_ids)
        out, _ = self.layer(inputs_embeds, hidden_states, cos, sin, attention_mask=mask, cache=cache)  # (B, T, d)
        logits = None
        if logits_to_keep >= 0:
            kept = out if logits_to_keep == 0 else out[:, -logits_to_keep:]
            logits = self.compute_logits(kept)
        return SlimSpecDrafterOutput(
            logits=logits, hidden_states=self.feedback(out), cache=cache if use_cache else None
        )

    # -- training-time test ------------------------------------------------------------------------------------
    def ttt_step(
        self,
        inputs_embeds: torch.Tensor,
        position_ids: torch.LongTensor,
        step: int,
        context: list[tuple[torch.Tensor, torch.Tensor]],
        attention_mask: torch.Tensor | None = None,
        target_features: torch.Tensor | None = None,
        hidden_states: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One unrolled training step (EAGLE-3's training-time test), returning the pre-norm states (B, T, d).

        Step 0 reads `target_features`, positions `position_ids`, causal attention; it starts `context`.
        Step k ≥ 1 reads the drafter's own step k-1 states (`hidden_states`); its query at position t attends to the
        step-0 keys of positions ≤ t and to its own chain's keys at t from steps 1..k, exactly what the drafter sees
        at inference when drafting the k-th token after t. RoPE positions of step k are shifted by k (t + k), the
        positions those drafted tokens hold at inference. `attention_mask` (B, T) masks padded keys. `context` (a
        list) is extended in place with this step's (keys, values). Runs through the layer's own forward, so
        gradient checkpointing applies.
        """
        if len(context) != step:
            raise ValueError(f"`context` must hold the {step} earlier steps' keys/values, got {len(context)}.")
        hidden_states = self._step_states(target_features, hidden_states)
        cos, sin = self.rotary_emb(hidden_states, position_ids + step)
        out, kv = self.layer(
            inputs_embeds.to(hidden_states.dtype),
            hidden_states,
            cos,
            sin,
            attention_mask=attention_mask,
            ttt_context=tuple(context),
        )
        context.append(kv)
        return out

    def ttt_unroll(self, inputs_embeds, target_features, position_ids, steps: int, attention_mask=None) -> list:
        """The training-time-test unroll over a sequence: `steps` drafting steps (`ttt_step`), step k reading at t
        the embedding of x_{t+k+1} (`inputs_embeds` (B, T, d) of x_0..x_{T-1}, shifted here; zero past the end) and
        the target's features (k = 0) or its own step k-1 state fed back. Returns each step's pre-norm states."""
        context, states = [], []
        for k in range(steps):
            shifted = torch.zeros_like(inputs_embeds)
            kept = max(inputs_embeds.shape[1] - k - 1, 0)  # rows shorter than the unroll have nothing left to shift in
            shifted[:, :kept] = inputs_embeds[:, k + 1 : k + 1 + kept]  # x_{t+k+1} at position t
            fed = {"target_features": target_features} if k == 0 else {"hidden_states": self.feedback(states[-1])}
            states.append(self.ttt_step(shifted, position_ids, k, context, attention_mask, **fed))  # (B, T, d)
        return states


def check_safetensors_checkpoint(folder: str) -> None:
    """Refuses a folder whose weights are not safetensors, or whose safetensors files are truncated."""
    from safetensors import SafetensorError, safe_open

    names = sorted(os.listdir(folder))
    tensors = [n for n in names if n.endswith(".safetensors")]
    pickled = [n for n in names if n.endswith((".bin", ".pt", ".pth", ".ckpt"))]
    if not tensors:
        found = f"found {pickled}" if pickled else "found no weights file"
        raise ValueError(
            f"{folder!r} holds no .safetensors weights ({found}); SlimSpec drafters load from safetensors only. "
            "Convert the weights with `safetensors.torch.save_file` or re-save with `save_pretrained`."
        )
    for name in tensors:
        path = os.path.join(folder, name)
        try:
            with safe_open(path, framework="pt"):
                pass  # the header is read and checked against the file's size
        except (SafetensorError, OSError, ValueError) as err:
            raise ValueError(
                f"{path!r} is truncated or not a safetensors file ({err}); re-save or re-download it."
            ) from None


def ttt_attention(
    q: torch.Tensor,
    context: list[tuple[torch.Tensor, torch.Tensor]],
    key_mask: torch.Tensor | None,
    num_groups: int,
) -> torch.Tensor:
    """Attention of step k = len(context) - 1: step-0 keys causally, plus the diagonal of steps 1..k.

    q (B, H, T, hd); context[j] = (k_j, v_j), each (B, H_kv, T, hd). Returns (B, H, T, hd).
    """
    k0, v0 = context[0]
    if num_groups > 1:
        expand = lambda t: t.repeat_interleave(num_groups, dim=1)  # noqa: E731
    else:
        expand = lambda t: t  # noqa: E731
    scale = 1.0 / math.sqrt(q.shape[-1])
    seq_len = q.shape[2]
    scores = torch.matmul(q, expand(k0).transpose(-1, -2)) * scale  # (B, H, T, T)
    allowed = causal_mask(seq_len, seq_len, q.device)  # (T, T)
    if key_mask is not None:
        # A padded query still sees its own key, so that no softmax row is empty (NaN gradients); real queries
        # never see padded keys.
        own = torch.eye(seq_len, dtype=torch.bool, device=q.device)
        allowed = allowed & (key_mask[:, None, None, :].bool() | own)
    scores = scores.masked_fill(~allowed, float("-inf"))
    diag = [(q * expand(k_j)).sum(-1, keepdim=True) * scale for k_j, _ in context[1:]]  # each (B, H, T, 1)
    probs = torch.softmax(torch.cat([scores, *diag], dim=-1).float(), dim=-1).to(q.dtype)  # (B, H, T, T + k)
    out = torch.matmul(probs[..., :seq_len], expand(v0))
    for j, (_, v_j) in enumerate(context[1:]):
        out = out + probs[..., seq_len + j : seq_len + j + 1] * expand(v_j)
    return out


__all__ = [
    "LowRankHead",
    "FullHead",
    "TrimmedHead",
    "TargetHead",
    "low_rank_factors",
    "SlimSpecDrafterCache",
    "SlimSpecDrafterPreTrainedModel",
    "SlimSpecDrafterForCausalLM",
    "SlimSpecDrafterOutput",
    "ttt_attention",
    "causal_mask",
]
