"""What a verification round costs the target, against one plain decoding step, and the τ each k must reach.

    python scripts/verify_cost.py [--target embedded] [--context 256] [--max-k 8] [--repeats 9] [--threads 1]
        [--drafter PATH]

Times the target's cached forward over n = 1 … max_k + 1 new tokens (n = 1 is a plain decoding step; n = k + 1
verifies k drafted tokens), median of `repeats`, interleaved. With `--drafter`, also times one drafter step and
prints, per k, the break-even acceptance length τ* = (T_verify(k+1) + k·T_draft) / T_1: speculative decoding
beats the target alone only where the measured τ exceeds it. On a GPU T_verify is nearly flat in n; on a CPU it
is not, which is why small k pays there.
"""

import argparse
import statistics
import time

import torch


def _time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--drafter", default=None)
    parser.add_argument("--context", type=int, default=256, help="cached positions before the timed forward")
    parser.add_argument("--max-k", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)

    from transformers import AutoModelForCausalLM

    from slimspec_hf.evaluation.timing import verification_costs
    from slimspec_hf.targets import load_target

    target, _ = load_target(args.target, dtype=torch.float32)
    vocab = target.config.vocab_size
    prefix = torch.randint(0, vocab, (1, args.context), generator=torch.Generator().manual_seed(0))
    layer_ids = None
    drafter = None
    if args.drafter:
        drafter = AutoModelForCausalLM.from_pretrained(args.drafter, dtype=target.dtype).eval().attach_target(target)
        layer_ids = list(drafter.config.target_layer_ids)
    sizes = list(range(1, args.max_k + 2))
    t = verification_costs(target, sizes, context=args.context, repeats=args.repeats, layer_ids=layer_ids)

    t_draft = None
    if drafter is not None:
        from slimspec_hf.modeling_slimspec import SlimSpecDrafterCache

        d_t = drafter.config.target_hidden_size
        cache = SlimSpecDrafterCache()
        drafter(
            input_ids=prefix[:, 1:],
            target_features=torch.randn(1, args.context - 1, 3 * d_t),
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        state = torch.randn(1, 1, drafter.config.hidden_size)
        length = cache.get_seq_length()

        def step():
            cache.crop(length)
            drafter(
                input_ids=prefix[:, -1:],
                hidden_states=state,
                position_ids=torch.tensor([[length]]),
                cache=cache,
                use_cache=True,
            )

        t_draft = _time(step, args.repeats * 3)

    print(f"target {args.target}, context {args.context}, {args.threads} thread(s), median of {args.repeats}")
    print("| new tokens n | T(n) ms | T(n) / T(1) |" + (" k = n-1 | break-even τ* |" if t_draft else ""))
    print("|---:|---:|---:|" + ("---:|---:|" if t_draft else ""))
    for n in sizes:
        row = f"| {n} | {t[n] * 1e3:.1f} | {t[n] / t[1]:.2f} |"
        if t_draft and n > 1:
            k = n - 1
            row += f" {k} | {(t[n] + k * t_draft) / t[1]:.2f} |"
        elif t_draft:
            row += " – | – |"
        print(row)
    if t_draft:
        print(f"drafter step: {t_draft * 1e3:.2f} ms ({args.drafter})")


if __name__ == "__main__":
    main()
