# 2-core AMD EPYC with AVX-512 bf16, bf16, 1 thread, nothing else running (training and data generation paused); code at c25d389 (a call keeps its first two rounds of each width, then its 16th, 32nd, 64th...)
export SLIMSPEC_CACHE=NEW_FOLDER OMP_NUM_THREADS=1   # gguf, smollm2-135m-instruct-fp32, locks linked from ~/.cache/slimspec_hf
slimspec bench --target embedded --drafter drafters/smollm2-135m-instruct-slimspec --name slimspec --dataset spec_bench \
    --categories math_reasoning qa translation --limit 1 --max-new-tokens 96 --temperatures 0 --draft-lookup \
    --draft-shape auto --threads 1 --no-progress --output-dir prime
# command C
slimspec bench --target embedded --drafter drafters/smollm2-135m-instruct-slimspec --name slimspec --dataset mt_bench \
    --limit 8 --max-new-tokens 96 --temperatures 0 0.7 --draft-lookup --draft-shape auto fixed --threads 1 \
    --batch-sizes 4 8 --no-progress --output-dir C
