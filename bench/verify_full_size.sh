#!/usr/bin/env bash
# The full-size checks the suite leaves out (marker `full_size`, deselected by pyproject.toml's
# addopts): parity of the full-size PVS graphs with the official predictor. Run on purpose, e.g.
# after changing export/sam3_export/graphs/pvs_decoder.py; minutes on 2 cores, ~10 GB of RAM.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
exec .venv/bin/python -m pytest -p no:cacheprovider -m full_size tests/export "$@"
