#!/usr/bin/env bash
# Install msvae-hf and its test tools into the current Python environment.
# Puts a CPU build of torch in place first when torch is missing: an unpinned `torch` from PyPI pulls a
# multi-GB CUDA build. On a GPU machine install the torch build you want before running this.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python -c "import torch" >/dev/null 2>&1; then
  python -m pip install --quiet torch==2.13.0
fi
python -m pip install --quiet -e ".[dev]"
