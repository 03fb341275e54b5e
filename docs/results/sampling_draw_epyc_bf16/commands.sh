# 2-core AMD EPYC with AVX-512 bf16, bf16, 1 thread, nothing else running (the training job paused); code at 3cbaf66
OMP_NUM_THREADS=1 python experiments/sampling_draw/ab.py --drafter drafters/smollm2-135m-instruct-slimspec \
    --dataset mt_bench --limit 3 --batch-sizes 1 4 --out smollm2
OMP_NUM_THREADS=1 python experiments/sampling_draw/ab.py --target gemma-3-270m --drafter drafters/gemma-3-270m-slimspec \
    --dataset spec_bench --categories coding qa math_reasoning --limit 4 --batch-sizes 1 --out gemma
