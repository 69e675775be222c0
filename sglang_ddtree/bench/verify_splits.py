"""Served verify attention a layer on the GPU: `python -m sglang_ddtree bench verify_splits [--sweep splits|cascade]`.

Both sweeps: Qwen3-8B attention shape (32 query heads, 8 KV heads, D 128, bf16), page size 1, each call captured
in a CUDA graph and replayed (CUDA events, median), no host gaps, as in the served graphs.

`--sweep splits` (default): the served kernel against its prefix split count. The served tree kernel
(`native.attend_ragged`, SGLang's ragged prefix slot lists) cuts each request's prefix into `num_splits` equal
chunks, fixed when the verify graph is captured; `native.ragged_splits` picks it from the batch only (about two
waves of blocks, at most 16). On the 8B-shaped server a DDTree round grew 13.2 ms from a 1k to a 32k prefix at
batch 1 (`docs/benchmarks/sglang-h200-2026-12-03-run3.md`): 0.37 ms a layer against a KV-read floor of ~33 µs.
Prediction, written before the first run: at batch 1 and 32k the cap's 128 blocks (8 KV heads × 16) are
latency-bound at ≤ 25% of copy bandwidth, and 64–128 splits (512–1,024 blocks) bring the call within 2× of the
floor; at 1k the split count changes little (the round is weight-bound there) and more splits cost only the
empty chunks' LSE writes and a longer combine. Tree n = 16 (budget 15, a chain mask), each request's slots
contiguous (what a fresh server hands out) or shuffled across the cache (a long-running one). Floor:
(B·N·Hkv·D·2·2 bytes of KV + Q/O) / copy bandwidth measured in the same run. Writes verify_splits.{json,md}.

`--sweep cascade`: the FlashInfer cascade against our whole-prefix kernel and DFLASH's verify, DDTree trees of
each `--width`, each request's prefix on shuffled slots (a long-running server's cache):
- `tree`: the whole-prefix path (tree_attention, prefix `tree`): native.attend_ragged over prefix and tree in one
  kernel, the served split count (native.ragged_splits);
- `cascade`: prefix `flashinfer` — FlashInfer's paged prefill over the prefix (flashinfer_graphs.FlashInferPrefix),
  our kernel over the tree alone, the LSE merge; its three parts are timed alone too (`fi_prefix`, `tail`,
  `merge`), to see whether fusing the merge into the tail is worth it;
- `dflash16`: FlashInfer's causal paged prefill of a 16-token chain over prefix + chain (what DFLASH's verify
  runs on --attention-backend flashinfer), per batch and prefix;
- once per round, not per layer: `fi_metadata` (gather the slot lists + write the schedule) and `tree_metadata`
  (gather only), host-side wall time of the calls.
A graph holds 10 back-to-back calls (its median divided by 10). Floor: the prefix's K/V bytes (B·N·Hkv·D·2·2)
at 4.8 TB/s (H200 HBM3e). Writes verify_cascade.{json,md}.
"""
from __future__ import annotations

import os
import sys

import torch

from .. import _cli, ops
from ..attention import flashinfer_graphs, native, prefixes
from .attention import _time_graph, ceilings
from .common import graph_us, host_us, md_table, metadata, write_outputs

HQ, HKV, D, N_TREE = 32, 8, 128, 16
HBM_TBPS = 4.8  # the cascade sweep's floor (H200 HBM3e)
CALLS = 10  # calls a graph in the cascade sweep


