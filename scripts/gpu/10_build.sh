#!/usr/bin/env bash
# Build both native libraries (JIT, cached in TORCH_EXTENSIONS_DIR) and report the compile time.
set -e
python3 - <<'PY'
import time
from sglang_ddtree import _build
t = time.time(); _build.load_cpu(); print(f"cpu library {time.time() - t:.1f}s")
t = time.time(); _build.load_cuda(); print(f"cuda library {time.time() - t:.1f}s")
PY
