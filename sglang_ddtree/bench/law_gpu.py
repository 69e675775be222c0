"""The sampled round's law kernels on the GPU (the ops law_rows and drawn_targets, kernels/law_rows.cu and
kernels/tree_rejection.cu) timed against their floors: the passes they make over the rows, read at the bandwidth
of a device copy of the same bytes measured in the same run.

law_rows: R rows of random logits (normal, scaled by --logit-scale) of V tokens in one dtype, one law a row:
unfiltered (temperature 0.6 only: two passes, the argmax and the normaliser) or filtered (T 0.6, top-p 0.95: three,
the descent's gather the third). drawn_targets: B requests whose trees are their roots alone, so each request's
walk draws its bonus at once, one pass over its root's row (one block a request). A case's time is the median
over CUDA-graph replays (each replay `--inner` back-to-back calls, after warm-up) by CUDA events; its floor is the
passes x rows x V x the dtype's bytes at the copy's bandwidth (read + write over its time). Each case also records
a hash of the op's outputs on its seeded inputs, so two runs (this checkout and an older copy) show whether the
kernels agree bit for bit.

The prediction this bench checks (the kernel that splits each row over a thread-block cluster): one block a row
reading 4-byte words, one load in flight a warp, takes about as long for a pass over a row whatever the row count
(latency-bound, far above its floor). 16-byte loads, four in flight a thread, and each row split over up to 8 CTAs
of a cluster for every pass over it (partial histograms summed through distributed shared memory) should bring it
to about 3x its floor: ~0.1 ms at 64 rows and ~0.2 ms at 128 (float32, V 151,936, three passes), the same bits out;
drawn_targets' bonus pass, the same 16-byte loads on one block, ~20 us.

  python -m sglang_ddtree.bench law_gpu --out law_gpu.json
  PYTHONPATH=.before python sglang_ddtree/bench/law_gpu.py --out before.json   # the older copy's kernel

scripts/mk_before.sh REV makes .before/; run as a file, this module imports only sglang_ddtree's ops, _cli and bench.common
(its capture_graph, time_fn and warm_up: a copy from this bench's commit on has them), so the copy on PYTHONPATH is
the one timed.
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # run as a file: its folder is no import root (bench/trace.py would shadow the stdlib's)
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import datetime  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from sglang_ddtree import _cli  # noqa: E402
from sglang_ddtree.bench import common  # noqa: E402

V_QWEN = 151936
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
LAWS = {  # name: (temperature, top_k, top_p, min_p), passes over the row
    "unfiltered": ((0.6, 0, 1.0, 0.0), 2),
    "filtered": ((0.6, 0, 0.95, 0.0), 3),
}


def graph_us(fn, inner: int, replays: int) -> tuple[float, float]:
    """(median, min) µs a call: `inner` calls of fn captured in one CUDA graph, replayed `replays` times after
    warm-up, each replay timed by CUDA events."""
    graph = common.capture_graph(fn, inner)
    r = common.time_fn(graph.replay, device=torch.device("cuda"), repeats=replays, warmup=3, max_seconds=float("inf"))
    del graph
    return r["median_s"] * 1e6 / inner, r["min_s"] * 1e6 / inner


def hbm_bandwidth() -> float:
    """Bytes/s of a 1 GiB device copy (read + write), timed eagerly: large enough that L2 holds none of it."""
    src = torch.randn(2 ** 28, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / common.time_fn(lambda: dst.copy_(src), device=src.device, repeats=10)["median_s"]


def metadata() -> dict:
    import sglang_ddtree

    pkg = Path(sglang_ddtree.__file__).resolve().parent
    revision = pkg.parent / "REVISION"  # scripts/mk_before.sh's record of the older copy's commit
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=pkg).stdout.strip() or None
    except OSError:
        commit = None
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "package": str(pkg), "package_revision": revision.read_text().strip() if revision.is_file() else commit,
            "torch": torch.__version__, "python": platform.python_version(), "gpu": torch.cuda.get_device_name()}


def outputs_hash(outs) -> str:
    h = hashlib.sha256()
    for t in outs:
        h.update(t.contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def bench_case(op, dtype_name: str, R: int, V: int, law: str, scale: float, inner: int, replays: int,
               seed: int) -> dict:
    dtype = DTYPES[dtype_name]
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(R, V, generator=g, device="cuda") * scale).to(dtype)
    (t, k, p, m), passes = LAWS[law]
    full = lambda v, dt: torch.full((R,), v, dtype=dt, device="cuda")  # noqa: E731  (one request a row: n = 1)
    args = (full(t, torch.float32), full(k, torch.int64), full(p, torch.float32), full(m, torch.float32))
    digest = outputs_hash(op(x, 1, *args))
    us, us_min = graph_us(lambda: op(x, 1, *args), inner, replays)
    dst = torch.empty_like(x)
    copy_us, _ = graph_us(lambda: torch.neg(x, out=dst), inner, replays)  # a kernel copy (a graph's memcpy is DMA)
    nbytes = R * V * x.element_size()
    copy_bw = 2 * nbytes / (copy_us * 1e-6)
    floor_us = passes * nbytes / copy_bw * 1e6
    return {"op": "law_rows", "dtype": dtype_name, "R": R, "V": V, "law": law, "passes": passes,
            "bytes_read": passes * nbytes,
            "us": us, "us_min": us_min, "copy_us": copy_us, "copy_TBps": copy_bw / 1e12, "floor_us": floor_us,
            "ratio": us / floor_us, "outputs_sha256": digest}


def bench_drawn(law_op, op, dtype_name: str, B: int, V: int, law: str, scale: float, inner: int, replays: int,
                seed: int) -> dict:
    """drawn_targets on B requests of n = 8 nodes whose trees hold only their roots (num_nodes 1): each request's
    walk draws its bonus at the root, one pass over one row, its K = 16 candidates at their residual values."""
    n, L, K = 8, 1, 16
    dtype = DTYPES[dtype_name]
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(B * n, V, generator=g, device="cuda") * scale).to(dtype)
    (t, k, p, m), _ = LAWS[law]
    full = lambda v, dt, *shape: torch.full(shape or (B,), v, dtype=dt, device="cuda")  # noqa: E731
    temps = full(t, torch.float32)
    greedy, lse, boundary = law_op(x, n, temps, full(k, torch.int64), full(p, torch.float32), full(m, torch.float32))
    tree = (full(0, torch.int64, B, n), full(-1, torch.int32, B, n), full(1, torch.int32), full(0, torch.int32, B, n),
            full(-1, torch.int64, B, n), full(-1, torch.int64, B, n))
    cand = torch.randint(0, V, (B, L, K), generator=g, device="cuda")
    q = full(1.0 / K, torch.float32, B, L, K)
    rest = (cand, q, full(True, torch.bool), torch.arange(B, device="cuda") + seed, full(3, torch.int64))
    call = lambda: op(x, temps, greedy, lse, boundary, *tree, *rest)  # noqa: E731
    digest = outputs_hash([call()])
    us, us_min = graph_us(call, inner, replays)
    row0 = x.view(B, n, V)[:, 0]  # the rows the bonus passes read
    src = row0.contiguous()
    dst = torch.empty_like(src)
    copy_us, _ = graph_us(lambda: torch.neg(src, out=dst), inner, replays)
    nbytes = B * V * x.element_size()
    copy_bw = 2 * nbytes / (copy_us * 1e-6)
    floor_us = nbytes / copy_bw * 1e6
    return {"op": "drawn_targets", "dtype": dtype_name, "B": B, "V": V, "law": law, "passes": 1, "bytes_read": nbytes,
            "us": us, "us_min": us_min, "copy_us": copy_us, "copy_TBps": copy_bw / 1e12, "floor_us": floor_us,
            "ratio": us / floor_us, "outputs_sha256": digest}


def main(argv=None) -> int:
    ap = _cli.Parser(prog=_cli.prog("bench", "law_gpu"), description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--out", type=_cli.output_file, default=None, help="JSON file for the results")
    ap.add_argument("--rows", type=_cli.positive_int_list, default=[16, 64, 128, 256],
                    help="row counts R (requests x nodes), comma-separated")
    ap.add_argument("--requests", type=_cli.positive_int_list, default=[1, 8, 32],
                    help="request counts B of the drawn_targets cases, comma-separated")
    ap.add_argument("--vocab", type=_cli.positive_int, default=V_QWEN, help="tokens a row (default: Qwen's)")
    ap.add_argument("--dtypes", type=_cli.choice_list(*DTYPES), default=["bf16"], help="logit dtypes, comma-separated")
    ap.add_argument("--laws", type=_cli.choice_list(*LAWS), default=list(LAWS), help="laws, comma-separated")
    ap.add_argument("--logit-scale", type=_cli.nonnegative_float, default=3.0,
                    help="the logits' standard deviation (larger: more tokens without mass)")
    ap.add_argument("--inner", type=_cli.positive_int, default=20, help="calls captured in one graph")
    ap.add_argument("--replays", type=_cli.int_at_most(100000, "a bound on the run's length"), default=50,
                    help="graph replays timed (the median is reported; at least 20 advised)")
    ap.add_argument("--seed", type=int, default=0, help="the logits' generator seed")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.stderr.write(f"{ap.prog}: error: needs a CUDA device (torch {torch.__version__} sees none)\n")
        return 2
    from sglang_ddtree import ops

    ops.ensure_backend("cuda")
    op = ops.op("law_rows")
    result = {"meta": metadata()}
    print(f"law_rows from {result['meta']['package']} ({result['meta']['package_revision']}), "
          f"{result['meta']['gpu']}")
    result["hbm_copy_TBps"] = hbm_bandwidth() / 1e12
    common.warm_up()
    cases = []
    print(f"{'op':>13} {'dtype':>5} {'rows':>4} {'law':>10} {'us':>8} {'floor us':>8} {'x floor':>7} "
          f"{'copy TB/s':>9}  outputs")

    def record(c: dict) -> None:
        c["floor_hbm_us"] = c["bytes_read"] / (result["hbm_copy_TBps"] * 1e12) * 1e6
        c["ratio_hbm"] = c["us"] / c["floor_hbm_us"]
        cases.append(c)
        print(f"{c['op']:>13} {c['dtype']:>5} {c.get('R', c.get('B')):>4} {c['law']:>10} {c['us']:8.1f} "
              f"{c['floor_us']:8.1f} {c['ratio']:7.2f} {c['copy_TBps']:9.2f}  {c['outputs_sha256']}", flush=True)

    for dtype_name in args.dtypes:
        for law in args.laws:
            for R in args.rows:
                record(bench_case(op, dtype_name, R, args.vocab, law, args.logit_scale, args.inner, args.replays,
                                  args.seed))
            for B in args.requests:
                record(bench_drawn(op, ops.op("drawn_targets"), dtype_name, B, args.vocab, law, args.logit_scale,
                                   args.inner, args.replays, args.seed))
    result["cases"] = cases
    print(f"1 GiB copy {result['hbm_copy_TBps']:.2f} TB/s")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
