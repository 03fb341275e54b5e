# 2-core AMD EPYC with AVX-512 bf16, bf16, 1 thread, nothing else running (the training job paused)
# NOLOOKUP: a copy of drafters/gemma-3-270m-slimspec with "draft_lookup": false in generation_config.json
OMP_NUM_THREADS=1 slimspec bench --target gemma-3-270m --drafter NOLOOKUP --name slimspec --merged-head --dataset spec_bench \
    --categories coding qa math_reasoning --limit 4 --max-new-tokens 96 --temperatures 0 --dtype bfloat16 --threads 1
