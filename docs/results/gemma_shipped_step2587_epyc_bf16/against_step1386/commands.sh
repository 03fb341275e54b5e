# 2-core AMD EPYC with AVX-512 bf16, bf16, 1 thread, the training job paused; step1386 = the drafter folder at 616e951
# (git checkout 616e951 -- drafters/gemma-3-270m-slimspec), step 2587 = the shipped folder; both with their own defaults
OMP_NUM_THREADS=1 slimspec bench --target gemma-3-270m --drafter step1386 --name step1386 \
    --drafter drafters/gemma-3-270m-slimspec --name step2587 --dataset spec_bench --categories coding qa math_reasoning \
    --limit 4 --max-new-tokens 96 --temperatures 0 0.7 --dtype bfloat16 --threads 1 --no-progress --output-dir .
