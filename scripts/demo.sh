#!/usr/bin/env bash
# The main job: segment a real Sentinel-2 tile on the embedded engine and write out/overlay.png
# and out/detections.gpkg. Give your SAM3 checkpoint as the first argument; without one the model
# has RANDOM weights and its masks are meaningless (it says so loudly).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
args=()
# the first argument is the checkpoint unless it is an option (e.g. --overwrite, to run again)
if [ $# -ge 1 ] && [[ "$1" != -* ]]; then args+=(--checkpoint "$1"); shift; fi
exec .venv/bin/napari-sam3 demo "${args[@]}" "$@"
