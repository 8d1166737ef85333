#!/usr/bin/env bash
# The BossLocal experiment of README.md (paper Tables 2 and 3, M = 1000 paired, N = 100,000 unpaired),
# end to end and in order. Each step is one command; on 2 CPU cores the whole takes about 4 hours
# run sequentially (we ran independent steps two at a time, one torch thread each).
set -euo pipefail
cd "$(dirname "$0")/.."
T="--threads 1"
python scripts/make_demos.py --level BossLocal --paired 1000 --unpaired 20000 --valid 500 --test 500 --seed 0 \
  --num-proc 2 --out data/bosslocal
python scripts/make_demos.py --level BossLocal --paired 1000 --unpaired 100000 --valid 500 --test 500 --seed 0 \
  --num-proc 2 --out data/bosslocal_100k   # same paired/valid/test seeds; data/bosslocal's unpaired is its first 20k
# Supervised baselines (paired only).
python scripts/train.py --config configs/follower_bosslocal.yaml $T
python scripts/train.py --config configs/speaker_bosslocal.yaml $T
# MS-VAE, initialised from both baselines (App. D): full, and the two Table 2 ablations.
python scripts/train.py --config configs/msvae_bosslocal.yaml $T
python scripts/train.py --config configs/msvae_paired_bosslocal.yaml $T
# A second seed of the two runs the SR claim rests on (same baselines, another data order and z noise).
python scripts/train.py --config configs/msvae_bosslocal.yaml $T --seed 1 --output-dir runs/bosslocal/msvae_seed1
python scripts/train.py --config configs/msvae_paired_bosslocal.yaml $T --seed 1 --output-dir runs/bosslocal/msvae_paired_seed1
python scripts/train.py --config configs/msvae_alpha1000_bosslocal.yaml $T
python scripts/train.py --config configs/msvae_k16_bosslocal.yaml $T
# Other settings of the full objective, for BLEU: a beta per modality (App. D) and smaller gammas. The first
# two were stopped after 400 updates (their validation BLEU had dropped as the App. D run's did).
python scripts/train.py --config configs/msvae_trajbeta_bosslocal.yaml $T --max-updates 400
python scripts/train.py --config configs/msvae_gamma10_bosslocal.yaml $T --max-updates 400
python scripts/train.py --config configs/msvae_gamma1_bosslocal.yaml $T
python scripts/train.py --config configs/msvae_gamma1_bosslocal.yaml $T --seed 1 --output-dir runs/bosslocal/msvae_gamma1_seed1
# Speaker-follower with the baseline speaker and with the MS-VAE speaker (Table 3).
python scripts/label_unpaired.py --speaker runs/bosslocal/speaker/best --demos data/bosslocal_100k --out data/pseudo_speaker
python scripts/train.py --config configs/speaker_follower_bosslocal.yaml $T
python scripts/label_unpaired.py --speaker runs/bosslocal/msvae/best --demos data/bosslocal_100k --out data/pseudo_msvae
python scripts/train.py --config configs/msvae_speaker_follower_bosslocal.yaml $T
# ... and with the paired-only MS-VAE's speaker: does the speaker's use of unpaired data matter?
python scripts/label_unpaired.py --speaker runs/bosslocal/msvae_paired/best --demos data/bosslocal_100k \
  --out data/pseudo_msvae_paired
