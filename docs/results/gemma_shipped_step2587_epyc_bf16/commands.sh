# 2-core AMD EPYC with AVX-512 bf16, bf16, 1 thread, the training job paused; the run folder at step 2587 (536bd0b) copied with the remote code (shipped from it)
OMP_NUM_THREADS=1 slimspec bench --target gemma-3-270m --drafter step2587 --name slimspec \
    --merged-head --dataset spec_bench --categories coding qa math_reasoning --limit 4 --max-new-tokens 96 \
    --temperatures 0 0.7 --dtype bfloat16 --threads 1 --save-acceptance --no-progress --output-dir .
