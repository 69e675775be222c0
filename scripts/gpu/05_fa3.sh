#!/usr/bin/env bash
# sgl_kernel's FA3 library (scripts/build_fa3_parts.sh; gpu_check.sh installs it with GPU_FA3=1 once every part is
# here): the parts kept so far, whether FA3 imports, and where it does the GPU tests of the FA3 prefix (the
# standalone cascade against the reference, and the served verify wiring captured in a graph). Run it as
# `GPU_FA3=1 bash scripts/gpu_check.sh build fa3`.
set -u
cd "$(dirname "$0")/../.."
OUTD=${STEP_OUT:-${OUT:-/tmp}/fa3}; mkdir -p "$OUTD"
ls -la /tmp/fa3-parts 2>/dev/null; cat /tmp/fa3-parts/MANIFEST 2>/dev/null
python3 -c "from sglang_ddtree.attention import fa3; print('fa3 installed:', fa3.installed())" \
  | tee "$OUTD/fa3.txt"
grep -q "installed: True" "$OUTD/fa3.txt" || exit 0
STEP_OUT=$OUTD GPU_TESTS="tests/attention/test_attention_gpu.py tests/sglang/test_sglang_tree_attention.py::test_library_prefix_cascade_on_the_gpu" \
  bash scripts/gpu/15_tests.sh
