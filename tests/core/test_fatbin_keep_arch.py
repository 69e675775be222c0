"""scripts/fatbin_keep_arch.py on a library nvcc builds here for two architectures: the fatbin layout it reads
(entry headers, the architecture field, payload sizes) is nvcc's, the other architecture's code is zeroed, the
kept architecture's is byte for byte the original, and the library keeps its size and sections."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cuda_sources_compile import _nvcc  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fatbin_keep_arch.py"
spec = importlib.util.spec_from_file_location("fatbin_keep_arch", SCRIPT)
FK = importlib.util.module_from_spec(spec)
spec.loader.exec_module(FK)


def test_other_architectures_are_zeroed_and_the_kept_one_is_untouched(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("__global__ void add_one(float* x) { x[threadIdx.x] += 1.0f; }\n"
                   "extern \"C\" void launch(float* x) { add_one<<<1, 32>>>(x); }\n")
    lib, out = tmp_path / "libk.so", tmp_path / "libk.sm90.so"
    subprocess.run([_nvcc(), "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80",
                    "-gencode", "arch=compute_90a,code=sm_90a", "-o", str(lib), str(src)], check=True)
    data = lib.read_bytes()
    off, size = FK.section(str(lib))
    found = list(FK.entries(data, off, size))
    archs = [arch for _, _, arch in found]  # a fatbin per translation unit (nvcc adds its own), each both archs
    assert set(archs) == {80, 90} and archs.count(80) == archs.count(90) >= 1
    assert all(data[start:start + 4] == b"\x7fELF" for start, _, _ in found)  # payloads: the cubins themselves
    subprocess.run([sys.executable, str(SCRIPT), str(lib), str(out), "--arch", "90"], check=True)
    new = out.read_bytes()
    assert len(new) == len(data)
    for start, n, arch in found:
        assert new[start:start + n] == (data[start:start + n] if arch == 90 else bytes(n)), arch
    changed = [i for i in range(len(data)) if data[i] != new[i]] if len(data) < 4_000_000 else []
    sm80 = [(start, n) for start, n, arch in found if arch == 80]
    assert changed and all(any(a <= i < a + n for a, n in sm80) for i in changed)  # nothing outside those payloads
    assert subprocess.run(["readelf", "-S", str(out)], capture_output=True).returncode == 0
    with pytest.raises(SystemExit, match="no sm_75 entry kept"):
        sys.argv = ["x", str(lib), str(tmp_path / "none.so"), "--arch", "75"]
        FK.main()


def test_keep_kernels_zeroes_the_kept_architectures_cubins_without_a_wanted_kernel(tmp_path):
    """--keep-kernels: of the sm_90a cubins, the translation unit whose kernels match stays byte for byte, the
    other one's is zeroed (as are all sm_80 ones)."""
    a, b = tmp_path / "a.cu", tmp_path / "b.cu"
    a.write_text("template <int D> __global__ void wanted_kernel(float* x) { x[threadIdx.x] += D; }\n"
                 "template __global__ void wanted_kernel<128>(float*);\n")
    b.write_text("__global__ void other_kernel(float* x) { x[threadIdx.x] *= 2.0f; }\n")
    lib, out = tmp_path / "libab.so", tmp_path / "libab.keep.so"
    subprocess.run([_nvcc(), "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80",
                    "-gencode", "arch=compute_90a,code=sm_90a", "-o", str(lib), str(a), str(b)], check=True)
    data = lib.read_bytes()
    off, size = FK.section(str(lib))
    found = list(FK.entries(data, off, size))
    names = {start: FK.kernels(data[start:start + n]) for start, n, arch in found if arch == 90}
    assert any("wanted_kernel<128>" in " ".join(k) for k in names.values())
    assert any("other_kernel" in " ".join(k) for k in names.values())
    subprocess.run([sys.executable, str(SCRIPT), str(lib), str(out), "--keep-kernels", r"wanted_kernel<128>"],
                   check=True)
    new = out.read_bytes()
    for start, n, arch in found:
        kept = arch == 90 and (not names[start] or any("wanted_kernel<128>" in k for k in names[start]))
        assert new[start:start + n] == (data[start:start + n] if kept else bytes(n)), (arch, names.get(start))
