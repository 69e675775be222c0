"""Zero the device code a GPU of one architecture never loads, so that a CUDA library compresses to a fraction.

usage: python scripts/fatbin_keep_arch.py LIB.so OUT.so [--arch 90]

The library's .nv_fatbin section holds, per translation unit, one fatbin (magic 0xBA55ED50) whose entries each
carry a header (kind, header size, payload size, ..., the SM architecture) and a cubin or PTX payload. The CUDA
driver loads on a device only an entry built for that device's architecture, so on an H200 (sm_90) the sm_80 /
sm_86 cubins of sgl_kernel's FA3 library (538 of its 1035 MB of device code) are never read. Their payloads are
zeroed here, headers and sizes kept, every offset unchanged; entries for `--arch` are left byte for byte (checked).
"""
import argparse
import re
import struct
import subprocess
import sys

MAGIC = 0xBA55ED50


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lib")
    ap.add_argument("out")
    ap.add_argument("--arch", type=int, default=90, help="the SM architecture whose entries are kept (90)")
    a = ap.parse_args()
    data = bytearray(open(a.lib, "rb").read())
    off, size = section(a.lib)
    kept = zeroed = 0
    for start, n, arch in list(entries(data, off, size)):
        if arch == a.arch:
            kept += n
        else:
            data[start:start + n] = bytes(n)
            zeroed += n
    if kept == 0:
        sys.exit(f"{a.lib}: no sm_{a.arch} entry: refusing to write a library with no code for the device")
    original = open(a.lib, "rb").read()
    for start, n, arch in entries(original, off, size):
        if arch == a.arch and data[start:start + n] != original[start:start + n]:
            sys.exit("an entry of the kept architecture changed")
    open(a.out, "wb").write(data)
    print(f"kept sm_{a.arch}: {kept / 1e6:.1f} MB; zeroed other architectures: {zeroed / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
