"""The one-block schedules of two CUDA kernels run on host threads against their CPU ops: fa2_schedule_block and
mla_schedule_block (the bodies of kernels/fa2_schedule.cu's and kernels/mla_schedule.cu's kernels) on 256
std::threads with a std::barrier for __syncthreads (tests/core/block_schedule_harness.cpp), so that their parallel
structure — each thread's run of requests, the reductions and scans across threads, the strided tails — is checked
on a machine without a GPU. The real kernels on the GPU: tests/attention/test_flashinfer_prefix_gpu.py,
tests/attention/test_flashinfer_mla_prefix_gpu.py."""
import pathlib
import shutil
import subprocess

import pytest
import torch

from sglang_ddtree import _build, ops

HARNESS = pathlib.Path(__file__).with_name("block_schedule_harness.cpp")


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """The harness, compiled once for the module."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not installed")
    exe = tmp_path_factory.mktemp("harness") / "harness"
    proc = subprocess.run([gxx, "-std=c++20", "-O1", "-pthread", f"-I{_build.kernels_dir()}", str(HARNESS), "-o",
                           str(exe)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exe


def _run(exe, lines):
    proc = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert len(out) == len(lines)
    return [[int(x) for x in line.split()] for line in out]


def _rnd(g):
    return lambda hi: int(torch.randint(0, hi, (1,), generator=g))


def _fa2_cases(seed=1, count=120):
    rnd = _rnd(torch.Generator().manual_seed(seed))
    for i in range(count):
        bs, n, tiles = 1 + rnd(700 if i % 3 == 0 else 40), 1 + rnd(64), 1 + rnd(4)
        kmax, min_chunk = 1 + rnd(8), (128, 1, 64)[rnd(3)]
        kinds = (lambda: 0, lambda: rnd(200), lambda: 128 * (1 + rnd(8)), lambda: rnd(40000))
        yield bs, n, tiles, kmax, min_chunk, [kinds[rnd(4)]() for _ in range(bs)]


def _fa2_cpu_op(bs, n, tiles, kmax, min_chunk, lens):
    valid = torch.zeros(bs * tiles * kmax, dtype=torch.bool)
    o, merge, chunk = (torch.full((size,), -7, dtype=torch.int32) for size in (bs + 1, bs * n + 1, 1))
    ops.op("fa2_schedule")(torch.tensor(lens), n, tiles, kmax, min_chunk, valid, o, merge, chunk)
    return chunk.tolist() + o.tolist() + merge.tolist() + valid.int().tolist()


def test_fa2_schedule_block_on_host_threads_is_the_cpu_op(harness):
    """120 random batches (up to 700 requests, so a thread owns a run of several; widths 1–64; 1–4 query tiles and
    1–8 chunks a request; key-less, short, chunk-multiple and long prefixes): every array the same."""
    ops.ensure_backend("cpu")
    cases = list(_fa2_cases())
    got = _run(harness, ["fa2 " + " ".join(map(str, (*case[:5], *case[5]))) for case in cases])
    for case, line in zip(cases, got):
        assert line == _fa2_cpu_op(*case), case[:5]


def _mla_cases(seed=0, count=120):
    rnd = _rnd(torch.Generator().manual_seed(seed))
    for i in range(count):
        bs = 1 + rnd(700 if i % 3 == 0 else 40)
        n, heads, sms = 1 + rnd(32), (16, 128)[rnd(2)], (132, 8, 7)[rnd(3)]
        cluster = 2 if n * heads > 64 else 1
        kinds = (lambda: 0, lambda: rnd(40), lambda: 256 * (1 + rnd(4)), lambda: rnd(40000))
        lens = [kinds[rnd(4)]() for _ in range(bs)]
        yield bs, n, heads, cluster, sms // cluster, sms, lens


def _mla_cpu_op(bs, n, heads, cluster, clusters, merge_slots, lens):
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


def test_mla_schedule_block_on_host_threads_is_the_cpu_op(harness):
    """120 random batches (up to 700 requests, so a thread owns a run of several; widths 1–32; 16 and 128 heads;
    132, 8 and 7 SMs; key-less, short, chunk-limit-multiple and long prefixes): every array the same."""
    ops.ensure_backend("cpu")
    cases = list(_mla_cases())
    got = _run(harness, ["mla " + " ".join(map(str, (*case[:6], *case[6]))) for case in cases])
    for case, line in zip(cases, got):
        assert line == _mla_cpu_op(*case), case[:6]
