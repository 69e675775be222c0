#!/usr/bin/env bash
# The one command for a GPU machine: build the extension, run the GPU tests, the sanitizer and the
# benchmarks, write JSON and logs. Runs every scripts/gpu/NN_<name>.sh in order, or only the named ones:
#   bash scripts/gpu_check.sh                 # everything
#   bash scripts/gpu_check.sh build tree      # selected steps
# Each step gets STEP_OUT (its own folder) and runs from the repository root; a failing step does not stop
# the others. Results: $OUT/gpu_check.tar.gz (all step folders) and $OUT/summary.txt.
# GPU_CHECK_DEADLINE_S=N: every step is stopped (SIGTERM to its process group) so that the whole run, tarball
# included, ends within N seconds of the start, and later steps are skipped: a machine that cuts the command
# off at its limit would otherwise lose every result (the device's 600 s call limit: set 580).
# If .sgl/sgl-bundle.tar.xz was carried (make gpu-bundle), SGLang 0.5.17 + FlashInfer + sgl-kernel are
# unpacked to /tmp/site and put on PYTHONPATH. Every knob of the steps: scripts/README.md.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.out}
WORK=$(mktemp -d /tmp/gpu_check.XXXX)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch_ext}
t0=$(date +%s)
source scripts/gpu/fi_aot.sh  # _x, unpack_bundle, install_fi_aot
unpack_bundle
install_fi_aot  # FlashInfer's AOT modules, for the GPU tests too
# sgl_kernel's FA3 library (scripts/build_fa3_parts.sh: .sgl/fa3 with the bundle, or .sgl-fa3 a part per call):
# each part is kept in /tmp/fa3-parts; once all are there (and the bundle is unpacked) it is installed into the
# bundle's sgl_kernel
for d in .sgl/fa3 .sgl-fa3; do
  if ls $d/part-* >/dev/null 2>&1; then mkdir -p /tmp/fa3-parts && cp $d/* /tmp/fa3-parts/; fi
done
# GPU_FA3=1 puts it in place for this call (fa3 step, RC_FA3 / AB_FA3 servers); otherwise it is moved aside, so
# that no other step loads a library whose unused cubins are zeroed
FA3_SO=/tmp/site/sgl_kernel/flash_ops.abi3.so
if [ "${GPU_FA3:-0}" = 1 ]; then [ -f "$FA3_SO.off" ] && mv "$FA3_SO.off" "$FA3_SO"
else [ -f "$FA3_SO" ] && mv "$FA3_SO" "$FA3_SO.off"; fi
if [ "${GPU_FA3:-0}" = 1 ] && [ -f /tmp/fa3-parts/MANIFEST ] && [ -d /tmp/site/sgl_kernel ] && [ ! -f "$FA3_SO" ] \
   && [ "$(ls /tmp/fa3-parts/part-* | wc -l)" = "$(awk '/^parts/ {print $2}' /tmp/fa3-parts/MANIFEST)" ]; then
  cat /tmp/fa3-parts/part-* | xz -d > "$FA3_SO.tmp" \
    && [ "$(sha256sum "$FA3_SO.tmp" | cut -d' ' -f1)" = "$(awk '/^sha256/ {print $2}' /tmp/fa3-parts/MANIFEST)" ] \
    && mv "$FA3_SO.tmp" "$FA3_SO" || { rm -f "$FA3_SO.tmp"; echo "FA3 parts did not assemble" >&2; }
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
# the package itself (entry point metadata included, so SGLang's plugin loader finds it)
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$WORK/pip.log" 2>&1 \
  || export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
echo "setup $(( $(date +%s) - t0 ))s" >"$OUT/summary.txt"

steps=()
for f in scripts/gpu/[0-9][0-9]_*.sh; do
  name=$(basename "$f" .sh); name=${name#[0-9][0-9]_}
  if [ $# -eq 0 ] || printf '%s\n' "$@" | grep -qx "$name"; then steps+=("$f"); fi
done
for f in "${steps[@]}"; do
  name=$(basename "$f" .sh); name=${name#[0-9][0-9]_}
  export STEP_OUT="$WORK/$name"; mkdir -p "$STEP_OUT"
  s=$(date +%s)
  if [ -n "${GPU_CHECK_DEADLINE_S:-}" ]; then  # stop each step in time for the tarball to be written
    left=$(( GPU_CHECK_DEADLINE_S - (s - t0) - 20 ))
    if [ $left -le 0 ]; then echo "$name skipped: deadline" | tee -a "$OUT/summary.txt"; continue; fi
    timeout -k 15 $left bash "$f" >"$STEP_OUT/step.log" 2>&1; rc=$?
  else
    bash "$f" >"$STEP_OUT/step.log" 2>&1; rc=$?
  fi
  line="$name rc=$rc $(( $(date +%s) - s ))s"
  echo "$line" | tee -a "$OUT/summary.txt"
  [ $rc -ne 0 ] && tail -30 "$STEP_OUT/step.log"
done
tar -C "$WORK" -czf "$OUT/gpu_check.tar.gz" .
# GPU_CHECK_SAVE_JIT=1: FlashInfer's JIT-built modules come back as $OUT/fi-aot.tar.xz (name/name.so, FlashInfer's
# AOT layout); carried as .sgl/fi-aot.tar.xz, sglang_env.sh unpacks them into FlashInfer's AOT folder, so a fresh
# machine skips minutes of compiling
if [ "${GPU_CHECK_SAVE_JIT:-0}" = 1 ]; then  # the carried modules and the ones built here, together
  S=$(mktemp -d); cp -r /tmp/site/flashinfer/data/aot/. "$S/" 2>/dev/null
  for so in /tmp/fi/.cache/flashinfer/*/*/cached_ops/*/*.so; do
    [ -f "$so" ] && { d=$(basename "$(dirname "$so")"); mkdir -p "$S/$d" && cp "$so" "$S/$d/"; }
  done
  (cd "$S" && ls */*.so >/dev/null 2>&1 && tar -cf - . | xz -T0 -6 > "$OUT/fi-aot.tar.xz" && ls */*.so)
fi
echo "total $(( $(date +%s) - t0 ))s" | tee -a "$OUT/summary.txt"
for f in "$WORK"/*/*.md; do [ -f "$f" ] && { echo "== $f"; tail -40 "$f"; }; done
