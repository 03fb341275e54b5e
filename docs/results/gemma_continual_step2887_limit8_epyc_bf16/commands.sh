# 2-core AMD EPYC with AVX-512 bf16, bf16, 1 thread; τ only: the training job and a data-regeneration job ran on the
# machine's two cores beside it, so its tokens a second and drafter-step times are not comparable (τ does not depend on them)
OMP_NUM_THREADS=1 slimspec bench --target gemma-3-270m --drafter drafters/gemma-3-270m-slimspec --name step2587 \
    --drafter <the run folder at step 2887> --name step2887 --dataset spec_bench --categories coding qa math_reasoning \
    --limit 8 --max-new-tokens 96 --temperatures 0 -k 6 --draft-lookup --dtype bfloat16 --threads 1
