#!/usr/bin/env bash
# Set up (scripts/install.sh) and run the default test suite (slow tests excluded; `-m slow` runs them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
python -m pytest -q "$@"
