#!/usr/bin/env bash
# The main job on the bundled example: a CNN trained on handwritten digits (examples/digits_cnn.onnx).
set -euo pipefail
ANEKIT=${1:-anekit}
cd "$(dirname "$0")"
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

step "$ANEKIT" info digits_cnn.onnx
step "$ANEKIT" run digits_cnn.onnx --input image=digit.npy
