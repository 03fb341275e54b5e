"""What one SlimSpec drafter step costs on this CPU, against its matmuls alone (issue 3's overhead check).

    python experiments/drafter_step_cost/drafter_step_cost.py [--drafter DIR] [--context 200] [--rounds 300]

Times, interleaved: one cached drafter step (batch 1, one new position after `--context` cached ones), the same
step's linear layers alone (same weights, same order, so the weights stream from memory as in the step), and the
head alone. Prints medians; overhead = step − matmuls (attention, norms, RoPE, cache update, Python).
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drafter", default=None, help="drafter folder (default: SVD-initialised, untrained)")
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)

    import slimspec_hf
    from slimspec_hf import SlimSpecDrafterCache, SlimSpecDrafterConfig, SlimSpecDrafterForCausalLM

    target, _ = slimspec_hf.load_embedded_target(dtype=torch.float32)
    if args.drafter:
        drafter = SlimSpecDrafterForCausalLM.from_pretrained(args.drafter)
    else:
        drafter = SlimSpecDrafterForCausalLM(SlimSpecDrafterConfig.from_target_config(target.config))
        drafter.lm_head.init_from_dense(target.lm_head.weight)
    drafter.eval().attach_target(target)
    cfg = drafter.config
    cache = SlimSpecDrafterCache()
    drafter(
        input_ids=torch.randint(0, cfg.vocab_size, (1, args.context)),
        target_features=torch.randn(1, args.context, 3 * cfg.target_hidden_size),
        cache=cache,
        use_cache=True,
    )
    token, state = torch.tensor([[5]]), torch.randn(1, 1, cfg.hidden_size)
    linears = [m for m in drafter.modules() if isinstance(m, torch.nn.Linear) and m is not drafter.fc]
    inputs = {m.in_features: torch.randn(1, 1, m.in_features) for m in linears}

    def step():
        cache.crop(args.context)
        drafter(input_ids=token, hidden_states=state, cache=cache, use_cache=True)

    def matmuls():
        for m in linears:
            F.linear(inputs[m.in_features], m.weight)

    def head():
        drafter.lm_head(inputs[cfg.hidden_size])

    times = {"step": [], "matmuls": [], "head": []}
    for _ in range(args.rounds):
        for name, fn in (("step", step), ("matmuls", matmuls), ("head", head)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    weights_mb = sum(m.weight.numel() * m.weight.element_size() for m in linears) / 2**20
    print(f"head_type={cfg.head_type} r={cfg.head_rank} threads={args.threads} context={args.context}")
    print(
        f"drafter step {ms['step']:.3f} ms | its {len(linears)} matmuls alone {ms['matmuls']:.3f} ms "
        f"({weights_mb:.1f} MiB of weights) | head alone {ms['head']:.3f} ms | "
        f"overhead {ms['step'] - ms['matmuls']:.3f} ms ({(ms['step'] - ms['matmuls']) / ms['step']:.0%} of the step)"
    )


if __name__ == "__main__":
    main()
