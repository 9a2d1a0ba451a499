#!/usr/bin/env bash
# The whole test suite: installs what it needs (scripts/setup.sh), lints, then runs pytest.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/napari -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export NAPARI_APPLICATION_IPY_INTERACTIVE=false
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest "$@"
