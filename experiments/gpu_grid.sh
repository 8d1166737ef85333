#!/usr/bin/env bash
# Chosen cells of a level's study, many at a time on one GPU machine, then one archive of what they made.
#
#   OUT=/path/back bash experiments/gpu_grid.sh bosslocal --cells 'msvae*_ownobs/*' --seeds 0 1 2 --jobs 9
#   bash experiments/gpu_grid.sh bosslocal --cells 'msvae*_ownobs/*' --jobs 9 --dry-run   # only print
#   OUT=/path/back bash experiments/gpu_grid.sh bosslocal --cells 'mean_msvae*/*' --seeds 0 1 2 --cuda-graphs --jobs 6
#     (--cuda-graphs: each training cell's updates replayed as CUDA graphs, about 5x the eager loop's speed)
#
# The arguments are experiments/reproduce.py's: it skips finished cells, resumes checkpointed runs and starts
# each cell once what it needs is done; every run shares the GPU, which the trainer (accelerate) picks by
# itself. Cells still going DEADLINE seconds in (default 540, one device call) are stopped with the driver;
# their checkpoints stay behind, so on a new machine such a run starts again from scratch. The cells' inputs (data/<level>_100k, the baselines' best/) travel
# with the working tree or are made as cells. $OUT/grid_<level>.tar.gz then holds every file this call
# wrote under runs/<level>/ (results.json, curves, logs, best/, best_speaker/, pre-trained encoders) and
# results/<level>/runs/, without checkpoints/ (optimizer states).
set -euo pipefail
cd "$(dirname "$0")/.."
level=${1:?usage: gpu_grid.sh LEVEL [reproduce.py options]}
if [[ " $* " == *" --dry-run "* ]]; then
  python experiments/reproduce.py "$@"
  echo "then: the files written under runs/$level/ and results/$level/runs/, checkpoints/ left out, into \$OUT/grid_$level.tar.gz"
  exit 0
fi
: "${OUT:?set OUT to the folder the archive goes to}"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU visible"
stamp=$(mktemp)
status=0
timeout "${DEADLINE:-540}" python experiments/reproduce.py "$@" || status=$?  # 124: stopped at the deadline
mkdir -p "$OUT"
{ find "runs/$level" "results/$level/runs" -type f -newer "$stamp" -not -path '*/checkpoints/*' || true; } \
  2>/dev/null | tar czf "$OUT/grid_$level.tar.gz" -T -
rm -f "$stamp"
echo "$(tar tzf "$OUT/grid_$level.tar.gz" | wc -l) files in $OUT/grid_$level.tar.gz"
exit $status