python scripts/train.py --config configs/msvae_paired_speaker_follower_bosslocal.yaml $T
# Session 3. App. D's BabyAI initialisation (only the follower's encoder and action decoder; the speaker
# side from scratch), with and without the unpaired data.
python scripts/train.py --config configs/msvae_paired_finit_bosslocal.yaml $T
python scripts/train.py --config configs/msvae_finit_bosslocal.yaml $T
# Two stages: 400 paired-only updates from each 2000-update run's best/ (the same second stage for both).
python scripts/train.py --config configs/msvae_paired_then_paired_bosslocal.yaml $T
python scripts/train.py --config configs/msvae_then_paired_bosslocal.yaml $T
# A heavier KL on the trajectory posterior: stopped at 1000 updates (validation BLEU collapsed to 5 twice).
python scripts/train.py --config configs/msvae_trajbeta1_bosslocal.yaml $T --max-updates 1000
# A third seed for the App. D statistics (collect_results' t-tests over seeds).
python scripts/train.py --config configs/msvae_paired_bosslocal.yaml $T --seed 2 --output-dir runs/bosslocal/msvae_paired_seed2
python scripts/train.py --config configs/msvae_bosslocal.yaml $T --seed 2 --output-dir runs/bosslocal/msvae_seed2
python scripts/train.py --config configs/msvae_gamma1_bosslocal.yaml $T --seed 2 --output-dir runs/bosslocal/msvae_gamma1_seed2
# Session 4. gamma = 1 with the domain regulariser D' weighted so that it is not negligible next to our
# per-sequence sums (alpha 10 and 100 instead of 1/20), alpha 10 over three seeds.
python scripts/train.py --config configs/msvae_gamma1_alpha10_bosslocal.yaml $T
python scripts/train.py --config configs/msvae_gamma1_alpha100_bosslocal.yaml $T
python scripts/train.py --config configs/msvae_gamma1_alpha10_bosslocal.yaml $T --seed 1 --output-dir runs/bosslocal/msvae_gamma1_alpha10_seed1
python scripts/train.py --config configs/msvae_gamma1_alpha10_bosslocal.yaml $T --seed 2 --output-dir runs/bosslocal/msvae_gamma1_alpha10_seed2
# V's action likelihood reaching only q(z|a,o) (the action decoder held fixed for the unpaired term); the
# gamma = 100 run was stopped at 1000 updates (validation BLEU had collapsed to 5-6 from update 600).
python scripts/train.py --config configs/msvae_gamma1_fixeddec_bosslocal.yaml $T
python scripts/train.py --config configs/msvae_fixeddec_bosslocal.yaml $T --max-updates 1000
# On a GPU machine (results/gpu_grid/): q(z|a,o) with its own observation encoder, nine runs side by side,
# and the rollout benchmark with the envs in worker processes.
#   GRID="msvae_paired_ownobs:0 msvae_paired_ownobs:1 msvae_paired_ownobs:2 msvae_gamma1_ownobs:0 \
#     msvae_gamma1_ownobs:1 msvae_gamma1_ownobs:2 msvae_ownobs:0 msvae_ownobs:1 msvae_ownobs:2" THREADS=1 \
#     ARCHIVE=$OUT/grid.tar.gz OUT=/tmp/grid bash scripts/gpu_seed_grid.sh   # $OUT: the folder that comes back
# What the speakers' representations hold about the object faced at the end (linear probes).
python scripts/probe_speaker.py --demos data/bosslocal_100k --model "speaker (baseline)=runs/bosslocal/speaker/best" \
  --model "MS-VAE paired only=runs/bosslocal/msvae_paired/best_speaker" \
  --model "MS-VAE full (gamma 100)=runs/bosslocal/msvae/best" \
  --model "MS-VAE gamma 1=runs/bosslocal/msvae_gamma1/best_speaker" \
  --model "MS-VAE gamma 1, alpha 10=runs/bosslocal/msvae_gamma1_alpha10/best_speaker" --out results/speaker_probe.json
# Session 5. Follower-rescored speaking (msvae_hf.extensions.pragmatics): 8 beam candidates, lam chosen on valid.
bash scripts/pragmatic_bosslocal.sh results/pragmatic_k8.json
# Self-training the speaker on the unpaired trajectories: the baseline speaker's own labels (data/pseudo_speaker,
# above), three seeds, or the gamma = 1, alpha = 10 MS-VAE's (one seed), against the paired-only speaker with
# the same 1200-update budget. Then the self-supervised front-cell pre-training of the speaker's encoders on
# the unpaired trajectories, or on the paired ones only (the control), three seeds each.
python scripts/label_unpaired.py --speaker runs/bosslocal/msvae_gamma1_alpha10/best_speaker \
  --demos data/bosslocal_100k --out data/pseudo_msvae_gamma1_alpha10
