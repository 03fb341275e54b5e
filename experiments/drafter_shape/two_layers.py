# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""A drafter with a second decoder layer, trained and scored teacher-forced — a measurement, not a package feature.

    python experiments/drafter_shape/two_layers.py prepare SRC OUT        # SRC: a continual run folder
    python experiments/drafter_shape/two_layers.py train ARGS...          # = slimspec train ARGS..., two layers known
    python experiments/drafter_shape/two_layers.py eval ARGS...           # = bench_training.py ARGS..., the same

The package's drafter has one decoder layer. This script adds a second one in its own process only: `layer2`, a plain
Llama decoder layer of the drafter's width (input norm, attention reading d, residual, SwiGLU MLP), after the first
layer, before the final norm — the head and the state fed back both read its output. A folder whose config has
`extra_layers: 1` gets it; in training-time test it attends like the first layer (step k's queries see the step-0
keys up to t and their own chain's keys of steps 1..k). `prepare` copies SRC (its `continual_state.json` too, so the
variant continues the same data order from the same place) and initialises `layer2` from the target's last decoder
layer with its two output projections (`o_proj`, `down_proj`) zero: the drafter starts as the same function.
Decoding, exports and the vLLM plugin know nothing of `layer2`; it is priced in `second_layer_cost.py`.
"""

from __future__ import annotations

import json
import runpy
import shutil
import sys
from pathlib import Path

import torch
from torch import nn


HERE = Path(__file__).resolve().parent
BENCH_TRAINING = HERE.parent / "training_throughput" / "bench_training.py"


def install() -> None:
    """Teaches `SlimSpecDrafterForCausalLM` (in this process) to build and run `layer2` for `extra_layers: 1`."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from slimspec_hf import modeling_slimspec as m

    class PlainAttention(m.SlimSpecDrafterAttention):
        def __init__(self, config):
            super().__init__(config)
            d, bias = config.hidden_size, config.attention_bias
            self.q_proj = nn.Linear(d, self.num_heads * self.head_dim, bias=bias)
            self.k_proj = nn.Linear(d, self.num_kv_heads * self.head_dim, bias=bias)
            self.v_proj = nn.Linear(d, self.num_kv_heads * self.head_dim, bias=bias)

    class SecondLayer(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            self.self_attn = PlainAttention(config)
            self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            self.mlp = m.SlimSpecDrafterMLP(config)

        def forward(self, hidden_states, cos, sin, attention_mask, ttt_context):
            attn, kv = self.self_attn(self.input_layernorm(hidden_states), cos, sin, attention_mask, None, ttt_context)
            hidden_states = hidden_states + attn
            return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states)), kv

    cls = m.SlimSpecDrafterForCausalLM
    original_init, original_step = cls.__init__, cls.ttt_step

    def __init__(self, config):
        original_init(self, config)
        if getattr(config, "extra_layers", 0):
            self.layer2 = SecondLayer(config)

    def ttt_step(self, inputs_embeds, position_ids, step, context, attention_mask=None, **fed):
        out = original_step(self, inputs_embeds, position_ids, step, context, attention_mask, **fed)
        if not hasattr(self, "layer2"):
            return out
        if step == 0:
            self._layer2_context = []  # one unroll at a time in this process
        cos, sin = self.rotary_emb(out, position_ids + step)
        out, kv = self.layer2(out, cos, sin, attention_mask, tuple(self._layer2_context))
        self._layer2_context.append(kv)
        return out

    def forward(self, *args, **kwargs):
        if hasattr(self, "layer2"):
            raise NotImplementedError("a two-layer drafter is scored teacher-forced here; it does not decode")
        return original_forward(self, *args, **kwargs)

    original_forward = cls.forward
    cls.__init__, cls.ttt_step, cls.forward = __init__, ttt_step, forward


def prepare(src: Path, out: Path) -> None:
    from safetensors.torch import load_file, save_file

    from slimspec_hf.targets import load_target

    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    config = json.loads((out / "config.json").read_text())
    tensors = load_file(out / "model.safetensors")
    dtype = tensors["fc.weight"].dtype
    target, _ = load_target("embedded", dtype=torch.float32)
    last = target.model.layers[-1]
    names = {
        "input_layernorm.weight": last.input_layernorm.weight,
        "post_attention_layernorm.weight": last.post_attention_layernorm.weight,
        **{
            f"self_attn.{p}.weight": getattr(last.self_attn, p).weight
            for p in ("q_proj", "k_proj", "v_proj", "o_proj")
        },
        **{f"mlp.{p}.weight": getattr(last.mlp, p).weight for p in ("gate_proj", "up_proj", "down_proj")},
    }
    for name, weight in names.items():
        weight = weight.detach().clone()
        if name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
            weight.zero_()  # the second layer adds nothing at the start: the same function as SRC
        tensors[f"layer2.{name}"] = weight.to(dtype).contiguous()
    config["extra_layers"] = 1
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"{out}: layer2 from the target's layer {len(target.model.layers) - 1}, o_proj and down_proj zero")


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in ("prepare", "train", "eval"):
        sys.exit("usage: two_layers.py prepare SRC OUT | train ARGS... | eval ARGS...")
    command, rest = sys.argv[1], sys.argv[2:]
    if command == "prepare":
        if len(rest) != 2:
            sys.exit(f"prepare: expected SRC OUT, received {rest}; give a run folder and a new folder.")
        return prepare(Path(rest[0]), Path(rest[1]))
    install()
    if command == "train":
        from slimspec_hf.cli import main as cli

        sys.argv = ["slimspec", "train", *rest]
        sys.exit(cli())
    sys.argv = [str(BENCH_TRAINING), *rest]
    runpy.run_path(str(BENCH_TRAINING), run_name="__main__")


if __name__ == "__main__":
    main()
