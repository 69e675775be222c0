#!/bin/bash
# sgl_kernel's FA3 library (flash_ops.abi3.so, 1.1 GB, trimmed from the H200 bundle) made carriable to the H200:
# scripts/fatbin_keep_arch.py zeroes the cubins an sm_90 device never loads (sm_80 / sm_86) and, with FA3_KEEP (a
# regex of kernel names; by default FA3's head dim 128 bf16 forward kernels, its split combine and its scheduler
# metadata: what a Qwen3-8B-shaped target calls), the sm_90 cubins holding none of those kernels; then xz -9e, cut
# into parts of 63 MiB: OUTDIR/part-NN and OUTDIR/MANIFEST (part count, sha256 of the library as installed).
# Default: one part of ~10 MB in .sgl/fa3. The bundle and the checkout leave no room for it in one 64 MiB carry:
# carry it on a warm machine after a call that carried the bundle (`carry: [".sgl/fa3", ".sgl/fi-aot.tar.xz"]`,
# GPU_FA3=1). FA3_KEEP= (empty) keeps
# every sm_90 cubin: two parts of ~60 MiB in OUTDIR=.sgl-fa3, one call each (`carry: [".sgl-fa3/part-00",
# ".sgl-fa3/MANIFEST"]`). gpu_check.sh keeps every part it is handed in /tmp/fa3-parts on the warm machine and,
# once all are there and the bundle is unpacked, installs the library into the bundle's sgl_kernel.
# usage: bash scripts/build_fa3_parts.sh [OUTDIR]   (the sglang-kernel wheel from DL=/tmp/sgl-dl after
# `make gpu-bundle`, else downloaded: 383 MB; needs readelf, c++filt and `pip install zstandard`)
set -euo pipefail
FA3_KEEP=${FA3_KEEP-'CollectiveMainloopFwdSm90<\d+, cute::tuple<cute::C<\d+>, cute::C<\d+>, cute::C<\d+> >, cute::tuple<cute::C<\d+>, cute::C<\d+>, cute::C<128> >, 128, cutlass::bfloat16_t|FlashAttnFwdCombine|prepare_varlen_num_blocks'}
OUT=$(realpath -m "${1:-$([ -n "$FA3_KEEP" ] && echo .sgl/fa3 || echo .sgl-fa3)}"); DL=${DL:-/tmp/sgl-dl}; ST=$(mktemp -d)
WHL=$(ls "$DL"/sglang_kernel-0.4.5-*.whl 2>/dev/null | head -1 || true)
if [ -z "$WHL" ]; then
  mkdir -p "$DL" && python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 -d "$DL" sglang-kernel==0.4.5
  WHL=$(ls "$DL"/sglang_kernel-0.4.5-*.whl | head -1)
fi
unzip -q -o "$WHL" sgl_kernel/flash_ops.abi3.so -d "$ST"
python3 "$(dirname "$0")/fatbin_keep_arch.py" "$ST/sgl_kernel/flash_ops.abi3.so" "$ST/flash_ops.so" --arch 90 \
  ${FA3_KEEP:+--keep-kernels "$FA3_KEEP"}
mkdir -p "$OUT" && rm -f "$OUT"/part-* "$OUT"/MANIFEST
xz -9e -T"${XZ_THREADS:-0}" -c "$ST/flash_ops.so" | split -b 63M -d -a 2 - "$OUT/part-"
printf 'parts %s\nsha256 %s\nkeep %s\n' "$(ls "$OUT"/part-* | wc -l)" \
  "$(sha256sum "$ST/flash_ops.so" | cut -d' ' -f1)" "${FA3_KEEP:-all sm_90 cubins}" > "$OUT/MANIFEST"
rm -rf "$ST"; ls -la "$OUT"; cat "$OUT/MANIFEST"
