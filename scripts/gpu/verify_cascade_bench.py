"""Verify attention a layer, the FlashInfer cascade against our whole-prefix kernel and DFLASH's verify.

`python3 scripts/gpu/verify_cascade_bench.py --out DIR [--prefix 1024,8192,32768] [--batch 1,4,16]
[--width 16,32,64]` writes verify_cascade.json / .md. Qwen3-8B attention (32 query heads, 8 KV heads, head dim
128, bf16), each request's prefix on shuffled token slots (a long-running server's cache), DDTree trees:
- `tree`: what is served today (tree_attention, prefix `tree`): native.attend_ragged over prefix and tree
  in one kernel, the served split count (native.ragged_splits);
- `cascade`: prefix `flashinfer` — FlashInfer's paged prefill over the prefix (flashinfer_graphs.FlashInferPrefix),
  our kernel over the tree alone, the LSE merge; its three parts are timed alone too (`fi_prefix`, `tail`,
  `merge`), to see whether fusing the merge into the tail is worth it;
- `dflash16`: FlashInfer's causal paged prefill of a 16-token chain over prefix + chain (what DFLASH's verify
  runs on --attention-backend flashinfer), per batch and prefix;
- once per round, not per layer: `fi_metadata` (gather the slot lists + write the schedule) and
  `tree_metadata` (gather only), host-side wall time of the calls.
Each layer path is captured in a CUDA graph of 10 back-to-back calls and replayed (warmed up; CUDA events;
median of the replays, divided by 10): no host gaps, as in the served graphs. Floor: the prefix's K/V bytes
(B·N·Hkv·D·2·2) at 4.8 TB/s (H200 HBM3e).
"""
from __future__ import annotations

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import torch  # noqa: E402

from sglang_ddtree import _cli, ops  # noqa: E402
from sglang_ddtree.attention import flashinfer_graphs, native, prefixes  # noqa: E402
from sglang_ddtree.bench.common import capture_graph, md_table, metadata, write_outputs  # noqa: E402

HQ, HKV, D = 32, 8, 128
HBM_TBPS = 4.8
CALLS = 10  # calls a graph


def _time_graph(fn, budget_s: float = 0.3, min_reps: int = 10, max_reps: int = 100) -> float:
    """Median µs a call: `CALLS` calls of fn in one graph, replayed after warm-up, CUDA events."""
    graph = capture_graph(fn, CALLS)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    samples, start = [], time.perf_counter()
    while len(samples) < max_reps and (len(samples) < min_reps or time.perf_counter() - start < budget_s):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) * 1e3 / CALLS)
    del graph
    return statistics.median(samples)


def _time_host(fn, reps: int = 50) -> float:
    """Median µs of host wall time of fn (launches only: the GPU is not waited for)."""
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def _trees(B: int, n: int, seed: int) -> torch.Tensor:
    from sglang_ddtree.tree import build_tree

    g = torch.Generator().manual_seed(seed)
    return build_tree(torch.randn(B, 16, 256, generator=g) * 3, n - 1, backend="reference").mask_bits.cuda()


def floor_us(B: int, N: int) -> float:
    return B * N * HKV * D * 2 * 2 / (HBM_TBPS * 1e12) * 1e6


