# 2-core AMD EPYC with AVX-512 bf16, bf16, 1 thread, the training job paused; the run folder at step 2587 (536bd0b) copied with the remote code
OMP_NUM_THREADS=1 slimspec bench --target gemma-3-270m --drafter drafters/gemma-3-270m-slimspec --name step1386 \
    --drafter step2587 --name step2587 --dataset spec_bench --categories coding qa math_reasoning --limit 8 \
    --max-new-tokens 96 --temperatures 0 -k 6 --draft-lookup --dtype bfloat16 --threads 1 --no-progress --output-dir .
