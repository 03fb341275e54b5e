#!/bin/sh
# The Gemma-3-270M head comparison, one head at a time on one core (recipes/gemma-3-270m/ablations/): each run that
# has no logged curve under runs/<head>/ yet is trained (from its latest checkpoint in outputs/ where a run was cut
# short), then its curve (trainer_state.json), config and results are kept there. Weights stay in outputs/ (not
# committed).
#   nohup sh experiments/gemma_heads/run.sh > /tmp/gemma_heads.log 2>&1 &
set -e
cd "$(dirname "$0")/../.."
for head in low_rank trimmed target_head full_head; do
    kept=experiments/gemma_heads/runs/$head
    out=outputs/gemma-3-270m-ablations/$head
    [ -f "$kept/trainer_state.json" ] && continue
    last=$(ls -d "$out"/checkpoint-* 2>/dev/null | sort -t- -k2 -n | tail -1)
    OMP_NUM_THREADS=1 .venv/bin/slimspec train --config recipes/gemma-3-270m/ablations/config_$head.yaml \
        ${last:+--resume_from_checkpoint "$last"}
    mkdir -p "$kept"
    cp "$out/trainer_state.json" "$out/config.json" "$out/train_results.json" "$kept/"
done
.venv/bin/slimspec compare-runs experiments/gemma_heads/runs/* --reference full_head
