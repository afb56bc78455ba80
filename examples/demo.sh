#!/usr/bin/env bash
# The main job on the bundled example: a CNN trained on handwritten digits (examples/digits_cnn.onnx).
set -euo pipefail
ANEKIT=$(if [ -n "${1:-}" ]; then realpath "$1"; else command -v anekit; fi)
PYTHON=$(dirname "$ANEKIT")/python
cd "$(dirname "$0")"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

step "$ANEKIT" info digits_cnn.onnx
step "$ANEKIT" check digits_cnn.onnx --target m1
step "$ANEKIT" estimate digits_cnn.onnx --target all
step "$ANEKIT" compile digits_cnn.onnx -t m4 -o "$OUT/digits.anekit"
step "$ANEKIT" run "$OUT/digits.anekit" --input image=digit.npy
step "$ANEKIT" inspect "$OUT/digits.anekit/segments/0/model.mil"
step "$PYTHON" demo.py
