#!/usr/bin/env bash
# More data and more training for the shipped drafter on one GPU, in one time-boxed command (README.md, "On one GPU"):
#   1. data   `slimspec prepare-data` answers more of the prompt mix with the embedded target in bf16, resuming
#             data/smollm2-135m-instruct/mix_16k (the folder the CPU job writes: same run config, so each continues
#             the other), for a share of the budget (`--max-seconds`, then `timeout` as a guard);
#   2. train  `slimspec train` continues the shipped r = d/8 drafter (warm start from drafters/smollm2-135m-instruct-
#             slimspec, with config_embedded_v3.yaml's settings) on mix_16k + balanced_4k, online features, bf16, batch 32,
#             for `max_steps` sized to the time left and `max_train_seconds` as the clock's stop;
#   3. report summary.md/summary.json (data rate, steps, tokens, tokens/s, the loss/accuracy curve), gpu.log, and
#             when $OUT is set, results.tgz.part-NN + results.sha256: the new shards and the drafter, in 15 MiB parts
#             for copy tools that limit a file's size.
# all within BUDGET_S seconds from the start (default 540).
#
#   bash recipes/smollm2-135m-instruct/gpu.sh                 # on the GPU host (after copying .gpu-carry there)
#   bash recipes/smollm2-135m-instruct/gpu.sh --stage         # a staging call: .gpu-carry -> /tmp/slimspec-carry
#   bash recipes/smollm2-135m-instruct/gpu.sh --unpack DIR    # back on the CPU machine: the returned shards into
#                                                             # $DATA_OUT/data/, the drafter into $OUTPUT_DIR
# Settings (environment): BUDGET_S=540 DEVICE=cuda DATA_SHARE=0.4 (of the time left after setup) GEN_BATCH=512
# MAX_PROMPTS= (all) MAX_NEW_TOKENS=384 PROMPTS= (../shared/data, else the carried copy) DATA_OUT TRAIN_DATA
# OUTPUT_DIR CONFIG BATCH=32 STEP_S=1.0 (expected seconds a step: sizes max_steps) TRAIN_SETUP_S=75 (loading and
# tokenising before the first step) MAX_LENGTH=1024 KL_CHUNK=1024 LOGGING_STEPS=5 RESERVE_S=40 (the report's share).
set -uo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/gpu_env.sh
source scripts/gpu_env.sh

DATA_OUT=${DATA_OUT:-data/smollm2-135m-instruct/mix_16k}
OUTPUT_DIR=${OUTPUT_DIR:-outputs/smollm2-135m-instruct-slimspec-gpu}

if [ "${1:-}" = "--stage" ]; then
  slimspec_stage
  echo "[gpu] staged: $(cd "$STAGE" && find . -type f | sort | tr '\n' ' ')"
  exit 0
fi
if [ "${1:-}" = "--unpack" ]; then
  from=${2:?"--unpack DIR: the folder holding results.tgz.part-NN and results.sha256"}
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cat "$from"/results.tgz.part-* >"$work/results.tgz" || exit 2
  (cd "$work" && sha256sum -c --status "$from/results.sha256") || { echo "[gpu] $from: results.tgz fails its sha256 (a part missing?)" >&2; exit 2; }
  tar -xzf "$work/results.tgz" -C "$work" || exit 2
  if [ -e "$OUTPUT_DIR" ]; then echo "[gpu] $OUTPUT_DIR exists: set OUTPUT_DIR to another folder" >&2; exit 2; fi
  mkdir -p "$DATA_OUT/data" "$(dirname "$OUTPUT_DIR")"
  cp -n "$work"/data/shard-*.jsonl "$DATA_OUT/data/" 2>/dev/null
  cp -r "$work/drafter" "$OUTPUT_DIR"
  echo "[gpu] shards -> $DATA_OUT/data/: $(cd "$work/data" && ls | tr '\n' ' ')"
  echo "[gpu] drafter -> $OUTPUT_DIR"
  exit 0
fi

started=$(date +%s)
elapsed() { echo $(($(date +%s) - started)); }
BUDGET_S=${BUDGET_S:-540}
DEVICE=${DEVICE:-cuda}
DATA_SHARE=${DATA_SHARE:-0.4}
GEN_BATCH=${GEN_BATCH:-512}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-384}
MAX_PROMPTS=${MAX_PROMPTS:-}
TRAIN_DATA=${TRAIN_DATA:-$DATA_OUT,data/smollm2-135m-instruct/balanced_4k}
CONFIG=${CONFIG:-recipes/smollm2-135m-instruct/slimspec/config_embedded_v3.yaml}
BATCH=${BATCH:-32}
STEP_S=${STEP_S:-1.0}
TRAIN_SETUP_S=${TRAIN_SETUP_S:-75}
MAX_LENGTH=${MAX_LENGTH:-1024}
KL_CHUNK=${KL_CHUNK:-1024}
LOGGING_STEPS=${LOGGING_STEPS:-5}
RESERVE_S=${RESERVE_S:-40}
RESULTS=${OUT:-gpu-results}
mkdir -p "$RESULTS"
LOG=$RESULTS/gpu.log
: >"$LOG"
say() { echo "[gpu $(elapsed)s] $*" | tee -a "$LOG"; }

slimspec_stage
slimspec_setup
export PYTHONUNBUFFERED=1
PROMPTS=${PROMPTS:-}
if [ -z "$PROMPTS" ]; then
  PROMPTS=../shared/data/train/prompts_mix.jsonl
  [ -f "$PROMPTS" ] || PROMPTS=${SLIMSPEC_DATA:-$STAGE/data}/train/prompts_mix.jsonl
fi
setup_s=$(elapsed)
say "setup took $setup_s s; budget $BUDGET_S s on $DEVICE"

