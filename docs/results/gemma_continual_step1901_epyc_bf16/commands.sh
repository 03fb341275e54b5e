# 2-core AMD EPYC with AVX-512 bf16, bf16, 1 thread, nothing else running (the training job paused);
# RUN_FOLDER: a copy of checkpoints/gemma-3-270m-slimspec at step 1901 of the continual run
OMP_NUM_THREADS=1 slimspec bench --target gemma-3-270m --drafter drafters/gemma-3-270m-slimspec --name step1386 \
    --drafter RUN_FOLDER --name run --dataset spec_bench \
    --categories coding qa math_reasoning --limit 4 --max-new-tokens 96 --temperatures 0 -k 6 --draft-lookup \
    --dtype bfloat16 --threads 1
