"""A torch-profiler trace of a serving window, summarised per decode round: where the round's time goes.

A per-round cost claim needs the kernel list and the host gaps, not a guess. From a Chrome trace
(`/start_profile` on an SGLang server writes one per captured window) this reports, divided by the number
of rounds captured: the window's wall time, the GPU's busy time (union of kernel / memcpy / memset
intervals) and its idle time (host gaps: the GPU waits for the CPU), the largest gaps, every kernel's time
and count, and the host-side calls that matter for a lean round — graph launches, eager kernel launches,
device-to-host copies and synchronisations (each a host sync). `compare` sets two such summaries side by side
(e.g. DDTree's round against DFLASH's at the same load): what the round spends more on, kernel by kernel.
"""
from __future__ import annotations

import collections
import gzip
import json

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")


def load_events(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def summarize_events(events: list[dict], steps: int, top: int = 25) -> dict:
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    if not gpu:
        return {"error": "no GPU events in the trace"}
    steps = max(int(steps), 1)
    busy = _union([(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in gpu])
    t0, t1 = busy[0][0], busy[-1][1]
    busy_us = sum(e - s for s, e in busy)
    gaps = sorted(((busy[i + 1][0] - busy[i][1], busy[i][1]) for i in range(len(busy) - 1)), reverse=True)
    cpu = sorted((e for e in events if e.get("cat") in ("cpu_op", "python_function", "user_annotation")),
                 key=lambda e: float(e["ts"]))

    def before(ts: float) -> str:  # the host op that ended last before a gap opened (what the GPU waited on)
        best = None
        for e in cpu:
            if float(e["ts"]) > ts:
                break
            if float(e["ts"]) + float(e["dur"]) <= ts + 1e-3:
                best = e
        return best["name"][:80] if best else ""

    kernels = collections.defaultdict(lambda: [0.0, 0])
    for e in gpu:
        k = kernels[e["name"][:100]]
        k[0] += float(e["dur"])
        k[1] += 1
    runtime = collections.Counter(e["name"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver"))
    dtoh = sum(1 for e in gpu if e.get("cat") == "gpu_memcpy" and "DtoH" in e["name"])
    per = lambda v: round(v / steps, 3)  # noqa: E731
    return {
        "steps": steps,
        "round_us": per(t1 - t0),
        "gpu_busy_us": per(busy_us),
        "host_gap_us": per((t1 - t0) - busy_us),
        "largest_gaps": [{"us": round(g, 1), "after": before(ts)} for g, ts in gaps[:10]],
        "kernels_per_round": [{"name": n, "us": per(v[0]), "count": per(v[1])}
                              for n, v in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]],
        "kernel_launches_per_round": per(sum(runtime[c] for c in LAUNCH_CALLS)),
        "graph_launches_per_round": per(runtime["cudaGraphLaunch"]),
        "host_syncs_per_round": per(sum(runtime[c] for c in SYNC_CALLS)),
        "dtoh_copies_per_round": per(dtoh),
        "kernels_total_per_round": per(len([e for e in gpu if e.get("cat") == "kernel"])),
        "kernel_us_by_name": {n: [per(v[0]), per(v[1])] for n, v in kernels.items()},
    }


def summarize_trace(path: str, steps: int, top: int = 25) -> dict:
    return summarize_events(load_events(path), steps, top)


TOTALS = ("round_us", "gpu_busy_us", "host_gap_us", "kernels_total_per_round", "kernel_launches_per_round",
          "graph_launches_per_round", "host_syncs_per_round", "dtoh_copies_per_round")


def compare(a: dict, b: dict, top: int = 20) -> dict:
    """Summary b against summary a, per round: the totals (a, b, b − a) and the kernels by name whose time
    differs most (in both, or in one only: a kernel b launches that a does not is b's own work)."""
    ka, kb = a.get("kernel_us_by_name", {}), b.get("kernel_us_by_name", {})
    rows = []
    for name in set(ka) | set(kb):
        (ua, ca), (ub, cb) = ka.get(name, (0.0, 0.0)), kb.get(name, (0.0, 0.0))
        rows.append({"name": name, "a_us": ua, "b_us": ub, "delta_us": round(ub - ua, 3), "a_count": ca,
                     "b_count": cb, "only_in": "a" if name not in kb else "b" if name not in ka else ""})
    rows.sort(key=lambda r: -abs(r["delta_us"]))
    only_b = sum(r["b_us"] for r in rows if r["only_in"] == "b")
    only_a = sum(r["a_us"] for r in rows if r["only_in"] == "a")
    return {"totals": {k: {"a": a.get(k), "b": b.get(k), "delta": None if a.get(k) is None or b.get(k) is None
                           else round(b[k] - a[k], 3)} for k in TOTALS},
            "kernels_only_in_b_us": round(only_b, 3), "kernels_only_in_a_us": round(only_a, 3),
            "kernels": rows[:top]}


def compare_markdown(title: str, cmp: dict) -> str:
    """`compare`'s result as a markdown section."""
    lines = [f"### {title}", "", "| per round | a | b | b − a |", "|---|---:|---:|---:|"]
    for k, v in cmp["totals"].items():
        lines.append(f"| {k} | {v['a']} | {v['b']} | {v['delta']} |")
    lines += ["", f"Kernels only in b: {cmp['kernels_only_in_b_us']} µs a round; only in a: "
                  f"{cmp['kernels_only_in_a_us']} µs.", "",
              "| kernel | a µs | b µs | b − a µs | a count | b count |", "|---|---:|---:|---:|---:|---:|"]
    for r in cmp["kernels"]:
        lines.append(f"| {r['name'][:90]}{' (only in ' + r['only_in'] + ')' if r['only_in'] else ''} | {r['a_us']} | "
                     f"{r['b_us']} | {r['delta_us']} | {r['a_count']} | {r['b_count']} |")
    return "\n".join(lines) + "\n"
