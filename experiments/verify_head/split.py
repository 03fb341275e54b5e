"""What a Gemma-3-270M verification of w tokens spends in its backbone and in its 262,144-row LM head, bf16.

    OMP_NUM_THREADS=1 python experiments/verify_head/split.py [--widths 1 4 8 12 16 24] [--context 256] [--repeats 7]

Times, after `--context` cached positions, the backbone's forward over w new tokens (its cache cropped back after
each) and the LM head over w rows with the kernel the decoding loop uses (`head_rows`), medians in ms."""

import argparse
import statistics
import time

import torch

from slimspec_hf.targets import load_embedded_target
from slimspec_hf.verification_slimspec import head_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--widths", type=int, nargs="+", default=[1, 4, 8, 12, 16, 24])
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, _ = load_embedded_target("gemma-3-270m", dtype=torch.bfloat16)
    backbone, head = model.model, model.get_output_embeddings()
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(10, 20000, (1, args.context), generator=generator)
    with torch.no_grad():
        out = backbone(input_ids=prompt, use_cache=True)
        cache = out.past_key_values
        print(f"device cpu, bf16, 1 thread, {args.context} cached positions; medians of {args.repeats}, ms")
        print("| w | backbone | LM head | head share |")
        print("|---:|---:|---:|---:|")
        for w in args.widths:
            ids = torch.randint(10, 20000, (1, w), generator=generator)
            positions = torch.arange(args.context, args.context + w)[None]
            back, top = [], []
            for _ in range(args.repeats + 1):
                start = time.perf_counter()
                hidden = backbone(input_ids=ids, position_ids=positions, cache=cache, use_cache=True)
                middle = time.perf_counter()
                head_rows(head, hidden.last_hidden_state)
                end = time.perf_counter()
                cache.crop(-w)  # drop the w timed tokens
                back.append(middle - start)
                top.append(end - middle)
            b, h = statistics.median(back[1:]) * 1e3, statistics.median(top[1:]) * 1e3
            print(f"| {w} | {b:.1f} | {h:.1f} | {h / (b + h):.0%} |")


if __name__ == "__main__":
    main()
