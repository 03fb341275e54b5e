#!/bin/sh
# The Gemma-3-270M head comparison, one head at a time on one core (recipes/gemma-3-270m/ablations/): each run that
# has no logged curve under runs/<head>/ yet is trained, then its curve (trainer_state.json), config and results are
# kept there. Weights stay in outputs/ (not committed).
#   nohup sh experiments/gemma_heads/run.sh > /tmp/gemma_heads.log 2>&1 &
set -e
cd "$(dirname "$0")/../.."
for head in low_rank trimmed target_head full_head; do
    kept=experiments/gemma_heads/runs/$head
    [ -f "$kept/trainer_state.json" ] && continue
    OMP_NUM_THREADS=1 .venv/bin/slimspec train --config recipes/gemma-3-270m/ablations/config_$head.yaml
    mkdir -p "$kept"
    cp outputs/gemma-3-270m-ablations/$head/trainer_state.json outputs/gemma-3-270m-ablations/$head/config.json \
        outputs/gemma-3-270m-ablations/$head/train_results.json "$kept/"
done
.venv/bin/slimspec compare-runs experiments/gemma_heads/runs/* --reference full_head
