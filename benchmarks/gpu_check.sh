#!/usr/bin/env bash
# One short GPU check: the unchanged training script on CUDA in every precision (also under
# `accelerate launch`), stop-and-resume on the GPU, then the step-time and rollout benchmarks there.
# Needs a demo set and a trained MS-VAE on disk:
#   DEMOS=data/bosslocal_tiny MODEL=runs/bosslocal/msvae/best OUT=results/gpu bash benchmarks/gpu_check.sh
# STAGES (default "train resume steps rollout") picks the parts. Results land in $OUT:
# train_<model>_<precision>.json (each run's results.json), resume.json, train_step_gpu*.json,
# rollout_gpu.json / rollout_cpu_same_machine.json.
set -uo pipefail
export PYTHONUNBUFFERED=1
DEMOS=${DEMOS:-data/bosslocal_tiny}
MODEL=${MODEL:-runs/bosslocal/msvae/best}
OUT=${OUT:-results/gpu}
STAGES=${STAGES:-train resume steps rollout}
RUNS=$(mktemp -d)
SMALL=(--demos "$DEMOS" --batch-size 64 --eval-episodes 32 --bleu-examples 50 --test-episodes 64)
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, transformers, accelerate, datasets, minigrid; print('torch', torch.__version__,
'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__, 'accelerate', accelerate.__version__,
'datasets', datasets.__version__, 'minigrid', minigrid.__version__)"
status=0

if [[ $STAGES == *train* ]]; then
  # scripts/train.py unchanged on the GPU: each model type, each mixed-precision mode, in parallel;
  # the last one through `accelerate launch`.
  specs=(msvae:bf16 msvae:fp16 msvae:no follower:fp16 speaker:bf16 msvae:launch-bf16)
  for spec in "${specs[@]}"; do
    m=${spec%%:*}; p=${spec##*:}
    args=(scripts/train.py --model-type "$m" --mixed-precision "${p#launch-}" --output-dir "$RUNS/${m}_$p"
          --max-updates 30 --eval-every 15 --checkpoint-every 15 "${SMALL[@]}")
    if [[ $p == launch-* ]]; then
      accelerate launch --num_processes 1 --mixed_precision "${p#launch-}" "${args[@]}" > "$RUNS/${m}_$p.log" 2>&1 &
    else
      python3 "${args[@]}" > "$RUNS/${m}_$p.log" 2>&1 &
    fi
  done
  wait
  for spec in "${specs[@]}"; do
    m=${spec%%:*}; p=${spec##*:}
    if [ -f "$RUNS/${m}_$p/results.json" ]; then
      cp "$RUNS/${m}_$p/results.json" "$OUT/train_${m}_$p.json"
      python3 - "$RUNS/${m}_$p" <<'EOF'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
r = json.loads((run / "results.json").read_text())
print(run.name, "updates", r["updates"], "test SR", r.get("test", {}).get("success_rate"),
      "test BLEU", r.get("test_bleu"), "best/ saved", (run / "best" / "model.safetensors").exists())
EOF
    else
      status=1; echo "FAILED: $m $p"; tail -n 30 "$RUNS/${m}_$p.log"
    fi
  done
fi

if [[ $STAGES == *resume* ]]; then
  # Two uninterrupted 30-update MS-VAE runs (is the GPU run deterministic?) and one stopped at 20 and resumed.
  common=(--model-type msvae --max-updates 30 --eval-every 10 --checkpoint-every 10 "${SMALL[@]}")
  python3 scripts/train.py "${common[@]}" --output-dir "$RUNS/full_a" > "$RUNS/full_a.log" 2>&1 &
  python3 scripts/train.py "${common[@]}" --output-dir "$RUNS/full_b" > "$RUNS/full_b.log" 2>&1 &
  python3 scripts/train.py "${common[@]}" --output-dir "$RUNS/bf16" --mixed-precision bf16 > "$RUNS/bf16.log" 2>&1 &
  (python3 scripts/train.py "${common[@]}" --output-dir "$RUNS/resumed" --max-updates 20 > "$RUNS/resumed.log" 2>&1 &&
   python3 scripts/train.py "${common[@]}" --output-dir "$RUNS/resumed" --resume >> "$RUNS/resumed.log" 2>&1) &
  wait
  for run in full_a full_b bf16 resumed; do
    [ -f "$RUNS/$run/checkpoints/step-0000030/model.safetensors" ] || { status=1; echo "FAILED: $run"; tail -n 40 "$RUNS/$run.log"; }
  done
  python3 - "$RUNS" "$OUT/resume.json" <<'EOF' || status=1
import json, sys
from pathlib import Path
from safetensors.torch import load_file
runs = Path(sys.argv[1])
def weights(name):
    return load_file(runs / name / "checkpoints" / "step-0000030" / "model.safetensors")
a, b, h, r = weights("full_a"), weights("full_b"), weights("bf16"), weights("resumed")
def compare(x, y):
    assert x.keys() == y.keys(), sorted(set(x) ^ set(y))
    diff = max(float((x[k].float() - y[k].float()).abs().max()) for k in x)
    return {"bit_identical": all(x[k].equal(y[k]) for k in x), "max_abs_diff": diff}
report = {"uninterrupted_vs_uninterrupted": compare(a, b), "uninterrupted_vs_resumed": compare(a, r),
          "fp32_vs_bf16_autocast": compare(a, h)}
print(json.dumps(report, indent=1))
Path(sys.argv[2]).write_text(json.dumps(report, indent=1) + "\n")
EOF
fi

if [[ $STAGES == *steps* ]]; then
  # seconds per update on the GPU (App. D sizes, batch 128 + 128 unpaired), fp32 and bf16 autocast.
  for p in no bf16; do
    python3 benchmarks/train_step.py --device cuda --mixed-precision $p --steps 20 --warmup 5 \
      --out "$OUT/train_step_gpu_$p.json" > "$RUNS/train_step_$p.log" 2>&1 || { status=1; tail -n 20 "$RUNS/train_step_$p.log"; }
    grep -h "seconds_per_update\|ratio_msvae_over_follower" "$OUT/train_step_gpu_$p.json"
  done
fi

if [[ $STAGES == *rollout* ]]; then
  # rollouts of the trained MS-VAE: model on the GPU, and on this machine's CPU, same seeds.
  python3 benchmarks/rollout.py --level BossLocal --episodes 256 --batch-size 256 --model "$MODEL" --device cuda \
    --out "$OUT/rollout_gpu.json" 2>&1 | tail -n 12 || status=1
  OMP_NUM_THREADS=1 python3 benchmarks/rollout.py --level BossLocal --episodes 256 --batch-size 256 \
    --model "$MODEL" --device cpu --out "$OUT/rollout_cpu_same_machine.json" 2>&1 | tail -n 12 || status=1
fi
exit $status
