#!/usr/bin/env bash
# The CPU test copy of SGLang 0.5.23 (patches/0.5.23/cpu/README.md says what and why): a copy of the test install
# with the patches of patches/0.5.23/cpu applied, the sgl_kernel stand-in, and the torchvision stand-in that a
# sitecustomize loads in every process started with the copy on PYTHONPATH (SGLang's spawned scheduler included).
# The test install itself stays unpatched (the plugin tests run against the real package).
# usage: bash scripts/build_cpu_sglang.sh [SRC=.deps/sgl-0.5.23] [DST=.deps/sgl-0.5.23-cpu]
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-.deps/sgl-0.5.23}; DST=${2:-.deps/sgl-0.5.23-cpu}; P=patches/0.5.23/cpu
[ -d "$SRC/sglang" ] || { echo "build_cpu_sglang: no SGLang in $SRC (make sglang-deps installs it)" >&2; exit 1; }
rm -rf "$DST.tmp"
cp -a "$SRC" "$DST.tmp"
for diff in "$P"/*.diff; do
  patch -s -p2 -F0 --no-backup-if-mismatch -d "$DST.tmp" -i "$PWD/$diff"
done
cp -r "$P/sgl_kernel" "$DST.tmp/sgl_kernel"
cp tests/sglang/torchvision_stub.py "$DST.tmp/torchvision_stub.py"
printf 'import torchvision_stub\n\ntorchvision_stub.install(hide_from_transformers=True)\n' > "$DST.tmp/sitecustomize.py"
rm -rf "$DST"
mv "$DST.tmp" "$DST"