python scripts/train.py --config configs/speaker_msvae_labels_bosslocal.yaml $T
sfx() { [ "$1" = 0 ] || echo "_seed$1"; }  # run folder suffix of seed k
for k in 0 1 2; do
  python scripts/train.py --config configs/speaker_bosslocal.yaml $T --seed $k --demos data/bosslocal_100k \
    --max-updates 1200 --output-dir runs/bosslocal/speaker_paired$(sfx $k)
  python scripts/train.py --config configs/speaker_selftrain_bosslocal.yaml $T --seed $k \
    --output-dir runs/bosslocal/speaker_selftrain$(sfx $k)
done
# Front-cell pre-training on D_u or on the paired trajectories, then the pairs (seeds 0-2 in session 5, 3-4 in 6).
for k in 0 1 2 3 4; do
  for sp in unpaired paired; do
    python scripts/pretrain_speaker.py --demos data/bosslocal_100k --split $sp --updates 600 --seed $k $T \
      --config configs/speaker_bosslocal.yaml --out runs/bosslocal/speaker_init_front_$sp$(sfx $k)
    python scripts/train.py --config configs/speaker_front_${sp}_bosslocal.yaml $T --seed $k \
      --init-from runs/bosslocal/speaker_init_front_$sp$(sfx $k) --output-dir runs/bosslocal/speaker_front_$sp$(sfx $k)
  done
done
# Session 6. Self-training with a grounded teacher: the front-cell pre-trained speaker (seed 0) labels the
# first 40k unpaired trajectories; each student starts from the pre-trained encoders of its seed.
python scripts/label_unpaired.py --speaker runs/bosslocal/speaker_front_unpaired/best --demos data/bosslocal_100k \
  --num-unpaired 40000 --out data/pseudo_speaker_front
for k in 0 1 2 3 4; do
  python scripts/train.py --config configs/speaker_front_selftrain_bosslocal.yaml $T --seed $k \
    --init-from runs/bosslocal/speaker_init_front_unpaired$(sfx $k) --output-dir runs/bosslocal/speaker_front_selftrain$(sfx $k)
done
# The control without pre-training: the paired-only speaker (seed 0) labels the same 40k; fresh students.
python scripts/label_unpaired.py --speaker runs/bosslocal/speaker_paired/best --demos data/bosslocal_100k \
  --num-unpaired 40000 --out data/pseudo_speaker_paired
for k in 0 1 2; do
  python scripts/train.py --config configs/speaker_paired_selftrain_bosslocal.yaml $T --seed $k \
    --output-dir runs/bosslocal/speaker_paired_selftrain$(sfx $k)
done
# A second round: the first round's seed-0 student labels the same 40k; new students, seeds 0 and 1.
python scripts/label_unpaired.py --speaker runs/bosslocal/speaker_front_selftrain/best --demos data/bosslocal_100k \
  --num-unpaired 40000 --out data/pseudo_speaker_front2
python scripts/train.py --config configs/speaker_front_selftrain2_bosslocal.yaml $T --seed 0
python scripts/train.py --config configs/speaker_front_selftrain2_bosslocal.yaml $T --seed 1 \
  --init-from runs/bosslocal/speaker_init_front_unpaired_seed1 --output-dir runs/bosslocal/speaker_front_selftrain2_seed1
# Tables and curves.
python scripts/collect_results.py --runs runs/bosslocal --out results/bosslocal
python scripts/plot_curves.py runs/bosslocal/follower runs/bosslocal/speaker runs/bosslocal/msvae_paired \
  runs/bosslocal/msvae runs/bosslocal/msvae_gamma1 runs/bosslocal/speaker_follower \
  runs/bosslocal/msvae_paired_speaker_follower runs/bosslocal/msvae_speaker_follower \
  --metric valid/success_rate --metric valid/bleu --out results/bosslocal_curves.png
