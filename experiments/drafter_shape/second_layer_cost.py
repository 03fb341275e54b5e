# Copyright 2026 The slimspec-hf authors. Licensed under the Apache License, Version 2.0.
"""What a second decoder layer would add to one draft step of the SmolLM2 drafter, against the target's step.

    OMP_NUM_THREADS=1 python experiments/drafter_shape/second_layer_cost.py [--dtype bfloat16] [--context 200]

Times, interleaved, medians: one cached step of the shipped drafter (one new position after `--context` cached
ones), one cached step of a plain Llama decoder layer of the drafter's width (what a second layer would run: its
input is the first layer's output, d wide, where the first layer reads 2d), and one cached decoding step of the
target. A second layer is not built into the drafter; this prices it before anyone trains one.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    dtype = getattr(torch, args.dtype)

    from transformers import DynamicCache, LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    import slimspec_hf
    from slimspec_hf import SlimSpecDrafterCache
    from slimspec_hf.paths import embedded_drafter_dir

    target, _ = slimspec_hf.load_embedded_target(dtype=dtype)
    drafter = slimspec_hf.SlimSpecDrafterForCausalLM.from_pretrained(embedded_drafter_dir(), dtype=dtype).eval()
    drafter.attach_target(target)
    cfg = drafter.config
    n = args.context

    cache = SlimSpecDrafterCache()
    features = torch.randn(1, n, 3 * cfg.target_hidden_size, dtype=dtype)
    drafter(input_ids=torch.randint(0, cfg.vocab_size, (1, n)), target_features=features, cache=cache, use_cache=True)
    token, state = torch.tensor([[5]]), torch.randn(1, 1, cfg.hidden_size, dtype=dtype)

    layer_cfg = LlamaConfig(
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        rms_norm_eps=cfg.rms_norm_eps,
        num_hidden_layers=1,
        attn_implementation="sdpa",
    )
    second = LlamaDecoderLayer(layer_cfg, layer_idx=0).to(dtype).eval()
    rope = LlamaRotaryEmbedding(layer_cfg)
    layer_cache = DynamicCache(config=layer_cfg)
    second(torch.randn(1, n, cfg.hidden_size, dtype=dtype), attention_mask=None, past_key_values=layer_cache,
           position_embeddings=rope(torch.zeros(1, 1, dtype=dtype), torch.arange(n)[None]), use_cache=True)  # fmt: skip
    x, position = torch.randn(1, 1, cfg.hidden_size, dtype=dtype), torch.tensor([[n]])
    embeddings = rope(x, position)

    target_cache = DynamicCache(config=target.config)
    target(torch.randint(0, cfg.vocab_size, (1, n)), past_key_values=target_cache, use_cache=True)

    def drafter_step():
        cache.crop(n)
        drafter(input_ids=token, hidden_states=state, cache=cache, use_cache=True)

    def second_layer_step():
        second(x, attention_mask=None, past_key_values=layer_cache, position_embeddings=embeddings, use_cache=True)
        layer_cache.crop(-1)  # back to the context

    def target_step():
        target(token, past_key_values=target_cache, use_cache=True, logits_to_keep=1)
        target_cache.crop(-1)

    steps = {"drafter step": drafter_step, "second layer": second_layer_step, "target step": target_step}
    times = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    ms = {name: 1e3 * statistics.median(values) for name, values in times.items()}
    print(f"dtype {args.dtype}, 1 thread, context {n}, {args.rounds} interleaved rounds, medians")
    print("| step | ms | ÷ drafter step |\n|---|---:|---:|")
    for name, value in ms.items():
        print(f"| {name} | {value:.2f} | {value / ms['drafter step']:.2f} |")
    print(f"a second layer adds {ms['second layer'] / ms['drafter step']:.0%} to a draft step, "
          f"{ms['second layer'] / ms['target step']:.1%} of a target step")  # fmt: skip


if __name__ == "__main__":
    main()
