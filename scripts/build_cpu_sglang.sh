#!/usr/bin/env bash
# SGLang 0.5.23 on the CPU for the served tests and `make serve-cpu` (patches/0.5.23/cpu/README.md says what and why):
#   DST/cpu-site            what any SGLang install needs to serve on this CPU: the sgl_kernel stand-in (its CPU ops
#                           in torch) and the torchvision stand-in, loaded by a sitecustomize in every process started
#                           with the folder on PYTHONPATH (SGLang's spawned scheduler included). DDTree and the plain
#                           server run with it in front of the unpatched test install.
#   DST/cpu-site-0.5.17     the same for SGLang 0.5.17 (whose transformers must see the torchvision stand-in)
#   DST/sgl-0.5.23-dflash   a copy of the test install with patches/0.5.23/cpu/*.diff applied: what stock DFLASH, the
#                           baseline, needs on the CPU.
# The test install itself stays unpatched (the plugin tests run against the real package).
# usage: bash scripts/build_cpu_sglang.sh [SRC=.deps/sgl-0.5.23] [DST=.deps]
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-.deps/sgl-0.5.23}; DST=${2:-.deps}; P=patches/0.5.23/cpu
[ -d "$SRC/sglang" ] || { echo "build_cpu_sglang: no SGLang in $SRC (make sglang-deps installs it)" >&2; exit 1; }
SITE=$DST/cpu-site; COPY=$DST/sgl-0.5.23-dflash
# site(DIR, HIDE): the stand-ins; SGLang 0.5.23's transformers must see no torchvision, 0.5.17's must see one
site() {
  rm -rf "$1.tmp" && mkdir -p "$1.tmp"
  cp -r "$P/sgl_kernel" "$1.tmp/sgl_kernel"
  cp tests/sglang/torchvision_stub.py "$1.tmp/torchvision_stub.py"
  printf 'import torchvision_stub\n\ntorchvision_stub.install(hide_from_transformers=%s)\n' "$2" > "$1.tmp/sitecustomize.py"
}
site "$SITE" True
site "$SITE-0.5.17" False
rm -rf "$COPY.tmp"
cp -a "$SRC" "$COPY.tmp"
for diff in "$P"/*.diff; do
  patch -s -p2 -F0 --no-backup-if-mismatch -d "$COPY.tmp" -i "$PWD/$diff"
done
rm -rf "$SITE" "$SITE-0.5.17" "$COPY"
mv "$SITE.tmp" "$SITE" && mv "$SITE-0.5.17.tmp" "$SITE-0.5.17" && mv "$COPY.tmp" "$COPY"
