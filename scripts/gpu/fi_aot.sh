# Sourced by gpu_check.sh and sglang_env.sh: _x unpacks a tarball; unpack_bundle unpacks the carried SGLang 0.5.17
# bundle (make gpu-bundle) into /tmp/site once per machine; install_fi_aot puts FlashInfer modules built
# elsewhere (on an earlier GPU machine: gpu_check.sh GPU_CHECK_SAVE_JIT=1; or with nvcc for sm_90a on a CPU
# machine), carried as .sgl/fi-aot.tar.xz, into the unpacked bundle's AOT folder, once per machine. A module that
# tvm-ffi cannot load here (after torch, as FlashInfer loads it) is dropped: FlashInfer would take it over its JIT
# build and fail; dropped, it is JIT-built as before.
_x() { python3 -c "import sys,tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='fully_trusted')" "$1" "$2"; }
unpack_bundle() {
  [ -f .sgl/sgl-bundle.tar.xz ] && [ ! -f /tmp/site/.done ] || return 0
  mkdir -p /tmp/site && _x .sgl/sgl-bundle.tar.xz /tmp/site && touch /tmp/site/.done
}
install_fi_aot() {
  [ -f .sgl/fi-aot.tar.xz ] && [ -d /tmp/site/flashinfer ] && [ ! -f /tmp/site/.aot ] || return 0
  mkdir -p /tmp/site/flashinfer/data/aot && _x .sgl/fi-aot.tar.xz /tmp/site/flashinfer/data/aot && touch /tmp/site/.aot
  local so
  for so in /tmp/site/flashinfer/data/aot/*/*.so; do
    PYTHONPATH=/tmp/site python3 -c "import sys, torch, tvm_ffi; tvm_ffi.load_module(sys.argv[1])" "$so" >/dev/null 2>&1 \
      || { echo "FlashInfer AOT module dropped (does not load): $so"; rm -rf "$(dirname "$so")"; }
  done
}
