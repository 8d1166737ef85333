#!/usr/bin/env bash
# Many seeds of the BossLocal experiments at once on one GPU machine (one process per run, all sharing
# the GPU), plus the rollout benchmark with the envs in worker processes. Each run is the same command
# as in scripts/reproduce_bosslocal.sh, with its own seed and output folder.
#
#   GRID="msvae_paired:0 msvae_paired:1 msvae_gamma1:0 msvae_gamma1:1" OUT=results/gpu_grid \
#     bash scripts/gpu_seed_grid.sh
#
# Each run's validation lines are collected in $OUT/valid_lines.txt. The device tool brings back only a few
# files from shallow folders: there, work in a scratch folder and set ARCHIVE to a .tar.gz in the folder that
# comes back (`ARCHIVE=$OUT/grid.tar.gz OUT=/tmp/grid bash ...`, ARCHIVE first, while $OUT is still the
# device's folder). The archive holds OUT without checkpoints/ and without the best/ of finished runs
# (evaluated there); valid_lines.txt and the rollout JSON are copied beside it. Nothing is deleted.
#
# Measured on one H100 machine (16 cores, session 4): the demo set took 125 s, the rollout stage 86 s, and
# nine runs side by side made 4.5-7 updates/s each (1100-1400 of 2000 updates in 324 s): budget ~8 min for
# nine 2000-update runs, or fewer runs.
#
# GRID: "config:seed" pairs (configs/<config>_bosslocal.yaml). STAGES (default "demos rollout train") picks
# the parts. Runs still going DEADLINE seconds after the script started (default 540) are
# stopped, so that their curves and best/ still come back within one device call.
# Needs the baselines the configs start from (runs/bosslocal/{follower,speaker}/best) and, for the rollout
# stage, MODEL (default runs/bosslocal/msvae/best). The demo set is generated where it is missing, with the
# README's command (the data do not depend on --num-proc); its fingerprint lands in $OUT/demos_fingerprint.json.
set -uo pipefail
export PYTHONUNBUFFERED=1
GRID=${GRID:-"msvae_paired:0 msvae_paired:1 msvae_paired:2 msvae_gamma1:0 msvae_gamma1:1 msvae_gamma1:2"}
OUT=${OUT:-results/gpu_grid}
STAGES=${STAGES:-demos rollout train}
DEADLINE=${DEADLINE:-540}
MODEL=${MODEL:-runs/bosslocal/msvae/best}
DEMOS=${DEMOS:-data/bosslocal_100k}
THREADS=${THREADS:-2}
EXTRA=${EXTRA:-}
mkdir -p "$OUT/runs"
status=0
stamp() { echo "[$(date +%T), ${SECONDS}s] $*"; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU visible"
echo "cpus $(nproc)"

if [[ $STAGES == *demos* ]]; then
  if [ ! -f "$DEMOS/stats.json" ]; then
    stamp "making $DEMOS"
    python3 scripts/make_demos.py --level BossLocal --paired 1000 --unpaired 100000 --valid 500 --test 500 \
      --seed 0 --num-proc "$(nproc)" --out "$DEMOS" > "$OUT/make_demos.log" 2>&1 || { status=1; tail -n 20 "$OUT/make_demos.log"; }
  fi
  python3 - "$DEMOS" "$OUT/demos_fingerprint.json" <<'EOF' || status=1
import hashlib, json, sys
from pathlib import Path
from msvae_hf.data.demos import load_demos
demos = load_demos(sys.argv[1])
report = {}
for split, ds in demos.items():
    h = hashlib.sha256()
    for column in ("seed", "actions", "instruction"):
        if column in ds.column_names:
            h.update(json.dumps(ds.data.column(column).to_pylist()).encode())
    report[split] = {"rows": len(ds), "sha256_seed_actions_instruction": h.hexdigest()}
print(json.dumps(report))
Path(sys.argv[2]).write_text(json.dumps(report, indent=1) + "\n")
EOF
  stamp "demos ready"
fi

if [[ $STAGES == *rollout* ]]; then
  # batched (in process and with the envs in $(nproc)/2 worker processes), one at a time, bare env: one run.
  python3 benchmarks/rollout.py --level BossLocal --episodes 256 --batch-size 256 --model "$MODEL" --device cuda \
    --workers $(( $(nproc) / 2 )) --out "$OUT/rollout_gpu_pool.json" > "$OUT/rollout.log" 2>&1 || status=1
  tail -n 8 "$OUT/rollout.log"
  stamp "rollout benchmark done"
fi

slim=(--exclude="./runs/*/checkpoints")
if [[ $STAGES == *train* ]]; then
  limit=$(( DEADLINE - SECONDS )); (( limit > 60 )) || limit=60
  stamp "training $GRID, stopped after ${limit}s"
  for spec in $GRID; do
    name=${spec%%:*}; seed=${spec##*:}
    # shellcheck disable=SC2086
    timeout "$limit" python3 scripts/train.py --config "configs/${name}_bosslocal.yaml" --seed "$seed" \
      --threads "$THREADS" --demos "$DEMOS" --output-dir "$OUT/runs/${name}_seed$seed" $EXTRA > "$OUT/${name}_seed$seed.log" 2>&1 &
  done
  wait
  stamp "training done"
  for spec in $GRID; do
    name=${spec%%:*}; seed=${spec##*:}
    run="$OUT/runs/${name}_seed$seed"
    if [ -f "$run/results.json" ]; then
      slim+=(--exclude="./runs/${name}_seed$seed/best")  # evaluated (results.json); best_speaker/ is kept
      python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], 'updates', r['updates'],
'test SR', r.get('test', {}).get('success_rate'), 'test BLEU', r.get('test_bleu'))" "$run/results.json" "${name}_seed$seed"
    else
      status=1; echo "UNFINISHED: ${name}_seed$seed"; tr '\r' '\n' < "$OUT/${name}_seed$seed.log" | tail -n 3
    fi
  done
fi
for log in "$OUT"/*_seed*.log; do
  [ -f "$log" ] || continue
  tr '\r' '\n' < "$log" | grep '^step' | sed "s|^|$(basename "$log" .log) |"
done > "$OUT/valid_lines.txt"
if [ -n "${ARCHIVE:-}" ]; then
  tar czf "$ARCHIVE" "${slim[@]}" -C "$OUT" . || status=1
  for f in valid_lines.txt rollout_gpu_pool.json; do [ -f "$OUT/$f" ] && cp "$OUT/$f" "$(dirname "$ARCHIVE")/"; done
  ls -la "$(dirname "$ARCHIVE")"
fi
exit $status
