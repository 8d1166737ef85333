#!/usr/bin/env bash
# Chosen cells of a level's study, many at a time on one GPU machine, then one archive of what they made.
#
#   OUT=/path/back bash experiments/gpu_grid.sh bosslocal --cells 'msvae*_ownobs/*' --seeds 0 1 2 --jobs 9
#   bash experiments/gpu_grid.sh bosslocal --cells 'msvae*_ownobs/*' --jobs 9 --dry-run   # only print
#   OUT=/path/back bash experiments/gpu_grid.sh bosslocal --cells 'mean_msvae*/*' --seeds 0 1 2 --cuda-graphs --jobs 6
#     (--cuda-graphs: each training cell's updates replayed as CUDA graphs, about 5x the eager loop's speed)
#   OUT=/path/back bash experiments/gpu_grid.sh bosslocal --cells 'follower_film2_b256_u2000/*' \
#     'msvae_film2_b256_u2000/*' --seeds 0 1 2 --cuda-graphs --eval-workers 2 --jobs 6
#     (the FiLM rows at the paper's batch of pairs; with the baselines they start from on disk, the six runs side
#     by side took about 5.5 min on one H200)
#
# The arguments are experiments/reproduce.py's: it skips finished cells, resumes checkpointed runs and starts
# each cell once what it needs is done; every run shares the GPU, which the trainer (accelerate) picks by
# itself. Cells still going DEADLINE seconds in (default 540, one device call) are stopped with the driver;
# their checkpoints stay behind, so on a new machine such a run starts again from scratch. The cells' inputs (data/<level>_100k, the baselines' best/) travel
# with the working tree or are made as cells. $OUT/grid_<level>.tar.gz then holds every file this call
# wrote under runs/<level>/ (results.json, curves, logs, best/, best_speaker/, pre-trained encoders) and
# results/<level>/, without checkpoints/ (optimizer states), and the checksums of demos made here
# (data/<level>*/checksums.json, to compare with the demos made elsewhere from the same seeds). A device call
# brings back at most 64 MiB: with WEIGHTS_OF="follower speaker follower_seed1" (run folder names under
# runs/<level>/) only those runs' best*/ folders come back (e.g. the baselines other cells start from), every
# run's record, config and logs still do; WEIGHTS_OF="" brings back no best*/ folder. Other weights (a
# pre-training's encoders, runs/<level>/speaker_init_front_*) come back whole either way.
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
weights_kept() {  # every path, but the best*/ files of runs not named in WEIGHTS_OF (where it is set)
  if [ -z "${WEIGHTS_OF+set}" ]; then cat; return; fi
  awk -v keep=" $WEIGHTS_OF " -v runs="runs/$level/" '{
    if (index($0, runs) == 1) { split(substr($0, length(runs) + 1), part, "/")
      if (part[2] ~ /^best/ && part[3] != "" && index(keep, " " part[1] " ") == 0) next }  # best*/ folders
    print }'
}
{ find "runs/$level" "results/$level" -type f -newer "$stamp" -not -path '*/checkpoints/*' || true
  find data -maxdepth 2 -path "data/$level*/checksums.json" -newer "$stamp" || true; } \
  2>/dev/null | weights_kept | tar czf "$OUT/grid_$level.tar.gz" -T -
rm -f "$stamp"
echo "$(tar tzf "$OUT/grid_$level.tar.gz" | wc -l) files in $OUT/grid_$level.tar.gz"
exit $status
