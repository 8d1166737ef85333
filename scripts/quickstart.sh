#!/usr/bin/env bash
# The main job end to end on the defaults: install, generate a small BossLocal demo set, train MS-VAE
# briefly, evaluate success rate (batched rollouts) and BLEU, save the model, render one GIF.
# Measured on a 2-core CPU with the default follower (FiLM on both maps): 37-48 minutes on a fresh clone with two other
# training runs beside it (docs/results/benchmarks.md, "Quickstart"). Everything lands under outputs/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
OUT=outputs/quickstart
mkdir -p "$OUT"
python scripts/make_demos.py --level BossLocal --paired 500 --unpaired 2000 --valid 100 --test 100 \
  --seed 0 --num-proc 2 --out "$OUT/demos" --overwrite
rm -rf "$OUT/msvae"
python scripts/train.py --model-type msvae --demos "$OUT/demos" --output-dir "$OUT/msvae" \
  --batch-size 64 --max-updates 300 --eval-every 100 --eval-episodes 100 --checkpoint-every 100 \
  --bleu-examples 100 --test-episodes 200
python scripts/evaluate.py --model "$OUT/msvae/best" --level BossLocal --episodes 200 \
  --json "$OUT/evaluation.json" --render 1 --out "$OUT/gifs"
cat <<MSG

Done. Where everything is:
  demonstrations (HF DatasetDict + card)  $OUT/demos
  trained MS-VAE (save_pretrained)        $OUT/msvae/best      -> transformers.AutoModel.from_pretrained
    (best by validation SR; $OUT/msvae/best_speaker is the best by validation BLEU)
  test SR / BLEU and validation history   $OUT/msvae/results.json
  TensorBoard logs                        $OUT/msvae/tb        -> tensorboard --logdir $OUT/msvae/tb
  per-episode evaluation                  $OUT/evaluation.json
  GIF                                     $OUT/gifs/
MSG
