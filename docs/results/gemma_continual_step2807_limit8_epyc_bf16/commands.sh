# 2-core AMD EPYC with AVX-512 bf16, bf16, 2 threads, nothing else running; τ compared side by side (both drafters in
# one run); the run folder at step 2807 (220 steps from the shipped step 2587 on 11,972 answers, at 1e-4)
OMP_NUM_THREADS=2 slimspec bench --target gemma-3-270m --drafter drafters/gemma-3-270m-slimspec --name step2587 \
    --drafter <the run folder at step 2807> --name step2807 --dataset spec_bench --categories coding qa math_reasoning \
    --limit 8 --max-new-tokens 96 --temperatures 0 -k 6 --draft-lookup --dtype bfloat16 --threads 2
