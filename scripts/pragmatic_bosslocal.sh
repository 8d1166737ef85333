#!/usr/bin/env bash
# Follower-rescored speaking on BossLocal (README "Results"): every trained speaker with its own run's follower,
# 8 beam candidates, lam chosen on the valid pairs. Usage: bash scripts/pragmatic_bosslocal.sh OUT.json [CANDIDATES]
set -euo pipefail
cd "$(dirname "$0")/.."
R=runs/bosslocal
python scripts/pragmatic_speakers.py --demos data/bosslocal_100k --threads 1 --candidates "${2:-8}" --out "$1" \
  --system "MS-VAE paired only#0=$R/msvae_paired/best_speaker,$R/msvae_paired/best" \
  --system "MS-VAE paired only#1=$R/msvae_paired_seed1/best_speaker,$R/msvae_paired_seed1/best" \
  --system "MS-VAE paired only#2=$R/msvae_paired_seed2/best_speaker,$R/msvae_paired_seed2/best" \
  --system "MS-VAE full, gamma 1, alpha 10#0=$R/msvae_gamma1_alpha10/best_speaker,$R/msvae_gamma1_alpha10/best" \
  --system "MS-VAE full, gamma 1, alpha 10#1=$R/msvae_gamma1_alpha10_seed1/best_speaker,$R/msvae_gamma1_alpha10_seed1/best" \
  --system "MS-VAE full, gamma 1, alpha 10#2=$R/msvae_gamma1_alpha10_seed2/best_speaker,$R/msvae_gamma1_alpha10_seed2/best" \
  --system "MS-VAE full, gamma 1#0=$R/msvae_gamma1/best_speaker,$R/msvae_gamma1/best" \
  --system "MS-VAE full, gamma 1#1=$R/msvae_gamma1_seed1/best_speaker,$R/msvae_gamma1_seed1/best" \
  --system "MS-VAE full, gamma 1#2=$R/msvae_gamma1_seed2/best_speaker,$R/msvae_gamma1_seed2/best" \
  --system "MS-VAE full, App. D#0=$R/msvae/best,$R/msvae/best" \
  --system "MS-VAE full, App. D#1=$R/msvae_seed1/best_speaker,$R/msvae_seed1/best" \
  --system "MS-VAE full, App. D#2=$R/msvae_seed2/best_speaker,$R/msvae_seed2/best" \
  --system "baselines: speaker, follower=$R/speaker/best,$R/follower/best" \
  --system "paired-only speaker, full follower#0=$R/msvae_paired/best_speaker,$R/msvae_gamma1_alpha10/best" \
  --system "paired-only speaker, full follower#1=$R/msvae_paired_seed1/best_speaker,$R/msvae_gamma1_alpha10_seed1/best" \
  --system "paired-only speaker, full follower#2=$R/msvae_paired_seed2/best_speaker,$R/msvae_gamma1_alpha10_seed2/best"
