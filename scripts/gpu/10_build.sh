#!/usr/bin/env bash
# Build the native libraries (JIT, cached in TORCH_EXTENSIONS_DIR) and report the compile time: the CPU library, then
# the CUDA op families (_build.CUDA_FAMILIES), which load_cuda builds side by side.
set -e
python3 - <<'PY'
import time
from sglang_ddtree import _build
t = time.time(); _build.load_cpu(); print(f"cpu library {time.time() - t:.1f}s")
t = time.time(); _build.load_cuda(); print(f"cuda libraries ({', '.join(_build.CUDA_FAMILIES)}) {time.time() - t:.1f}s")
PY
