#!/usr/bin/env bash
# On a GPU machine, about 8 minutes: the captured GPU update measured against the eager one, in one call.
#   1. benchmarks/gpu_update.py: eager MSVAEModel, the static layout uncaptured, and CapturedUpdate with R = 1, 16,
#      64 runs on their own streams (updates/s, kernels and device-busy ms per update, memory per run)
#   2. scripts/train.py end to end (data assembled ahead in 4 worker processes, validation timed apart),
#      App. D sizes, MS-VAE full from scratch: --cuda-graphs, then the eager update
#   3. benchmarks/train_processes.py: PROCESSES (default 4) such --cuda-graphs runs at once, as a study's seeds
#      share the card (experiments/reproduce.py --cuda-graphs --jobs PROCESSES)
# DEMOS is a demo folder with paired, unpaired, valid and test splits (python benchmarks/gpu_demos.py makes the
# BossLocal one the results used); everything comes back under $OUT.
#   OUT=/tmp/gpu DEMOS=.gpu/demos bash benchmarks/gpu_update.sh             # PROCESSES=4 UPDATES=300
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MSVAE_SKIP_DEMO_CHECKSUMS=1
: "${OUT:?set OUT to the folder the results go to}" "${DEMOS:?set DEMOS to a demo folder}"
UPDATES=${UPDATES:-300}
PROCESSES=${PROCESSES:-4}
mkdir -p "$OUT"
log="$OUT/gpu_update.log"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no GPU visible"
  python -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"; } > "$log"
section() { echo "=== $1 ($(date +%T))" >> "$log"; }

section "gpu_update.py"
timeout 170 python benchmarks/gpu_update.py --demos "$DEMOS" --runs 1 16 64 --updates 256 --eager-updates 20 \
  --out "$OUT/gpu_update.json" >> "$log" 2>&1 || echo "gpu_update.py exit $?" >> "$log"

run_dir=$(mktemp -d)
cat > "$run_dir/msvae.yaml" <<EOF
model_type: msvae
demos: $DEMOS
batch_size: 128
unpaired_batch_size: 128
learning_rate: 0.001
max_updates: $UPDATES
eval_every: $UPDATES
eval_episodes: 64
test_episodes: 64
bleu_examples: 64
checkpoint_every: $UPDATES
log_every: 50
loader_workers: 4
EOF
for mode in graphs eager; do
  section "train.py $mode"
  flags=(--config "$run_dir/msvae.yaml" --output-dir "$run_dir/$mode")
  if [ "$mode" = graphs ]; then flags+=(--cuda-graphs); else flags+=(--max-updates 100 --eval-every 100 --checkpoint-every 100); fi
  start=$(date +%s.%N)
  timeout 90 python scripts/train.py "${flags[@]}" > "$run_dir/$mode.log" 2>&1 || echo "train.py $mode exit $?" >> "$log"
  end=$(date +%s.%N)
  tr '\r' '\n' < "$run_dir/$mode.log" | grep -v "it/s\|s/it\|Sampling rejected\|^ *$" | tail -n 6 >> "$log"
  python - "$run_dir/$mode/results.json" "$mode" "$start" "$end" >> "$log" 2>&1 <<'EOF'
import json, sys
path, mode, start, end = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
r = json.load(open(path))
training = r["wall_time_s"] - r["validation_time_s"]
print(json.dumps({"train.py": mode, "updates": r["updates"], "wall_time_s": r["wall_time_s"],
                  "validation_time_s": r["validation_time_s"], "updates_per_s_training": r["updates"] / training,
                  "process_s": round(end - start, 1), "test": r.get("test"), "test_bleu": r.get("test_bleu")}))
EOF
  cp "$run_dir/$mode/results.json" "$OUT/train_$mode.json" 2>/dev/null
done

section "train_processes.py: $PROCESSES runs at once"
timeout 170 python benchmarks/train_processes.py --config "$run_dir/msvae.yaml" --processes "$PROCESSES" \
  --timeout 160 --out "$OUT/train_processes.json" -- --cuda-graphs --loader-workers 2 >> "$log" 2>&1 \
  || echo "train_processes.py exit $?" >> "$log"
section "summary"
python benchmarks/gpu_summary.py "$OUT" >> "$log" 2>&1
cat "$log"
