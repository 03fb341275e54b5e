"""How far one round's tokens scatter about what its `auto` choice predicted: runs `slimspec bench` with a recorder
of every round the choice counts (`ShapeTuner.observe`: the tokens a row gained beyond the target's own, measured and
predicted, and the shape's factor `CostLog.yields.relative` then), then prints per shape its rounds, its ratio over
them, a round's scatter in units of its mean prediction, and its ratio over each half of its rounds.

    OMP_NUM_THREADS=1 python experiments/draft_shape_auto/yield_scatter.py --out rounds.jsonl -- \\
        --target embedded --drafter drafters/smollm2-135m-instruct-slimspec --name slimspec --dataset mt_bench \\
        --limit 2 --max-new-tokens 96 --temperatures 0 --draft-lookup --draft-shape auto --threads 1 --no-progress \\
        --output-dir OUT
    python experiments/draft_shape_auto/yield_scatter.py --out rounds.jsonl --summary   # the table again

The scatter sets what a shape's own ratio can tell (`ShapeRatios.prior`).
"""

import argparse
import json
import math
import statistics
import sys


def record(out_path: str, bench_args: list[str]) -> int:
    from slimspec_hf import shapes_slimspec
    from slimspec_hf.commands.bench import main as bench

    observe = shapes_slimspec.ShapeTuner.observe
    out = open(out_path, "a", encoding="utf-8")

    def recorded(
        self, shape, verify_seconds, draft_steps, accepted, width=None, rows=None, seconds=None, yielded=None
    ):
        counted = (rows is None or rows == self.log.batch_size) and not self.probing and self.choice is not None
        predicted = self.choice.tokens.get(str(shape)) if counted else None
        if predicted is not None and yielded is not None:
            row = {"rows": self.log.batch_size, "shape": str(shape), "measured": yielded - 1.0}
            row.update(predicted=predicted - 1.0, factor=self.log.yields.relative(str(shape)))
            out.write(json.dumps(row) + "\n")
        return observe(self, shape, verify_seconds, draft_steps, accepted, width, rows, seconds, yielded)

    shapes_slimspec.ShapeTuner.observe = recorded
    try:
        return bench(bench_args)
    finally:
        out.close()


def summary(path: str) -> None:
    rounds = [json.loads(line) for line in open(path, encoding="utf-8")]
    by_shape: dict[str, list[dict]] = {}
    for row in rounds:
        by_shape.setdefault(row["shape"], []).append(row)
    pooled = sum(r["measured"] for r in rounds) / sum(r["predicted"] for r in rounds)
    print(f"{len(rounds)} rounds, measured over predicted over all of them {pooled:.3f}\n")
    print("| shape | rounds | mean prediction | ratio | a round's scatter | its error over them | halves |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for shape, rows in sorted(by_shape.items(), key=lambda item: -len(item[1])):
        measured, predicted = [r["measured"] for r in rows], [r["predicted"] for r in rows]
        mean = statistics.mean(predicted)
        scatter = statistics.pstdev(measured) / mean if len(rows) > 1 else float("nan")
        half = len(rows) // 2
        halves = [sum(measured[a:b]) / max(sum(predicted[a:b]), 1e-9) for a, b in ((0, half), (half, len(rows)))]
        print(
            f"| {shape} | {len(rows)} | {mean:.2f} | {sum(measured) / sum(predicted):.3f} | {scatter:.2f} "
            f"| {scatter / math.sqrt(len(rows)):.3f} | {halves[0]:.2f}, {halves[1]:.2f} |"
        )


def main() -> int:
    argv = sys.argv[1:]
    own, bench_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the rounds, one JSON line each (appended)")
    parser.add_argument("--summary", action="store_true", help="only print the table of --out")
    args = parser.parse_args(own)
    if not args.summary:
        code = record(args.out, bench_args)
        if code:
            return code
    summary(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
