"""Verify-attention benchmark: `python -m sglang_ddtree bench attention [--quick] [--out DIR]`.

Per layer call, on build_tree trees, page size 64, bf16:
  * MLA absorbed (H=64, 512+64 → 512): prefix N ∈ {4k, 8k, 32k}, tree T = n ∈ {9, 17, 33, 65},
    batch ∈ {1, 8, 32, 64}; our fused kernel, the FlashMLA and FlashInfer cascades (+ our tail + merge),
    and the naive one-block-per-(row, head) design that re-reads the latent per head (batch 1 only).
  * GQA (Qwen3-8B: 32 query heads, 8 KV heads, D 128): same grid; our kernel and the FlashInfer cascade.
Floors (docs/DESIGN.md §6.1) use the ceilings measured in the same run: FLOP = B·2·Hq·T·N·(Dqk+Dv) over the
bf16 MMA rate, bytes = B·N·(KV bytes per token) + Q/O bytes over the copy bandwidth.
Times: CUDA events, median of repeated calls after warm-up; library planning is per batch and excluded
(it runs once per forward, not per layer). Writes attention.json and attention.md to --out.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time

import torch

from .. import _cli
from ..sizes import budget_of
from ..attention import Shape, make_problem, native, prefixes, tree_verify_attention
from .common import capture_graph, metadata, time_fn, write_outputs

MLA_H, MLA_DL, MLA_DR = 64, 512, 64
GQA_HQ, GQA_HKV, GQA_D = 32, 8, 128
PAGE = 64


def _time(fn, *, min_reps=5, max_reps=20, budget_s=0.15):
    """(median µs, repeats): CUDA events, 2 warm-ups, repeats stop after budget_s."""
    r = time_fn(fn, device=torch.device("cuda"), repeats=max_reps, warmup=2, max_seconds=budget_s)
    return r["median_s"] * 1e6, r["n"]


def _time_graph(fn):
    """(median µs per call, "graph" | "eager"): the call captured in a CUDA graph and replayed, so host-side
    Python and launch gaps stay out of the number (as in serving, where verify runs inside captured graphs);
    paths that cannot be captured are timed eagerly."""
    try:
        graph = capture_graph(fn)
        us, _ = _time(graph.replay)
        return us, "graph"
    except Exception:
        torch.cuda.synchronize()
        us, _ = _time(fn)
        return us, "eager"


def ceilings(step_out: str | None):
    path = os.path.join(os.path.dirname(step_out), "env", "ceilings.json") if step_out else None
    if path and os.path.exists(path):
        return json.load(open(path))
    src = torch.randn(2 ** 28, device="cuda")
    dst = torch.empty_like(src)
    t, _ = _time(lambda: dst.copy_(src), min_reps=10)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    tm, _ = _time(lambda: a @ b, min_reps=10)
    return {"copy_TBps": 2 * src.numel() * 4 / (t * 1e-6) / 1e12, "bf16_mma_TFps": 2 * 8192 ** 3 / (tm * 1e-6) / 1e12,
            "gpu": torch.cuda.get_device_name()}


def _trees(B: int, n: int, seed: int):
    from ..tree import build_tree
    g = torch.Generator().manual_seed(seed)
    return build_tree(torch.randn(B, 16, 256, generator=g) * 3, budget_of(n), backend="reference").mask_bits.cuda()


def _setup(layout: str, B: int, N: int, n: int, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    T = B * n
    pages_per = -(-N // PAGE)
    table = torch.randperm(B * pages_per, device="cuda", generator=g).to(torch.int32).view(B, pages_per)
    lens = torch.full((B,), N, dtype=torch.int32, device="cuda")
    rnd = lambda *s: torch.randn(*s, device="cuda", generator=g, dtype=torch.bfloat16)
    if layout == "mla":
        q = (rnd(T, MLA_H, MLA_DL), rnd(T, MLA_H, MLA_DR))
        cache = rnd(B * pages_per, PAGE, MLA_DL + MLA_DR)
        tree_kv = rnd(T, MLA_DL + MLA_DR)
        scale = 1 / math.sqrt(192)
    else:
        q = rnd(T, GQA_HQ, GQA_D)
        cache = (rnd(B * pages_per, PAGE, GQA_HKV, GQA_D), rnd(B * pages_per, PAGE, GQA_HKV, GQA_D))
        tree_kv = (rnd(T, GQA_HKV, GQA_D), rnd(T, GQA_HKV, GQA_D))
        scale = 1 / math.sqrt(GQA_D)
    return (q, cache, table, lens, tree_kv, _trees(B, n, seed), scale)


def floors(layout: str, B: int, N: int, n: int, ceil: dict):
    if layout == "mla":
        H, dqk, dv, kv_bytes = MLA_H, MLA_DL + MLA_DR, MLA_DL, (MLA_DL + MLA_DR) * 2
    else:
        H, dqk, dv, kv_bytes = GQA_HQ, GQA_D, GQA_D, GQA_HKV * GQA_D * 2 * 2
    flop = B * 2 * H * n * N * (dqk + dv)
    byts = B * N * kv_bytes + B * n * H * (dqk + dv) * 2
    t_flop = flop / (ceil["bf16_mma_TFps"] * 1e12) * 1e6
    t_mem = byts / (ceil["copy_TBps"] * 1e12) * 1e6
    return flop, byts, t_flop, t_mem


NAIVE_SRC = r"""
#include <cuda_bf16.h>
// The seed's design: one block per (query row, head); scores for every key, then P·V, re-reading the latent
// from global memory for every head.
extern "C" __global__ void naive_mla(const __nv_bfloat16* qn, const __nv_bfloat16* qp, const __nv_bfloat16* cache,
    const __nv_bfloat16* tree, const int* table, const unsigned* bits, float* scores, __nv_bfloat16* out,
    int n, int H, int N, int page, int words, float scale) {
  int row = blockIdx.x, h = blockIdx.y, b = row / n, i = row % n, J = N + n;
  float* s = scores + ((long)row * H + h) * J;
  const __nv_bfloat16* q1 = qn + ((long)row * H + h) * 512;
  const __nv_bfloat16* q2 = qp + ((long)row * H + h) * 64;
  __shared__ float red[32];
  float mx = -1e30f;
  for (int j = threadIdx.x; j < J; j += blockDim.x) {
    const __nv_bfloat16* k;
    bool vis = true;
    if (j < N) k = cache + ((long)table[(long)b * ((N + page - 1) / page) + j / page] * page + j % page) * 576;
    else { int jt = j - N; k = tree + ((long)b * n + jt) * 576; vis = (bits[((long)b * n + i) * words + jt / 32] >> (jt % 32)) & 1; }
    float acc = 0.f;
    for (int d = 0; d < 512; ++d) acc += __bfloat162float(q1[d]) * __bfloat162float(k[d]);
    for (int d = 0; d < 64; ++d) acc += __bfloat162float(q2[d]) * __bfloat162float(k[512 + d]);
    float v = vis ? acc * scale : -1e30f;
    s[j] = v; mx = fmaxf(mx, v);
  }
  for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
  __syncthreads();
  mx = -1e30f;
  for (int w = 0; w < blockDim.x / 32; ++w) mx = fmaxf(mx, red[w]);
  __syncthreads();
  float sum = 0.f;
  for (int j = threadIdx.x; j < J; j += blockDim.x) { float p = __expf(s[j] - mx); s[j] = p; sum += p; }
  for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(~0u, sum, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = sum;
  __syncthreads();
  sum = 0.f;
  for (int w = 0; w < blockDim.x / 32; ++w) sum += red[w];
  for (int d = threadIdx.x; d < 512; d += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < J; ++j) {
      const __nv_bfloat16* k = j < N ? cache + ((long)table[(long)b * ((N + page - 1) / page) + j / page] * page + j % page) * 576
                                     : tree + ((long)b * n + (j - N)) * 576;
      acc += s[j] * __bfloat162float(k[d]);
    }
    out[((long)row * H + h) * 512 + d] = __float2bfloat16(acc / sum);
  }
}
"""


def naive_runner(args):
    """A callable running the naive kernel (through CuPy's NVRTC) or None where CuPy is missing."""
    try:
        import cupy
    except Exception:
        return None
    (qn, qp), cache, table, lens, tree_kv, bits, scale = args
    T, H, _ = qn.shape
    B = table.shape[0]
    n, N = T // B, int(lens[0])
    kern = cupy.RawKernel(NAIVE_SRC, "naive_mla", options=("-std=c++17",))
    scores = torch.empty(T * H * (N + n), device="cuda")
    out = torch.empty(T, H, 512, device="cuda", dtype=torch.bfloat16)
    ptr = lambda t: cupy.uint64(t.data_ptr())
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

    def run():
        with stream:
            kern((T, H), (256,), (ptr(qn), ptr(qp), ptr(cache), ptr(tree_kv), ptr(table), ptr(bits), ptr(scores),
                                   ptr(out), cupy.int32(n), cupy.int32(H), cupy.int32(N), cupy.int32(PAGE),
                                   cupy.int32((n + 31) // 32), cupy.float32(scale)))
        return out
    return run


def bench_grid(layout, Ns, Ts, Bs, ceil, *, with_naive=True, log=print):
    rows = []
    libs = [lib for lib in ("flashmla", "flashinfer", "fa3") if prefixes.installed(lib)]
    for N in Ns:
        for B in Bs:
            for n in Ts:
                args = _setup(layout, B, N, n, seed=N + B + n)
                prob = make_problem(*args)
                flop, byts, t_flop, t_mem = floors(layout, B, N, n, ceil)
                paths = {"native": lambda: tree_verify_attention(*args, backend="tree", max_prefix_len=N)}
                for lib in libs:
                    if prefixes.refusal(lib, Shape.of(prob)) is None:
                        plan = {}
                        tree_verify_attention(*args, backend=lib, plan=plan)  # plan (and JIT) once per batch
                        paths[lib] = (lambda lib=lib, plan=plan: tree_verify_attention(*args, backend=lib, plan=plan))
                if layout == "mla" and with_naive and B == 1 and N <= 8192:
                    run = naive_runner(args)
                    if run is not None:
                        paths["naive"] = run
                for name, fn in paths.items():
                    try:
                        # CuPy launches on the legacy stream, which a capture forbids: the naive kernel runs eagerly
                        us, mode = (_time(fn)[0], "eager") if name == "naive" else _time_graph(fn)
                    except Exception as exc:  # a library that rejects a shape: recorded, not fatal
                        log(f"  {layout} {name} B={B} N={N} T={n}: {type(exc).__name__}: {exc}")
                        continue
                    rec = {"layout": layout, "backend": name, "B": B, "N": N, "T": n, "us": us, "timing": mode,
                           "TFps": flop / (us * 1e-6) / 1e12, "TBps": byts / (us * 1e-6) / 1e12,
                           "floor_us": max(t_flop, t_mem), "flop_floor_us": t_flop, "mem_floor_us": t_mem,
                           "pct_mma": 100 * t_flop / us, "pct_bw": 100 * t_mem / us}
                    rows.append(rec)
                    log(f"  {layout:3s} {name:10s} B={B:2d} N={N:5d} T={n:2d}: {us:9.1f} us  "
                        f"{rec['TFps']:6.1f} TF/s {rec['TBps']:5.2f} TB/s  floor {rec['floor_us']:.1f} us")
                del args, prob, paths
                torch.cuda.empty_cache()
    return rows


def breakdown(layout, N, n, B, ceil):
    """Prefix alone vs tree tail + merge at one shape (target: tail + merge <= 15% of the prefix)."""
    args = _setup(layout, B, N, n, seed=1)
    prob = make_problem(*args)
    out = {"layout": layout, "N": N, "T": n, "B": B}
    out["prefix_native_us"], _ = _time_graph(lambda: native.attend(prob, with_tree=False, max_prefix_len=N))
    out["tail_native_us"], _ = _time_graph(lambda: native.attend(prob, with_prefix=False))
    for lib in ("flashmla", "flashinfer", "fa3"):
        if prefixes.refusal(lib, Shape.of(prob)) is None:
            plan = {}
            prefixes.run(lib, prob, plan)
            out[f"prefix_{lib}_us"], _ = _time_graph(lambda lib=lib, plan=plan: prefixes.run(lib, prob, plan))
    o_p, l_p = native.attend(prob, with_tree=False, max_prefix_len=N)
    o_t, l_t = native.attend(prob, with_prefix=False)
    out["merge_us"], _ = _time_graph(lambda: native.merge(o_p, l_p, "e", o_t, l_t, "e", torch.bfloat16))
    best = min(v for k, v in out.items() if k.startswith("prefix_"))
    out["tail_plus_merge_over_best_prefix"] = (out["tail_native_us"] + out["merge_us"]) / best
    return out


def jit_times():
    """First plan+run of each FlashInfer prefix wrapper in this process: the JIT compile time when
    FLASHINFER_WORKSPACE_BASE points at an empty cache (needs no native library of ours)."""
    out = {"flashinfer_cache": os.environ.get("FLASHINFER_WORKSPACE_BASE", "default")}
    t = time.perf_counter()
    if not prefixes.installed("flashinfer"):
        return out
    out["import_flashinfer_s"] = time.perf_counter() - t
    for layout in ("mla", "gqa"):
        prob = make_problem(*_setup(layout, 1, 256, 9))
        t = time.perf_counter()
        prefixes.run("flashinfer", prob, {})
        torch.cuda.synchronize()
        out[f"flashinfer_{layout}_first_call_s"] = time.perf_counter() - t
    return out


def to_markdown(res) -> str:
    c = res["ceilings"]
    m = res["meta"]
    lines = [f"# Verify attention — {m.get('gpu', '?')}, {m['date']}, commit {m['commit']}", "",
             f"Ceilings measured in the run: copy {c['copy_TBps']:.2f} TB/s, bf16 MMA {c['bf16_mma_TFps']:.0f} TF/s. "
             "Per layer call, bf16, page 64; T = tree nodes per request (budget + 1); floor = max(FLOP, bytes) "
             "over those ceilings.", ""]
    if res.get("jit"):
        lines += ["FlashInfer first call (JIT compile + plan + run): " +
                  ", ".join(f"{k} {v:.1f} s" if isinstance(v, float) else f"{k} {v}" for k, v in res["jit"].items()), ""]
    lines += ["Timing: CUDA-graph replay of one layer call (host overhead excluded) unless marked eager; "
              "inputs are reused between replays, so shapes whose KV fits in L2 (B=1, N<=8k) read it from L2.", ""]
    lines += ["| layout | B | N | T | backend | µs | TF/s | TB/s | floor µs | % MMA | % BW |",
              "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        tag = "" if r.get("timing", "graph") == "graph" else " (eager)"
        lines.append(f"| {r['layout']} | {r['B']} | {r['N']} | {r['T']} | {r['backend']}{tag} | {r['us']:.1f} | "
                     f"{r['TFps']:.1f} | {r['TBps']:.2f} | {r['floor_us']:.1f} | {r['pct_mma']:.0f} | {r['pct_bw']:.0f} |")
    if res.get("breakdown"):
        lines += ["", "Prefix vs tail + merge:", "", "```", json.dumps(res["breakdown"], indent=1), "```"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = _cli.Parser(prog=_cli.prog("bench", "attention"), description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--out", type=_cli.output_dir, default=os.environ.get("STEP_OUT", "bench_out"),
                    help="output folder (default $STEP_OUT, else bench_out)")
    ap.add_argument("--quick", action="store_true", help="a small grid (smoke run)")
    ap.add_argument("--layouts", type=_cli.choice_list("mla", "gqa"), default=["mla", "gqa"],
                    help="attention layouts of the default grid, comma-separated (default mla,gqa)")
    ap.add_argument("--grid", action="append", default=None, metavar="LAYOUT:Ns:Ts:Bs",
                    help="custom grid, repeatable, e.g. mla:4096,8192:9,65:1 (replaces the default grid)")
    ap.add_argument("--jit-only", action="store_true", help="only time FlashInfer's first calls (cold JIT)")
    ap.add_argument("--commit", default=None, help="commit id to record (the device copy has no .git)")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.stderr.write(f"{ap.prog}: error: needs a CUDA device (none visible)\n")
        return 2
    os.makedirs(a.out, exist_ok=True)
    jit_path = os.path.join(a.out, "attention_jit.json")
    if a.jit_only:
        json.dump(jit_times(), open(jit_path, "w"), indent=1)
        print(open(jit_path).read())
        return 0
    torch.manual_seed(0)
    ceil = ceilings(os.environ.get("STEP_OUT"))
    meta = metadata(torch.device("cuda"))
    meta["commit"] = a.commit or meta["commit"]
    jit = json.load(open(jit_path)) if os.path.exists(jit_path) else jit_times()
    res = {"meta": meta, "ceilings": ceil, "jit": jit, "rows": [], "breakdown": []}
    Ns, Ts, Bs = ([4096, 8192, 32768], [9, 65], [1, 32]) if a.quick else ([4096, 8192, 32768], [9, 17, 33, 65], [1, 8, 32, 64])
    ints = lambda text: [int(x) for x in text.split(",")]
    grids = ([(g.split(":")[0], *map(ints, g.split(":")[1:])) for g in a.grid] if a.grid
             else [(layout, Ns, Ts, Bs) for layout in a.layouts])
    for layout in dict.fromkeys(g[0] for g in grids):
        res["breakdown"].append(breakdown(layout, 4096, 65, 1, ceil))
    write_outputs(a.out, "attention", res, to_markdown(res))
    for layout, ns, ts, bs in grids:
        res["rows"] += bench_grid(layout, ns, ts, bs, ceil)
        write_outputs(a.out, "attention", res, to_markdown(res))
    print(to_markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
