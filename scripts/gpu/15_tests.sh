#!/usr/bin/env bash
# Every GPU-marked test in the suite (tree ops, round core, verify attention incl. the ragged serving op,
# draft head graph capture, engine), on the device, with FlashInfer from the bundle when present.
set -u
STEP_OUT=${STEP_OUT:-${OUT:-.out}}; mkdir -p "$STEP_OUT"
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch_ext} FLASHINFER_WORKSPACE_BASE=/tmp/fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# SGLang 0.5.17 registers configs the device's newer transformers already has: the bundle's pin goes first
if [ -f .sgl/tf-pin.tar.xz ]; then
  [ -f /tmp/site_pin/.done ] || { mkdir -p /tmp/site_pin && python3 -c "import sys,tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='fully_trusted')" .sgl/tf-pin.tar.xz /tmp/site_pin && touch /tmp/site_pin/.done; }
  export PYTHONPATH=/tmp/site_pin:$PYTHONPATH
fi
timeout ${GPU_TESTS_TIMEOUT:-420} python3 -m pytest -q -p no:cacheprovider -m gpu -rs ${GPU_TESTS:-tests} \
  --junitxml="$STEP_OUT/tests.xml" 2>&1 | tee "$STEP_OUT/tests.log" | tail -40
exit "${PIPESTATUS[0]}"
