#!/usr/bin/env bash
# Set up (scripts/install.sh) and run the default test suite (slow tests excluded; `-m slow` runs them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
# The Space's browser test (tests/test_space.py) drives Chromium headless; where apt is at hand as root, the test
# command puts it in (best effort: without it that one test is skipped and says why).
if ! command -v chromedriver >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  { timeout 600 apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
    || { timeout 300 apt-get update -q >/dev/null 2>&1 && timeout 600 apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; } \
    || echo "Chromium not installed: tests/test_space.py's browser test will be skipped"
fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
python -m pytest -q "$@"
