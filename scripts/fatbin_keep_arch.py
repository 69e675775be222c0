"""Zero the device code a GPU never loads, so that a CUDA library compresses to a fraction of its size.

usage: python scripts/fatbin_keep_arch.py LIB.so OUT.so [--arch 90] [--keep-kernels REGEX]

The library's .nv_fatbin section holds, per translation unit, one fatbin (magic 0xBA55ED50) whose entries each
carry a header (kind, header size, payload size, ..., the SM architecture) and a cubin payload (an ELF, or a
zstd-compressed one). The CUDA driver loads on a device only an entry built for that device's architecture, so
on an H200 (sm_90) the sm_80 / sm_86 cubins of sgl_kernel's FA3 library are never read: their payloads are zeroed,
headers, sizes and every offset unchanged. With --keep-kernels, a cubin of the kept architecture is zeroed too
when it has kernels and none of their demangled names matches REGEX: with lazy module loading (CUDA's default,
and what torch sets) a cubin is loaded when one of its kernels is first launched, so the kernels a server calls
must all be in kept cubins (the GPU tests of the FA3 prefix check that on the device). Kept cubins stay byte
for byte (checked).
"""
import argparse
import re
import struct
import subprocess
import sys
import tempfile

MAGIC = 0xBA55ED50
ZSTD = b"\x28\xb5\x2f\xfd"


def section(path: str, name: str = ".nv_fatbin") -> tuple:
    out = subprocess.run(["readelf", "-S", "-W", path], capture_output=True, text=True, check=True).stdout
    m = re.search(re.escape(name) + r"\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", out)
    if m is None:
        sys.exit(f"{path}: no {name} section")
    return int(m.group(1), 16), int(m.group(2), 16)


def entries(data, off: int, size: int):
    """(payload offset, payload size, architecture) of every entry of every fatbin in the section."""
    pos, end = off, off + size
    while pos + 16 <= end:
        magic, _, hsz, fsz = struct.unpack_from("<IHHQ", data, pos)
        if magic != MAGIC:  # alignment padding between fatbins
            pos += 8
            continue
        e, stop = pos + hsz, pos + hsz + fsz
        while e < stop:
            _, _, ehsz, psz = struct.unpack_from("<HHIQ", data, e)
            arch, = struct.unpack_from("<I", data, e + 28)
            yield e + ehsz, psz, arch
            e += ehsz + psz
        pos = stop


def kernels(payload: bytes) -> list:
    """The demangled names of a cubin's functions (zstd-compressed cubins decompressed first)."""
    if payload[:4] == ZSTD:
        import zstandard  # only libraries nvcc compressed need it (pip install zstandard)

        payload = zstandard.ZstdDecompressor().decompress(payload, max_output_size=1 << 30)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(payload)
        f.flush()
        syms = subprocess.run(["readelf", "-sW", f.name], capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in syms.splitlines() if " FUNC " in line]
    return subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                          check=True).stdout.splitlines() if names else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lib")
    ap.add_argument("out")
    ap.add_argument("--arch", type=int, default=90, help="the SM architecture whose entries are kept (90)")
    ap.add_argument("--keep-kernels", default=None, metavar="REGEX",
                    help="keep only the kept architecture's cubins with a kernel matching REGEX (and kernel-less ones)")
    a = ap.parse_args()
    keep = re.compile(a.keep_kernels) if a.keep_kernels else None
    original = open(a.lib, "rb").read()
    data = bytearray(original)
    off, size = section(a.lib)
    kept = zeroed = 0
    for start, n, arch in list(entries(original, off, size)):
        if arch == a.arch:
            names = kernels(original[start:start + n]) if keep is not None else []
            if not names or keep is None or any(keep.search(k) for k in names):
                kept += n
                continue
        data[start:start + n] = bytes(n)
        zeroed += n
    if kept == 0:
        sys.exit(f"{a.lib}: no sm_{a.arch} entry kept: refusing to write a library with no code for the device")
    for start, n, arch in entries(original, off, size):
        if data[start:start + n] not in (original[start:start + n], bytes(n)):
            sys.exit("an entry was changed other than zeroed")
    open(a.out, "wb").write(data)
    print(f"kept sm_{a.arch}: {kept / 1e6:.1f} MB; zeroed: {zeroed / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
