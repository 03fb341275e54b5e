# 2-core AMD EPYC with AVX-512 bf16, bf16, 1 thread, beside the training job (τ only: tokens per verification do not
# depend on the machine's load; the tok/s columns do and are not compared); the run folder at step 2847 (260 steps
# from the shipped step 2587 on 12,996 answers, at a constant 2e-5). The shipped step 2587 on the same command:
# docs/results/gemma_continual_step2807_limit8_epyc_bf16/ (τ 1.65 / 3.58).
OMP_NUM_THREADS=1 slimspec bench --target gemma-3-270m --drafter <the run folder at step 2847> --name step2847 \
    --dataset spec_bench --categories coding qa math_reasoning --limit 8 --max-new-tokens 96 --temperatures 0 -k 6 \
    --draft-lookup --dtype bfloat16 --threads 1
# the run: make train-gemma's command with --learning_rate 2e-5, from a copy of drafters/gemma-3-270m-slimspec
OMP_NUM_THREADS=1 slimspec train --config recipes/gemma-3-270m/slimspec/config_embedded_v1.yaml --max_train_seconds 9000 \
    --learning_rate 2e-5