def _dflash(B: int, N: int, kc, vc, slots, g) -> float:
    """FlashInfer's causal verify of a 16-token chain a request over its prefix + chain (graph-mode wrapper,
    planned once from the exact lengths on the host: a benchmark may)."""
    chain, dev = 16, "cuda"
    kv_len = N + chain
    qo = torch.arange(0, (B + 1) * chain, chain, dtype=torch.int32)
    kv = torch.arange(0, (B + 1) * kv_len, kv_len, dtype=torch.int32)
    indices = slots[: B * kv_len].to(torch.int32)
    ws = torch.empty(flashinfer_graphs.fa2_graph_plan(B, chain, HQ, HKV, D, torch.cuda.get_device_properties(0)
                                              .multi_processor_count)["float_bytes"] + (64 << 20),
                     dtype=torch.uint8, device=dev)
    w = flashinfer_graphs._fi_wrapper_class()(
        ws, "NHD", use_cuda_graph=True, backend="fa2", qo_indptr_buf=qo.to(dev), paged_kv_indptr_buf=kv.to(dev),
        paged_kv_indices_buf=indices.clone(), paged_kv_last_page_len_buf=torch.ones(B, dtype=torch.int32, device=dev))
    w.plan(qo, kv, indices, torch.ones(B, dtype=torch.int32), HQ, HKV, D, 1, head_dim_vo=D, causal=True,
           sm_scale=D ** -0.5, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    q = torch.randn(B * chain, HQ, D, device=dev, dtype=torch.bfloat16, generator=g)
    return _time_graph(lambda: w.run(q, (kc, vc)))


def sweep(Ns, Bs, widths, log=print) -> list[dict]:
    rows, dev = [], "cuda"
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    scale = D ** -0.5
    for N in Ns:
        for B in Bs:
            g = torch.Generator(device=dev).manual_seed(N + B)
            ctx = N + max(widths) + 16
            total = B * ctx + 64
            kc = torch.randn(total, HKV, D, device=dev, dtype=torch.bfloat16, generator=g)
            vc = torch.randn(total, HKV, D, device=dev, dtype=torch.bfloat16, generator=g)
            slots = torch.randperm(total, device=dev, generator=g).to(torch.int32)
            r2t = slots[: B * ctx].view(B, ctx).contiguous()
            req, lens = torch.arange(B, device=dev), torch.full((B,), N, dtype=torch.int64, device=dev)
            fl = floor_us(B, N)
            base = {"B": B, "N": N, "floor_us": fl}
            us = _dflash(B, N, kc, vc, slots, g)
            rows.append({**base, "n": 16, "path": "dflash16", "us": us, "x_floor": us / fl})
            log(f"B={B} N={N}: dflash16 {us:.1f} us (floor {fl:.1f})")
            for n in widths:
                q = torch.randn(B * n, HQ, D, device=dev, dtype=torch.bfloat16, generator=g)
                kt = torch.randn(B * n, HKV, D, device=dev, dtype=torch.bfloat16, generator=g)
                vt = torch.randn(B * n, HKV, D, device=dev, dtype=torch.bfloat16, generator=g)
                mask = _trees(B, n, seed=N + B + n)
                indptr = torch.zeros(B + 1, dtype=torch.int32, device=dev)
                indices = torch.zeros(B * ctx, dtype=torch.int32, device=dev)
                gather = lambda: ops.op("gather_prefix_slots")(r2t, req, lens, indptr, indices)  # noqa: E731
                gather()
                splits = native.ragged_splits(B, n, HQ // HKV, HKV, sms)
                fi = flashinfer_graphs.FlashInferPrefix(dev, q_heads=HQ, kv_heads=HKV, head_dim=D, dtype=torch.bfloat16,
                                                context=ctx, max_bs=B, widths=(n,), sms=sms)
                prep = lambda: fi.prepare(n, B, r2t, req, lens)  # noqa: E731
                prep()
                no_prefix = torch.zeros(B + 1, dtype=torch.int32, device=dev)
                o_p, lse_p = fi.run(n, B, q, kc, vc, scale)
                o_t, lse_t = native.attend_ragged(q, None, kc, vc, no_prefix, indices, kt, vt, mask, scale, 1)

                def cascade():
                    a, la = fi.run(n, B, q, kc, vc, scale)
                    b, lb = native.attend_ragged(q, None, kc, vc, no_prefix, indices, kt, vt, mask, scale, 1)
                    return native.merge(a, la, "2", b, lb, "e", q.dtype)

                paths = {
                    "tree": lambda: native.attend_ragged(q, None, kc, vc, indptr, indices, kt, vt, mask, scale, splits),
                    "cascade": cascade,
                    "fi_prefix": lambda: fi.run(n, B, q, kc, vc, scale),
                    "tail": lambda: native.attend_ragged(q, None, kc, vc, no_prefix, indices, kt, vt, mask, scale, 1),
                    "merge": lambda: native.merge(o_p, lse_p, "2", o_t, lse_t, "e", q.dtype),
                }
                for name, fn in paths.items():
                    us = _time_graph(fn)
                    rows.append({**base, "n": n, "path": name, "us": us, "x_floor": us / fl})
                for name, fn in (("fi_metadata", prep), ("tree_metadata", gather)):
                    rows.append({**base, "n": n, "path": name, "host_us": _time_host(fn)})
                by = {r["path"]: r for r in rows if r["B"] == B and r["N"] == N and r["n"] == n and "us" in r}
                log(f"B={B} N={N} n={n}: tree {by['tree']['us']:.1f} us, cascade {by['cascade']['us']:.1f} us "
                    f"(prefix {by['fi_prefix']['us']:.1f} + tail {by['tail']['us']:.1f} + merge "
                    f"{by['merge']['us']:.1f}), floor {fl:.1f} us")
            torch.cuda.empty_cache()
    return rows


def summary(rows) -> list[dict]:
    """Per (B, N, n): tree and cascade µs, DFLASH's 16-token verify at (B, N), cascade / tree."""
    out = []
    for key in sorted({(r["B"], r["N"], r["n"]) for r in rows if r["path"] == "cascade"}):
        B, N, n = key
        get = lambda p, n_=n: next(r for r in rows if (r["B"], r["N"], r["n"], r["path"]) == (B, N, n_, p))  # noqa: E731
        tree, cas, dfl = get("tree")["us"], get("cascade")["us"], get("dflash16", 16)["us"]
        out.append({"B": B, "N": N, "n": n, "tree_us": tree, "cascade_us": cas, "dflash16_us": dfl,
                    "floor_us": get("tree")["floor_us"], "cascade_over_tree": cas / tree,
                    "cascade_over_dflash16": cas / dfl, "fi_metadata_host_us": get("fi_metadata")["host_us"]})
    return out


def to_markdown(res) -> str:
    head = ["B", "N", "n", "tree µs", "cascade µs", "DFLASH 16 µs", "floor µs", "cascade / tree",
            "cascade / DFLASH", "FI metadata host µs"]
    body = [[s["B"], s["N"], s["n"], s["tree_us"], s["cascade_us"], s["dflash16_us"], s["floor_us"],
             s["cascade_over_tree"], s["cascade_over_dflash16"], s["fi_metadata_host_us"]] for s in res["summary"]]
    return (f"# Verify attention a layer: FlashInfer cascade vs whole-prefix kernel ({res['meta'].get('gpu', '')})\n\n"
            f"Qwen3-8B attention ({HQ}/{HKV} heads, D {D}, bf16), shuffled slots, CUDA-graph replay of {CALLS} calls; "
            f"floor = prefix K/V bytes at {HBM_TBPS} TB/s\n\n" + md_table(head, body) + "\n")


def main(argv=None):
    ap = _cli.Parser(prog="python3 scripts/gpu/verify_cascade_bench.py", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=_cli.output_dir, default=os.environ.get("STEP_OUT", "bench_out"),
                    help="output folder (default $STEP_OUT, else bench_out)")
    ap.add_argument("--prefix", type=_cli.positive_int_list, default=[1024, 8192, 32768], help="prefix lengths")
    ap.add_argument("--batch", type=_cli.positive_int_list, default=[1, 4, 16], help="batch sizes")
    ap.add_argument("--width", type=_cli.positive_int_list, default=[16, 32, 64], help="verify widths (budget + 1)")
    ap.add_argument("--commit", default=None, help="commit id to record (the device copy has no .git)")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.stderr.write(f"{ap.prog}: error: needs a CUDA device (none visible)\n")
        return 2
    if not prefixes.installed("flashinfer"):
        sys.stderr.write(f"{ap.prog}: error: flashinfer is not importable\n")
        return 2
    ops.ensure_backend("cuda")
    meta = metadata(torch.device("cuda"))
    meta["commit"] = a.commit or meta["commit"]
    rows = sweep(a.prefix, a.batch, a.width)
    res = {"meta": meta, "hbm_TBps": HBM_TBPS, "calls_per_graph": CALLS, "rows": rows, "summary": summary(rows)}
    write_outputs(a.out, "verify_cascade", res, to_markdown(res))
    print(to_markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