# 1. data: resume DATA_OUT (prepare_config.json must match: target, max_new_tokens, temperature, top_p, seed, dtype)
left=$((BUDGET_S - setup_s - RESERVE_S))
data_s=$(awk -v l="$left" -v s="$DATA_SHARE" 'BEGIN { printf "%d", l * s }')
shards_before=$(ls "$DATA_OUT"/data/shard-*.jsonl 2>/dev/null | sort)
data_status=skipped
if [ "$data_s" -gt 0 ]; then
  say "data: up to $data_s s, batch $GEN_BATCH, $PROMPTS -> $DATA_OUT"
  # shellcheck disable=SC2086
  timeout -s INT -k 20 $((data_s + 30)) "$PY" -m slimspec_hf.cli prepare-data --target embedded --prompts "$PROMPTS" \
    --out "$DATA_OUT" --batch-size "$GEN_BATCH" --max-new-tokens "$MAX_NEW_TOKENS" --max-prompt-length 512 \
    --dtype bfloat16 --device "$DEVICE" --max-seconds "$data_s" --no-progress ${MAX_PROMPTS:+--max-prompts $MAX_PROMPTS} \
    2>&1 | tee -a "$LOG"
  data_status=${PIPESTATUS[0]}
  # a run stopped by the guard may leave a half-written last line: cut it, as a resumed prepare-data would
  "$PY" -c "import sys; from slimspec_hf.training.data import completed_ids; completed_ids(sys.argv[1], repair=True)" \
    "$DATA_OUT" 2>&1 | tee -a "$LOG"
fi
data_done_s=$(elapsed)
new_shards=$(comm -13 <(echo "$shards_before") <(ls "$DATA_OUT"/data/shard-*.jsonl 2>/dev/null | sort) | grep . || true)
say "data: status $data_status after $((data_done_s - setup_s)) s; new shards: $(echo "$new_shards" | tr '\n' ' ')"

# 2. train: max_steps from the time left at STEP_S a step; max_train_seconds stops it at the budget either way
train_s=$((BUDGET_S - data_done_s - RESERVE_S - TRAIN_SETUP_S))
[ "$train_s" -ge 10 ] || train_s=10
max_steps=${MAX_STEPS:-$(awk -v t="$train_s" -v s="$STEP_S" 'BEGIN { n = int(t / s); print (n < 1 ? 1 : n) }')}
use_cpu=false; bf16=true; procs=8; workers=2
if [ "$DEVICE" = cpu ]; then use_cpu=true; bf16=false; procs=1; workers=0; fi
say "train: $max_steps steps of $BATCH, at most $train_s s of steps, on $TRAIN_DATA -> $OUTPUT_DIR"
timeout -s INT -k 30 $((train_s + TRAIN_SETUP_S + 60)) "$PY" -m slimspec_hf.cli train --config "$CONFIG" \
  --drafter_model drafters/smollm2-135m-instruct-slimspec \
  --dataset_path "$TRAIN_DATA" --output_dir "$OUTPUT_DIR" --overwrite_output_dir true \
  --use_cpu "$use_cpu" --bf16 "$bf16" --features online --cpu_threads 0 --dataset_num_proc "$procs" \
  --dataloader_num_workers "$workers" --per_device_train_batch_size "$BATCH" --gradient_accumulation_steps 1 \
  --max_length "$MAX_LENGTH" --kl_chunk_size "$KL_CHUNK" --num_train_epochs 1 --max_steps "$max_steps" \
  --max_train_seconds "$train_s" --warmup_steps $((max_steps / 20)) --save_strategy no \
  --logging_steps "$LOGGING_STEPS" --disable_tqdm true --report_to none 2>&1 | tee -a "$LOG"
train_status=${PIPESTATUS[0]}
train_done_s=$(elapsed)
say "train: status $train_status after $((train_done_s - data_done_s)) s"

# 3. report, and pack what the CPU pipeline takes (when $OUT is set)
# shellcheck disable=SC2086
"$PY" recipes/smollm2-135m-instruct/gpu_train_summary.py --out "$RESULTS" --data-dir "$DATA_OUT" --new-shards $new_shards \
  --output-dir "$OUTPUT_DIR" --seconds "setup=$setup_s" "data=$((data_done_s - setup_s))" \
  "train=$((train_done_s - data_done_s))" --status "data=$data_status" "train=$train_status" \
  --setting "budget_s=$BUDGET_S" "device=$DEVICE" "gen_batch=$GEN_BATCH" "batch=$BATCH" "max_steps=$max_steps" \
  "max_train_seconds=$train_s" "train_data=$TRAIN_DATA" 2>&1 | tee -a "$LOG" >/dev/null
if [ -n "${OUT:-}" ]; then
  pack=$(mktemp -d)
  mkdir -p "$pack/data" "$pack/drafter"
  # shellcheck disable=SC2086
  [ -z "$new_shards" ] || cp $new_shards "$pack/data/"
  find "$OUTPUT_DIR" -maxdepth 1 -type f -exec cp {} "$pack/drafter/" \; 2>/dev/null
  tar -C "$pack" -cf - data drafter | gzip -1 >"$pack/results.tgz"
  (cd "$pack" && sha256sum results.tgz) >"$OUT/results.sha256"
  split -b 15M -d -a 2 "$pack/results.tgz" "$OUT/results.tgz.part-"
  say "packed $(du -h "$pack/results.tgz" | cut -f1) into $(ls "$OUT"/results.tgz.part-* | wc -l) part(s) under \$OUT"
  rm -rf "$pack"
fi
say "done in $(elapsed) s (budget $BUDGET_S s); summary in $RESULTS/summary.md"
[ "$train_status" = 0 ]
