#!/usr/bin/env bash
# The drafter-shape comparison at equal wall-clock: each variant continues the continual run from a copy of its
# folder in the same data order for SECONDS of training on one thread, then is scored teacher-forced on the
# held-out mix (acc_0..3 at TTT depth 4, whatever depth it trained with). `base` is the continual run itself (it
# writes back into checkpoints/). Variant folders are made by prepare_variant.py, `two_layers*` ones by
# two_layers.py prepare (see README.md).
#
#   PYTHONPATH=<src snapshot> bash experiments/drafter_shape/run.sh /tmp/shape 1500 base ttt6 rank144 layers_2_15_30
set -u
ROOT=$1; SECONDS_EACH=$2; shift 2
RECIPE=recipes/smollm2-135m-instruct/slimspec/config_embedded_continual.yaml
RECORD=$ROOT/heldout.jsonl
export OMP_NUM_THREADS=1
for variant in "$@"; do
  TRAIN=".venv/bin/slimspec train"; EVAL=".venv/bin/python experiments/training_throughput/bench_training.py"
  case $variant in
    base) dir=checkpoints/smollm2-135m-instruct-slimspec; extra="" ;;
    ttt6) dir=$ROOT/ttt6; extra="--ttt_steps 6" ;;
    lr12e5) dir=$ROOT/lr12e5; extra="--learning_rate 1.2e-4" ;;
    lk_greedy_kl05) dir=$ROOT/$variant; extra="--loss_type lk_greedy --lk_kl_weight 0.5" ;;
    two_layers*) dir=$ROOT/$variant; extra=""
      TRAIN=".venv/bin/python experiments/drafter_shape/two_layers.py train"
      EVAL=".venv/bin/python experiments/drafter_shape/two_layers.py eval" ;;
    *) dir=$ROOT/$variant; extra="" ;;
  esac
  echo "== $variant: train $(date -u +%H:%M:%S)"
  $TRAIN --config $RECIPE --continual_dir "$dir" --output_dir "$ROOT/out_$variant" \
      --max_train_seconds "$SECONDS_EACH" $extra > "$ROOT/train_$variant.log" 2>&1
  echo "== $variant: eval $(date -u +%H:%M:%S)"
  ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 $EVAL \
      --name "$variant" --steps 0 --record "$RECORD" --drafter_model "$dir" \
      --dataset_path data/smollm2-135m-instruct/balanced_4k --eval_dataset_path data/smollm2-135m-instruct/heldout_mix96 \
      --bf16 true --target_dtype bfloat16 --ttt_steps 4 --max_length 768 --max_samples 120 > "$ROOT/eval_$variant.log" 2>&1
  tail -1 "$RECORD"
done
echo "== done $(date -u +%H:%M:%S)"
