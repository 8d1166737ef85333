#!/usr/bin/env bash
# On a GPU machine, a few minutes: MS-VAE updates per second of R runs stacked in one process against
# PROCESSES runs side by side in their own processes (benchmarks/stacked_step.py, App. D sizes, batch 128 + 128),
# on BossLocal demos made here. $OUT/stacked_step.json and $OUT/stacked_step.log come back.
#
#   OUT=/path/back bash benchmarks/gpu_stacked.sh                 # RUNS="1 4 8 16 32" PROCESSES=9 DEVICE=cuda
#   OUT=/tmp/x DEVICE=cpu RUNS="1 2" PROCESSES=2 EPISODES=64 bash benchmarks/gpu_stacked.sh --tiny --batch-size 8
# Arguments after the script's name go to stacked_step.py.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's msvae_hf, installed or not
: "${OUT:?set OUT to the folder the results go to}"
RUNS=${RUNS:-1 4 8 16 32}
PROCESSES=${PROCESSES:-9}
DEVICE=${DEVICE:-cuda}
EPISODES=${EPISODES:-4096}
mkdir -p "$OUT"
log="$OUT/stacked_step.log"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU visible"
  python -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"; } > "$log"
demos=$(mktemp -d)/bosslocal
python scripts/make_demos.py --level BossLocal --paired "$EPISODES" --unpaired "$EPISODES" --valid 16 --test 16 \
  --seed 0 --num-proc "$(nproc)" --out "$demos" >> "$log" 2>&1
# shellcheck disable=SC2086  # RUNS is a list
python benchmarks/stacked_step.py --demos "$demos" --device "$DEVICE" --runs $RUNS --processes "$PROCESSES" \
  --out "$OUT/stacked_step.json" "$@" 2>&1 | grep -v "^Sampling rejected" >> "$log"
tail -n 12 "$log"
