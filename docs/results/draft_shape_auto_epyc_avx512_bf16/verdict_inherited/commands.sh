#!/bin/bash
# Command C (--limit 4) from a new costs folder primed by batch-1 greedy calls, nothing else running (a training job
# on the other core paused), then experiments/draft_shape_auto/round_noise.py. Run from the repository root.
OUT=${1:-/tmp/verdict_inherited}; C=$OUT/cache; mkdir -p $C
for d in gguf smollm2-135m-instruct-fp32 locks; do ln -sfn ~/.cache/slimspec_hf/$d $C/$d; done
export SLIMSPEC_CACHE=$C OMP_NUM_THREADS=1
B=".venv/bin/slimspec bench --target embedded --drafter drafters/smollm2-135m-instruct-slimspec --name slimspec"
$B --dataset spec_bench --categories math_reasoning qa translation --limit 1 --max-new-tokens 96 --temperatures 0 --draft-lookup --draft-shape auto --threads 1 --no-progress --output-dir $OUT/prime
$B --dataset mt_bench --limit 4 --max-new-tokens 96 --temperatures 0 0.7 --draft-lookup --draft-shape auto fixed --threads 1 --batch-sizes 4 8 --no-progress --output-dir $OUT/batches
.venv/bin/python experiments/draft_shape_auto/round_noise.py --out $OUT/rounds.jsonl
