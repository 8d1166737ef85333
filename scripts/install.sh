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
# The Space's browser test (tests/test_space.py) drives Chromium headless; where apt is at hand as root, put it in
# (best effort: without it that one test is skipped and says why).
if ! command -v chromedriver >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  { timeout 600 apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
    || { timeout 300 apt-get update -q >/dev/null 2>&1 && timeout 600 apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; } \
    || echo "Chromium not installed: tests/test_space.py's browser test will be skipped"
fi
