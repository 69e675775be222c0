#!/bin/bash
# sgl_kernel's FA3 library (flash_ops.abi3.so, 1.1 GB, trimmed from the H200 bundle) in parts a device call can
# carry (64 MiB each, with nothing else): its sm_80 / sm_86 cubins zeroed (scripts/fatbin_keep_arch.py: an H200
# loads only the sm_90a ones), xz -9e, split: OUTDIR/part-NN and OUTDIR/MANIFEST (part count, sha256 of the
# library as installed). Carry one part per call with the MANIFEST (`carry: [".sgl-fa3/part-00", ".sgl-fa3/MANIFEST"]`,
# command `bash scripts/gpu_check.sh fa3`); gpu_check.sh keeps each part in /tmp/fa3-parts on the warm machine
# and, once all are there, installs the library into the unpacked bundle (SGLang's fa3 backend then loads).
# usage: bash scripts/build_fa3_parts.sh [OUTDIR]   (OUTDIR .sgl-fa3; the sglang-kernel wheel of the bundle, from
# DL=/tmp/sgl-dl after `make gpu-bundle`, else downloaded: 383 MB; xz -9e of 1.1 GB takes ~20 min on one core)
set -euo pipefail
OUT=$(realpath -m "${1:-.sgl-fa3}"); DL=${DL:-/tmp/sgl-dl}; ST=$(mktemp -d)
WHL=$(ls "$DL"/sglang_kernel-0.4.5-*.whl 2>/dev/null | head -1 || true)
if [ -z "$WHL" ]; then
  mkdir -p "$DL" && python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 -d "$DL" sglang-kernel==0.4.5
  WHL=$(ls "$DL"/sglang_kernel-0.4.5-*.whl | head -1)
fi
unzip -q -o "$WHL" sgl_kernel/flash_ops.abi3.so -d "$ST"
python3 "$(dirname "$0")/fatbin_keep_arch.py" "$ST/sgl_kernel/flash_ops.abi3.so" "$ST/flash_ops.sm90.so" --arch 90
mkdir -p "$OUT" && rm -f "$OUT"/part-* "$OUT"/MANIFEST
xz -9e -T"${XZ_THREADS:-0}" -c "$ST/flash_ops.sm90.so" | split -b 63M -d -a 2 - "$OUT/part-"
printf 'parts %s\nsha256 %s\n' "$(ls "$OUT"/part-* | wc -l)" \
  "$(sha256sum "$ST/flash_ops.sm90.so" | cut -d' ' -f1)" > "$OUT/MANIFEST"
rm -rf "$ST"; ls -la "$OUT"; cat "$OUT/MANIFEST"
