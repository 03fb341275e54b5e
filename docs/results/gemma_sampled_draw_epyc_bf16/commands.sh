# 2-core AMD EPYC with AVX-512 bf16, bf16, 1 thread, the training job paused; code at 3cbaf66 (every draw by `draw`)
OMP_NUM_THREADS=1 slimspec bench --target gemma-3-270m --drafter drafters/gemma-3-270m-slimspec --name slimspec \
    --merged-head --dataset spec_bench --categories coding qa math_reasoning --limit 4 --max-new-tokens 96 \
    --temperatures 0.7 --dtype bfloat16 --threads 1 --no-progress --output-dir .
