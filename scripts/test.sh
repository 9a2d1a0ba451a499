#!/usr/bin/env bash
# The whole test suite, in two environments: installs them (scripts/setup.sh: .venv/, pinned for
# the CPU Triton server; scripts/setup_current.sh: .venv-current/, no constraints file, numpy 2
# and pandas 3 as an analyst gets them), lints, exports the tiny test model once, then runs all of
# pytest in .venv/ and the tests that need no torch and no tritonserver in .venv-current/.
# Fails if either fails. Extra arguments go to pytest in .venv/ alone, e.g.
# `bash scripts/test.sh tests/plugin -x` (no second environment then).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export NAPARI_APPLICATION_IPY_INTERACTIVE=false
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
.venv/bin/ruff check .
.venv/bin/ruff format --check .
if (($#)); then
    exec .venv/bin/python -m pytest "$@"
fi

# What the second environment runs (about 650 tests): the library, the CLI, the readers, the
# writers and the results panel; not the packaging and network guards (the same in both).
CURRENT_TESTS=(
    tests/core/test_errors.py tests/core/test_files.py tests/core/test_validate.py
    tests/client tests/imagery tests/masks tests/gis tests/scene tests/prompts
    tests/plugin/test_reader_sample.py tests/plugin/test_reader_errors.py
    tests/plugin/test_reader_lazy.py tests/plugin/test_io.py tests/plugin/test_panel_results.py
)

work=$(mktemp -d)
current_setup=""
cleanup() {
    if [ -n "$current_setup" ]; then kill -- "-$current_setup" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
# Mostly downloads: it runs beside the export and the main environment's tests (in its own
# process group, so that an early exit stops pip too).
setsid bash scripts/setup_current.sh >"$work/setup_current.log" 2>&1 &
current_setup=$!

# One tiny random-weight export for both environments (tests/conftest.py checks that it is the
# one its `tiny_repository` fixture would make).
.venv/bin/sam3-export --random-weights --seed 0 --size tiny --flavor python --device cpu \
    --precision fp32 --out "$work/tiny_repository" -q
# The second environment gets it as exported (Triton writes __pycache__ into what it serves).
cp -r "$work/tiny_repository" "$work/tiny_repository_current"

main=0
# Two workers (pytest-xdist): the tests of one file, and all export tests, share a worker
# (tests/conftest.py gives each an xdist group), so module and export fixtures are made once.
PARALLEL=(-n 2 --dist loadgroup)
SAM3_TEST_TINY_REPOSITORY="$work/tiny_repository" .venv/bin/python -m pytest "${PARALLEL[@]}" \
    --durations=30 || main=$?

current=0
if wait "$current_setup"; then
    current_setup=""
    grep '^\[setup-current\]' "$work/setup_current.log" || true
    SAM3_TEST_TINY_REPOSITORY="$work/tiny_repository_current" .venv-current/bin/python -m pytest "${PARALLEL[@]}" --durations=15 \
        -m "not needs_export and not needs_tritonserver" "${CURRENT_TESTS[@]}" || current=$?
else
    current=$?
    current_setup=""
    cat "$work/setup_current.log"
    echo "[test] scripts/setup_current.sh failed (exit $current)"
fi

echo "[test] .venv: pytest exit $main; .venv-current (no constraints): exit $current"
((main == 0 && current == 0))
