# 2-core AMD EPYC with AVX-512 bf16, bf16, 1 thread, nothing else running; costs folder as earlier runs left it
OMP_NUM_THREADS=1 python experiments/draft_shape_auto/yield_scatter.py --out rounds.jsonl -- \
    --target embedded --drafter drafters/smollm2-135m-instruct-slimspec --name slimspec --dataset mt_bench \
    --limit 2 --max-new-tokens 96 --temperatures 0 --draft-lookup --draft-shape auto --threads 1 --no-progress \
    --output-dir out
python experiments/draft_shape_auto/yield_scatter.py --out rounds.jsonl --summary > summary.md
