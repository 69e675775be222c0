"""The one-block schedule of a CUDA kernel run on host threads against its CPU op: mla_schedule_block (the body of
kernels/mla_schedule.cu's kernel) on 256 std::threads with a std::barrier for __syncthreads
(tests/core/block_schedule_harness.cpp), so that its parallel structure — each thread's run of requests, the scan
across threads, the strided tails — is checked on a machine without a GPU. The real kernel on the GPU:
tests/attention/test_flashinfer_mla_prefix_gpu.py."""
import pathlib
import shutil
import subprocess

import pytest
import torch

from sglang_ddtree import _build, ops

HARNESS = pathlib.Path(__file__).with_name("block_schedule_harness.cpp")


def _harness(tmp_path):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not installed")
    exe = tmp_path / "harness"
    proc = subprocess.run([gxx, "-std=c++20", "-O1", "-pthread", f"-I{_build.kernels_dir()}", str(HARNESS), "-o",
                           str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exe


def _cases(seed=0, count=120):
    g = torch.Generator().manual_seed(seed)
    rnd = lambda hi: int(torch.randint(0, hi, (1,), generator=g))  # noqa: E731
    for i in range(count):
        bs = 1 + rnd(700 if i % 3 == 0 else 40)
        n, heads, sms = 1 + rnd(32), (16, 128)[rnd(2)], (132, 8, 7)[rnd(3)]
        cluster = 2 if n * heads > 64 else 1
        kinds = (lambda: 0, lambda: rnd(40), lambda: 256 * (1 + rnd(4)), lambda: rnd(40000))
        lens = [kinds[rnd(4)]() for _ in range(bs)]
        yield bs, n, heads, cluster, sms // cluster, sms, lens


def _cpu_op(bs, n, heads, cluster, clusters, merge_slots, lens):
    """The CPU op's arrays, laid out as the harness lays them out."""
    tiles = -(-n * heads // (64 * cluster))
    max_works = tiles * bs + 2 * clusters
    sizes = [max_works] * 8 + [clusters + 1] + [merge_slots] * 5
    offsets = [sum(sizes[:i]) for i in range(14)]
    ws = torch.full((sum(sizes),), -7, dtype=torch.int32)
    lens_t = torch.tensor(lens)
    ops.op("mla_schedule")(lens_t, torch.cumsum(lens_t, 0) - lens_t, n, heads, cluster, clusters, max_works,
                           merge_slots, offsets, ws)
    works = int(ws[offsets[8] + clusters])
    out = [works]
    for i in range(14):
        size = works if i < 8 else sizes[i]
        out += ws[offsets[i]: offsets[i] + size].tolist()
    return out


def test_mla_schedule_block_on_host_threads_is_the_cpu_op(tmp_path):
    """120 random batches (up to 700 requests, so a thread owns a run of several; widths 1–32; 16 and 128 heads;
    132, 8 and 7 SMs; key-less, short, chunk-limit-multiple and long prefixes): every array the same."""
    ops.ensure_backend("cpu")
    exe = _harness(tmp_path)
    cases = list(_cases())
    stdin = "\n".join(" ".join(map(str, (*case[:6], *case[6]))) for case in cases) + "\n"
    proc = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == len(cases)
    for case, line in zip(cases, lines):
        assert [int(x) for x in line.split()] == _cpu_op(*case), case[:6]
