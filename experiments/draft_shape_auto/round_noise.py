"""The same batch decoded twice with one fixed shape (greedy, so the same rounds over the same cache lengths): each
round's time, its verification's (the target's backbone), the rows and cache slots it read — how far two runs of the
same round differ on this machine, where `auto` prices shapes from such rounds.

    OMP_NUM_THREADS=1 python experiments/draft_shape_auto/round_noise.py --out rounds.jsonl [--batch-size 8]
        [--repeats 2] [--batches 2] [--drafter drafters/smollm2-135m-instruct-slimspec] [--dtype bfloat16]

Prints, per batch, the median and largest relative difference between the repeats' verifications of the same round.
"""

import argparse
import json
import statistics
import time

import torch

import slimspec_hf  # noqa: F401  (registers the drafter classes)
from slimspec_hf import decoding_slimspec
from slimspec_hf.commands.common import load_models
from slimspec_hf.evaluation.batching import left_padded_batch
from slimspec_hf.evaluation.benchmark import default_questions_path, load_questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="embedded")
    parser.add_argument("--drafter", default="drafters/smollm2-135m-instruct-slimspec")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    target, tokenizer, (drafter,) = load_models(args.target, [args.drafter], args.dtype, threads=1)
    questions = load_questions(default_questions_path("mt_bench"), dataset="mt_bench")
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q["prompt"]}], tokenize=False, add_generation_prompt=True
        )
        for q in questions
    ]
    # chain 1 + lookup at every batch size: the shape `auto` tried at 8 rows
    shape = dict(
        num_assistant_tokens=1, draft_lookup=True, draft_shape="fixed", draft_tree_size=0, draft_max_batch_size=0
    )
    rounds, current = [], {}
    round_, verify = decoding_slimspec.SpeculativeDecoder.round, decoding_slimspec.SpeculativeDecoder.verify

    def timed_verify(self, trees):
        start = time.perf_counter()
        out = verify(self, trees)
        current["verify_ms"] = 1000 * (time.perf_counter() - start)
        return out

    def timed_round(self):
        current.update(rows=len(self.active), slots=int(self.slots.valid.shape[1]))
        start = time.perf_counter()
        out = round_(self)
        current["round_ms"] = 1000 * (time.perf_counter() - start)
        rounds.append(dict(current))
        return out

    decoding_slimspec.SpeculativeDecoder.round = timed_round
    decoding_slimspec.SpeculativeDecoder.verify = timed_verify
    with open(args.out, "w", encoding="utf-8") as out:
        for repeat in range(args.repeats):
            for batch in range(args.batches):
                chunk = prompts[batch * args.batch_size : (batch + 1) * args.batch_size]
                inputs = left_padded_batch(tokenizer, chunk, target.device)
                rounds.clear()
                start = time.perf_counter()
                with torch.inference_mode():
                    target.generate(
                        **inputs, max_new_tokens=args.max_new_tokens, do_sample=False, assistant_model=drafter, **shape
                    )
                seconds = time.perf_counter() - start
                print(f"repeat {repeat} batch {batch}: {seconds:.2f} s, {len(rounds)} rounds", flush=True)
                for i, r in enumerate(rounds):
                    out.write(json.dumps({"repeat": repeat, "batch": batch, "round": i, **r}) + "\n")
    with open(args.out, encoding="utf-8") as kept:
        records = [json.loads(line) for line in kept]
    for batch in range(args.batches):
        runs = [[r for r in records if r["batch"] == batch and r["repeat"] == k] for k in range(args.repeats)]
        pairs = [
            (a["verify_ms"], b["verify_ms"])
            for first, other in zip(runs, runs[1:])
            for a, b in zip(first, other)
            if (a["rows"], a["slots"]) == (b["rows"], b["slots"])
        ]
        if pairs:
            diffs = [abs(a - b) / min(a, b) for a, b in pairs]
            print(
                f"batch {batch}: {len(pairs)} rounds paired, verification differs by a median "
                f"{statistics.median(diffs):.0%} (largest {max(diffs):.0%}) between repeats"
            )


if __name__ == "__main__":
    main()
