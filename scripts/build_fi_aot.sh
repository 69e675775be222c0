#!/bin/bash
# FlashInfer's JIT modules that SGLang 0.5.17 servers on the H200 build at start-up for a Qwen3-8B-shaped target
# (bf16, head dim 128: batch prefill fa2 and fa3 "_sm90", cascade merge, norm) and that the FlashInfer-MLA prefix
# builds for an MLA target (batch MLA, fa3 on Hopper, bf16, latent 512 + rope 64), built here with nvcc for sm_90a
# through FlashInfer's own JIT specs (the names it looks up) and packed in its AOT layout (<name>/<name>.so) as
# .sgl/fi-aot.tar.xz; scripts/gpu/fi_aot.sh installs them on the GPU machine, so no server there compiles them.
# (gpu_check.sh GPU_CHECK_SAVE_JIT=1 brings back what a GPU machine built instead.) Needs nvcc 13 and PyPI; about
# 17 min on 2 cores. No GPU is touched: FLASHINFER_CUDA_ARCH_LIST names the target; FlashInfer's link line asks
# for libcuda, which no module uses (--as-needed drops it), so an empty stub stands in for the driver here.
# usage: bash scripts/build_fi_aot.sh [OUT.tar.xz]   (the flashinfer wheel from DL=/tmp/sgl-dl after make gpu-bundle)
set -euo pipefail
OUT=$(realpath -m "${1:-.sgl/fi-aot.tar.xz}"); DL=${DL:-/tmp/sgl-dl}; W=$(mktemp -d)
FI=$(ls "$DL"/flashinfer_python-0.6.15.post1-*.whl 2>/dev/null | head -1 || true)
[ -n "$FI" ] || { python3 -m pip download -q --no-deps -d "$DL" flashinfer-python==0.6.15.post1; FI=$(ls "$DL"/flashinfer_python-0.6.15.post1-*.whl); }
unzip -q "$FI" -d "$W/site"
python3 -m pip install -q --no-deps --target "$W/site" "apache-tvm-ffi==0.1.11" nvidia-ml-py ninja
# curand / cublas headers that FlashInfer's sources include (declarations only; a bare CUDA toolkit lacks them)
python3 -m pip install -q --no-deps --target "$W/cuda" "nvidia-curand==10.4.0.35" "nvidia-cublas==13.0.0.19"
mkdir -p "$W/stubs" && : > "$W/stubs/empty.c" && gcc -shared -o "$W/stubs/libcuda.so" "$W/stubs/empty.c"
export PATH=/usr/local/cuda/bin:$W/site/bin:$PATH CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONPATH=$W/site \
  FLASHINFER_WORKSPACE_BASE=$W/ws FLASHINFER_CUDA_ARCH_LIST=9.0a LIBRARY_PATH=$W/stubs MAX_JOBS=$(nproc) \
  FLASHINFER_EXTRA_CUDAFLAGS="-isystem $W/cuda/nvidia/cu13/include"
python3 - "$W/aot" <<'PY'
import shutil, sys, time
import torch
from flashinfer.jit.attention.modules import gen_batch_mla_module, gen_batch_prefill_module
from flashinfer.jit.cascade import gen_cascade_module
from flashinfer.jit.core import build_jit_specs
from flashinfer.jit.norm import gen_norm_module
from flashinfer.utils import PosEncodingMode

# prefill.py plan()'s module arguments as SGLang's FlashInfer backend (and the plugin's prefix) call it: q, kv, o
# dtypes, indptr dtype, head dims, no position encoding, no sliding window, no logit cap, no fp16 qk reduction
args = (torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32, 128, 128, PosEncodingMode["NONE"].value,
        False, False, False)
specs = [gen_batch_prefill_module(b, *args) for b in ("fa2", "fa3")] + [gen_cascade_module(), gen_norm_module()]
# BatchMLAPagedAttentionWrapper(backend="auto") on sm90a, as flashinfer_graphs.FlashInferMLAPrefix plans it
specs.append(gen_batch_mla_module("fa3", torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32, 512, 64, False))
t = time.time()
build_jit_specs(specs, verbose=False)
for s in specs:
    dst = f"{sys.argv[1]}/{s.name}"
    shutil.os.makedirs(dst, exist_ok=True)
    shutil.copy(s.jit_library_path, f"{dst}/{s.name}.so")
    print(s.name)
print(f"built in {time.time() - t:.0f} s")
PY
mkdir -p "$(dirname "$OUT")" && tar -C "$W/aot" -cf - . | xz -6 -T0 > "$OUT"
rm -rf "$W"; ls -la "$OUT"