def _case(B: int, N: int, shuffled: bool, seed: int = 0):
    """Inputs of one served verify call: B requests of prefix N in a cache of B·N + slack slots."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    T, dev, dt = B * N_TREE, "cuda", torch.bfloat16
    slots = B * N + 1024
    k_cache = torch.randn(slots, HKV, D, device=dev, dtype=dt, generator=g)
    v_cache = torch.randn(slots, HKV, D, device=dev, dtype=dt, generator=g)
    order = torch.randperm(slots, device=dev, generator=g) if shuffled else torch.arange(slots, device=dev)
    kv_indices = order[: B * N].to(torch.int64)
    kv_indptr = torch.arange(0, B * N + 1, N, device=dev, dtype=torch.int32)
    q = torch.randn(T, HQ, D, device=dev, dtype=dt, generator=g)
    k_tree = torch.randn(T, HKV, D, device=dev, dtype=dt, generator=g)
    v_tree = torch.randn(T, HKV, D, device=dev, dtype=dt, generator=g)
    chain = (1 << (torch.arange(N_TREE, device=dev, dtype=torch.int64) + 1)) - 1  # node i sees 0..i
    mask_bits = chain.to(torch.int32).view(1, N_TREE, 1).expand(B, N_TREE, 1).contiguous()
    return q, k_cache, v_cache, kv_indptr, kv_indices, k_tree, v_tree, mask_bits


def floor_us(B: int, N: int, TBps: float, tree_tokens: int = N_TREE) -> float:
    """µs to read the prefix's K/V (and write Q/O of `tree_tokens` a request) at `TBps`."""
    kv = B * N * HKV * D * 2 * 2
    qo = 2 * B * tree_tokens * HQ * D * 2
    return (kv + qo) / (TBps * 1e12) * 1e6


