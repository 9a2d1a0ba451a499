#!/usr/bin/env bash
# Installs napari-sam3's QGIS plugin (a Processing provider) on Debian, with QGIS from Debian's
# packages (bookworm: QGIS 3.22). Safe to run again. Afterwards, in a new shell:
#   qgis_process run napari_sam3:segment_text --INPUT=scene.tif --KEYWORDS=building,water \
#       --MODELS=models/sam3 --OUTPUT=out.gpkg
#
# 1. apt-installs qgis, python3-qgis and python3-venv where missing (sudo when not root);
# 2. makes napari-sam3's own environment, a venv of Debian's python3 (the interpreter QGIS
#    embeds) holding napari_sam3's core from this checkout, without the napari extra:
#      ${XDG_DATA_HOME:-~/.local/share}/napari-sam3/qgis-env   (NAPARI_SAM3_QGIS_ENV to change)
#    QGIS never imports it: the plugin runs each job in that Python and reads the files back,
#    so the library's wheels (numpy, and rasterio/pyogrio with their own GDAL and PROJ) never
#    meet QGIS's own in one process, and Debian's python3 gets nothing installed into it;
#    --python PY uses an existing Python that has napari_sam3 (e.g. a checkout's .venv) instead;
# 3. copies the plugin into the QGIS profile (QGIS_PROFILE, default "default"), enables it and
#    records which Python it runs (Settings > Options > Processing > Providers > napari-sam3);
# 4. where Debian's /usr/bin/qgis_process is broken (bookworm's passes the GUI's
#    --noversioncheck, which qgis_process.bin refuses: qgis/QGIS#57683), puts a working
#    `qgis_process` first on PATH: /usr/local/bin as root, else ~/.local/bin
#    (NAPARI_SAM3_BIN_DIR to change); it runs headless (offscreen) when there is no display.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PLUGIN=napari_sam3_qgis

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }
PY=""
while (($#)); do
    case "$1" in
        --python) PY=$(realpath -s "$2"); shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "install_qgis_plugin.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
say() { echo "[install_qgis_plugin] $*"; }
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

# 1. QGIS from Debian's packages
need=()
for pkg in qgis python3-qgis python3-venv; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
    say "installing Debian packages: ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
QGIS_PYTHON=/usr/bin/python3  # the interpreter Debian's QGIS embeds
"$QGIS_PYTHON" -c "import qgis.core" || { say "QGIS's Python cannot import qgis.core"; exit 1; }

# 2. napari-sam3's environment
if [ -z "$PY" ]; then
    ENV_DIR=${NAPARI_SAM3_QGIS_ENV:-${XDG_DATA_HOME:-$HOME/.local/share}/napari-sam3/qgis-env}
    if [ ! -x "$ENV_DIR/bin/python" ]; then
        say "creating napari-sam3's environment $ENV_DIR"
        "$QGIS_PYTHON" -m venv "$ENV_DIR"
    fi
    say "installing napari-sam3 (core, no napari) into it"
    "$ENV_DIR/bin/python" -m pip install -q --disable-pip-version-check \
        -c "$ROOT/constraints.txt" "$ROOT"
    PY="$ENV_DIR/bin/python"
fi
"$PY" -c "import napari_sam3.scene, napari_sam3.gis.vector" \
    || { say "$PY cannot import napari_sam3"; exit 1; }

# 3. the plugin, enabled, with its Python
PROFILE_DIR=${XDG_DATA_HOME:-$HOME/.local/share}/QGIS/QGIS3/profiles/${QGIS_PROFILE:-default}
PLUGINS_DIR="$PROFILE_DIR/python/plugins"
mkdir -p "$PLUGINS_DIR" "$PROFILE_DIR/QGIS"
staging=$(mktemp -d "$PLUGINS_DIR/.$PLUGIN.XXXXXX")
cp -r "$ROOT/qgis_plugin/$PLUGIN/." "$staging/"
find "$staging" -name __pycache__ -prune -exec rm -rf {} +
rm -rf "$PLUGINS_DIR/$PLUGIN"
mv "$staging" "$PLUGINS_DIR/$PLUGIN"
chmod 755 "$PLUGINS_DIR/$PLUGIN"
QT_QPA_PLATFORM=offscreen "$QGIS_PYTHON" - "$PROFILE_DIR/QGIS/QGIS3.ini" "$PLUGIN" "$PY" <<'EOF'
import sys
from PyQt5.QtCore import QSettings

ini, plugin, python = sys.argv[1:]
settings = QSettings(ini, QSettings.IniFormat)
settings.setValue(f"PythonPlugins/{plugin}", True)
settings.setValue("Processing/Configuration/NAPARI_SAM3_PYTHON", python)
settings.sync()
sys.exit(0 if settings.status() == QSettings.NoError else 1)
EOF
say "plugin in $PLUGINS_DIR/$PLUGIN, running $PY"

# 4. a qgis_process that works
version=$(QT_QPA_PLATFORM=offscreen qgis_process --version 2>&1 || true)
if [[ $version == *"--noversioncheck not known"* ]]; then
    if [ -n "${NAPARI_SAM3_BIN_DIR:-}" ]; then BIN_DIR=$NAPARI_SAM3_BIN_DIR
    elif [ "$(id -u)" -eq 0 ]; then BIN_DIR=/usr/local/bin
    else BIN_DIR=$HOME/.local/bin; fi
    mkdir -p "$BIN_DIR"
    cat > "$BIN_DIR/qgis_process.new" <<'EOF'
#!/bin/sh
# Written by napari-sam3's scripts/install_qgis_plugin.sh: Debian bookworm's /usr/bin/qgis_process
# passes the GUI's --noversioncheck, which qgis_process.bin refuses (qgis/QGIS#57683).
if [ -d /usr/lib/grass82/lib ]; then
    LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/lib/grass82/lib
    export LD_LIBRARY_PATH
fi
if [ -z "$DISPLAY" ] && [ -z "$WAYLAND_DISPLAY" ] && [ -z "$QT_QPA_PLATFORM" ]; then
    QT_QPA_PLATFORM=offscreen
    export QT_QPA_PLATFORM
fi
exec /usr/bin/qgis_process.bin "$@"
EOF
    chmod 755 "$BIN_DIR/qgis_process.new"
    mv "$BIN_DIR/qgis_process.new" "$BIN_DIR/qgis_process"
    say "Debian's qgis_process is broken (qgis/QGIS#57683): a working one is $BIN_DIR/qgis_process"
    case ":$PATH:" in *":$BIN_DIR:"*) ;; *) say "add $BIN_DIR to PATH (e.g. in ~/.bashrc)";; esac
    QGIS_PROCESS="$BIN_DIR/qgis_process"
else
    QGIS_PROCESS=qgis_process
fi

# Check: QGIS lists the provider's algorithms
listed=$(QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen} "$QGIS_PROCESS" list 2>&1 || true)
if [[ $listed != *"napari_sam3:segment_text"* ]]; then
    say "qgis_process does not list napari_sam3:segment_text; see 'qgis_process plugins'"
    exit 1
fi
say "done: qgis_process run napari_sam3:segment_text --INPUT=scene.tif --KEYWORDS=building,water --MODELS=DIR --OUTPUT=out.gpkg"
