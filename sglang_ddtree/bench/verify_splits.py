"""Served verify attention vs its prefix split: `python -m sglang_ddtree bench verify_splits [--out DIR]`.

The served tree kernel (`native.attend_ragged`, SGLang's ragged prefix slot lists) cuts each request's prefix
into `num_splits` equal chunks, fixed when the verify graph is captured; `native.ragged_splits` picks it
from the batch only (about two waves of blocks, at most 16). On the 8B-shaped server a DDTree round grew
13.2 ms from a 1k to a 32k prefix at batch 1 (`docs/benchmarks/sglang-h200-2026-12-03-run3.md`): 0.37 ms a
layer against a KV-read floor of ~33 µs. Prediction, written before the first run: at batch 1 and 32k the
cap's 128 blocks (8 KV heads × 16) are latency-bound at ≤ 25% of copy bandwidth, and 64–128 splits
(512–1,024 blocks) bring the call within 2× of the floor; at 1k the split count changes little (the
round is weight-bound there) and more splits cost only the empty chunks' LSE writes and a longer combine.

Qwen3-8B attention shape (32 query heads, 8 KV heads, D 128, bf16), tree n = 16 (budget 15, a chain mask),
page size 1 with each request's slots contiguous (what a fresh server hands out) or shuffled across the
cache (a long-running one). Timing: the call captured in a CUDA graph and replayed, CUDA events, median.
Floor: (B·N·Hkv·D·2·2 bytes of KV + Q/O) / copy bandwidth measured in the same run.
Writes verify_splits.json and verify_splits.md to --out.
"""
from __future__ import annotations

import os
import sys

import torch

from .. import _cli
from ..attention import native
from .attention import _time_graph, ceilings
from .common import md_table, metadata, write_outputs

HQ, HKV, D, N_TREE = 32, 8, 128, 16


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


def floor_us(B: int, N: int, copy_TBps: float) -> float:
    kv = B * N * HKV * D * 2 * 2
    qo = 2 * B * N_TREE * HQ * D * 2
    return (kv + qo) / (copy_TBps * 1e12) * 1e6


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


def to_markdown(res) -> str:
    head = ["slots", "B", "N", "splits", "served default", "µs", "floor µs", "% copy bw"]
    body = [[r["slots"], r["B"], r["N"], r["splits"], "yes" if r["served_default"] else "", f"{r['us']:.1f}",
             f"{r['floor_us']:.1f}", f"{r['pct_bw']:.0f}"] for r in res["rows"]]
    return (f"# Served verify attention vs prefix split ({res['meta'].get('gpu', '')})\n\n"
            f"copy bandwidth {res['ceilings']['copy_TBps']:.2f} TB/s; Qwen3-8B attention shape, n = {N_TREE}, "
            f"page size 1, CUDA-graph replay\n\n" + md_table(head, body) + "\n")


def main(argv=None):
    ap = _cli.Parser(prog=_cli.prog("bench", "verify_splits"), description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=_cli.output_dir, default=os.environ.get("STEP_OUT", "bench_out"),
                    help="output folder (default $STEP_OUT, else bench_out)")
    ap.add_argument("--batch", type=_cli.positive_int_list, default=[1, 4, 16], help="batch sizes, e.g. 1,4,16")
    ap.add_argument("--prefix", type=_cli.positive_int_list, default=[1024, 8192, 32768], help="prefix lengths")
    ap.add_argument("--splits", type=_cli.positive_int_list, default=[1, 4, 16, 32, 64, 128], help="split counts")
    ap.add_argument("--commit", default=None, help="commit id to record (the device copy has no .git)")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.stderr.write(f"{ap.prog}: error: needs a CUDA device (none visible)\n")
        return 2
    ceil = ceilings(os.environ.get("STEP_OUT"))
    meta = metadata(torch.device("cuda"))
    meta["commit"] = a.commit or meta["commit"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    res = {"meta": meta, "ceilings": ceil, "rows": sweep(a.batch, a.prefix, a.splits, ceil, sms)}
    write_outputs(a.out, "verify_splits", res, to_markdown(res))
    print(to_markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