def sweep(Bs, Ns, splits, ceil, sms: int, log=print) -> list[dict]:
    rows = []
    for shuffled in (False, True):
        for B in Bs:
            for N in Ns:
                args = _case(B, N, shuffled)
                scale = D ** -0.5
                fl = floor_us(B, N, ceil["copy_TBps"])
                for s in sorted(set(splits) | {native.ragged_splits(B, N_TREE, HQ // HKV, HKV, sms)}):
                    fn = lambda s=s: native.attend_ragged(args[0], None, *args[1:], scale, s)  # noqa: E731
                    us, how = _time_graph(fn)
                    rows.append({"B": B, "N": N, "slots": "shuffled" if shuffled else "contiguous", "splits": s,
                                 "served_default": s == native.ragged_splits(B, N_TREE, HQ // HKV, HKV, sms),
                                 "us": us, "timing": how, "floor_us": fl, "pct_bw": 100 * fl / us})
                    log(f"B={B} N={N} {rows[-1]['slots']} splits={s}: {us:.1f} us ({rows[-1]['pct_bw']:.0f}% of copy bw)")
                del args
    return rows


def splits_markdown(res) -> str:
    head = ["slots", "B", "N", "splits", "served default", "µs", "floor µs", "% copy bw"]
    body = [[r["slots"], r["B"], r["N"], r["splits"], "yes" if r["served_default"] else "", f"{r['us']:.1f}",
             f"{r['floor_us']:.1f}", f"{r['pct_bw']:.0f}"] for r in res["rows"]]
    return (f"# Served verify attention vs prefix split ({res['meta'].get('gpu', '')})\n\n"
            f"copy bandwidth {res['ceilings']['copy_TBps']:.2f} TB/s; Qwen3-8B attention shape, n = {N_TREE}, "
            f"page size 1, CUDA-graph replay\n\n" + md_table(head, body) + "\n")


def _trees(B: int, n: int, seed: int) -> torch.Tensor:
    from ..tree import build_tree

    g = torch.Generator().manual_seed(seed)
    return build_tree(torch.randn(B, 16, 256, generator=g) * 3, n - 1, backend="reference").mask_bits.cuda()


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
    return graph_us(lambda: w.run(q, (kc, vc)), CALLS)


def cascade_sweep(Ns, Bs, widths, sms: int, log=print) -> list[dict]:
    rows, dev = [], "cuda"
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
            fl = floor_us(B, N, HBM_TBPS, tree_tokens=0)
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
                    us = graph_us(fn, CALLS)
                    rows.append({**base, "n": n, "path": name, "us": us, "x_floor": us / fl})
                for name, fn in (("fi_metadata", prep), ("tree_metadata", gather)):
                    rows.append({**base, "n": n, "path": name, "host_us": host_us(fn)})
                by = {r["path"]: r for r in rows if r["B"] == B and r["N"] == N and r["n"] == n and "us" in r}
                log(f"B={B} N={N} n={n}: tree {by['tree']['us']:.1f} us, cascade {by['cascade']['us']:.1f} us "
                    f"(prefix {by['fi_prefix']['us']:.1f} + tail {by['tail']['us']:.1f} + merge "
                    f"{by['merge']['us']:.1f}), floor {fl:.1f} us")
            torch.cuda.empty_cache()
    return rows


def cascade_summary(rows) -> list[dict]:
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


def cascade_markdown(res) -> str:
    head = ["B", "N", "n", "tree µs", "cascade µs", "DFLASH 16 µs", "floor µs", "cascade / tree",
            "cascade / DFLASH", "FI metadata host µs"]
    body = [[s["B"], s["N"], s["n"], s["tree_us"], s["cascade_us"], s["dflash16_us"], s["floor_us"],
             s["cascade_over_tree"], s["cascade_over_dflash16"], s["fi_metadata_host_us"]] for s in res["summary"]]
    return (f"# Verify attention a layer: FlashInfer cascade vs whole-prefix kernel ({res['meta'].get('gpu', '')})\n\n"
            f"Qwen3-8B attention ({HQ}/{HKV} heads, D {D}, bf16), shuffled slots, CUDA-graph replay of {CALLS} calls; "
            f"floor = prefix K/V bytes at {HBM_TBPS} TB/s\n\n" + md_table(head, body) + "\n")


def main(argv=None):
    ap = _cli.Parser(prog=_cli.prog("bench", "verify_splits"),
                     description="Served verify attention a layer on the GPU: the served kernel against its prefix "
                                 "split count (--sweep splits) or the FlashInfer cascade against the whole-prefix "
                                 "kernel and DFLASH's verify (--sweep cascade).")
    ap.add_argument("--sweep", choices=("splits", "cascade"), default="splits",
                    help="splits: split counts, contiguous and shuffled slots (verify_splits.json); cascade: the "
                         "prefix paths and their parts at each --width (verify_cascade.json)")
    ap.add_argument("--out", type=_cli.output_dir, default=os.environ.get("STEP_OUT", "bench_out"),
                    help="output folder (default $STEP_OUT, else bench_out)")
    ap.add_argument("--batch", type=_cli.positive_int_list, default=[1, 4, 16], help="batch sizes, e.g. 1,4,16")
    ap.add_argument("--prefix", type=_cli.positive_int_list, default=[1024, 8192, 32768], help="prefix lengths")
    ap.add_argument("--splits", type=_cli.positive_int_list, default=[1, 4, 16, 32, 64, 128],
                    help="split counts (--sweep splits)")
    ap.add_argument("--width", type=_cli.positive_int_list, default=[16, 32, 64],
                    help="verify widths, budget + 1 (--sweep cascade)")
    ap.add_argument("--commit", default=None, help="commit id to record (the device copy has no .git)")
    a = ap.parse_args(argv)
    missing = ("needs a CUDA device (none visible)" if not torch.cuda.is_available() else
               "--sweep cascade needs flashinfer, which is not importable"
               if a.sweep == "cascade" and not prefixes.installed("flashinfer") else None)
    if missing:
        sys.stderr.write(f"{ap.prog}: error: {missing}\n")
        return 2
    meta = metadata(torch.device("cuda"))
    meta["commit"] = a.commit or meta["commit"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if a.sweep == "splits":
        ceil = ceilings(os.environ.get("STEP_OUT"))
        res = {"meta": meta, "ceilings": ceil, "rows": sweep(a.batch, a.prefix, a.splits, ceil, sms)}
        stem, md = "verify_splits", splits_markdown(res)
    else:
        ops.ensure_backend("cuda")
        rows = cascade_sweep(a.prefix, a.batch, a.width, sms)
        res = {"meta": meta, "hbm_TBps": HBM_TBPS, "calls_per_graph": CALLS, "rows": rows,
               "summary": cascade_summary(rows)}
        stem, md = "verify_cascade", cascade_markdown(res)
    write_outputs(a.out, stem, res, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