python scripts/compare_speakers.py --demos data/bosslocal_100k \
  --speaker "MS-VAE paired only=runs/bosslocal/msvae_paired/best_speaker" \
  --speaker "MS-VAE paired only, seed 1=runs/bosslocal/msvae_paired_seed1/best_speaker" \
  --speaker "speaker (baseline)=runs/bosslocal/speaker/best" \
  --speaker "MS-VAE full=runs/bosslocal/msvae/best" \
  --speaker "MS-VAE full, seed 1=runs/bosslocal/msvae_seed1/best_speaker" \
  --speaker "MS-VAE gamma = 1=runs/bosslocal/msvae_gamma1/best_speaker" \
  --speaker "MS-VAE gamma = 1, seed 1=runs/bosslocal/msvae_gamma1_seed1/best_speaker" \
  --speaker "MS-VAE alpha = 1000=runs/bosslocal/msvae_alpha1000/best" \
  --speaker "MS-VAE paired only, seed 2=runs/bosslocal/msvae_paired_seed2/best_speaker" \
  --speaker "MS-VAE full, seed 2=runs/bosslocal/msvae_seed2/best_speaker" \
  --speaker "MS-VAE gamma = 1, seed 2=runs/bosslocal/msvae_gamma1_seed2/best_speaker" \
  --speaker "MS-VAE paired only, follower-only init=runs/bosslocal/msvae_paired_finit/best_speaker" \
  --speaker "MS-VAE full, follower-only init=runs/bosslocal/msvae_finit/best_speaker" \
  --speaker "MS-VAE paired only, then paired=runs/bosslocal/msvae_paired_then_paired/best_speaker" \
  --speaker "MS-VAE full, then paired=runs/bosslocal/msvae_then_paired/best_speaker" \
  --speaker "MS-VAE trajectory beta = 1=runs/bosslocal/msvae_trajbeta1/best_speaker" \
  --speaker "MS-VAE gamma = 1, alpha = 10=runs/bosslocal/msvae_gamma1_alpha10/best_speaker" \
  --speaker "MS-VAE gamma = 1, alpha = 10, seed 1=runs/bosslocal/msvae_gamma1_alpha10_seed1/best_speaker" \
  --speaker "MS-VAE gamma = 1, alpha = 10, seed 2=runs/bosslocal/msvae_gamma1_alpha10_seed2/best_speaker" \
  --speaker "MS-VAE gamma = 1, alpha = 100=runs/bosslocal/msvae_gamma1_alpha100/best_speaker" \
  --speaker "MS-VAE full, V trains q(z|a,o) only=runs/bosslocal/msvae_fixeddec/best_speaker" \
  --speaker "MS-VAE gamma = 1, V trains q(z|a,o) only=runs/bosslocal/msvae_gamma1_fixeddec/best_speaker" \
  --out results/bosslocal_speakers.json
# Session 6 tables: the front-cell and self-training speakers alone (results/bosslocal_front.{json,md}; with
# every run above on disk the same rows are also in results/bosslocal), their BLEU with the paired bootstrap
# and the action / object sequences right on the test pairs, and on the training pairs (memorisation).
python scripts/collect_results.py --runs runs/bosslocal --out results/bosslocal_front
F=runs/bosslocal
speakers() {  # --speaker "LABEL[, seed k]=runs/bosslocal/RUN[_seed k]/best" for k = 0 .. N-1
  for k in $(seq 0 $(($3 - 1))); do echo "--speaker"; echo "$1$([ $k = 0 ] || echo ", seed $k")=$F/$2$(sfx $k)/best"; done
}
mapfile -t args < <(speakers "speaker, paired only" speaker_paired 3
  speakers "paired-only speaker, self-trained" speaker_paired_selftrain 3
  speakers "front-cell on paired trajectories" speaker_front_paired 5
  speakers "front-cell on D_u" speaker_front_unpaired 5
  speakers "front-cell on D_u, self-trained" speaker_front_selftrain 5
  speakers "front-cell on D_u, second round" speaker_front_selftrain2 2)
python scripts/compare_speakers.py --demos data/bosslocal_100k "${args[@]}" --out results/bosslocal_speakers_front.json
python scripts/compare_speakers.py --demos data/bosslocal_100k --split paired \
  --speaker "speaker, paired only=$F/speaker_paired/best" --speaker "front-cell on D_u=$F/speaker_front_unpaired/best" \
  --speaker "front-cell on D_u, self-trained=$F/speaker_front_selftrain/best" \
  --out results/bosslocal_speakers_front_train_pairs.json
