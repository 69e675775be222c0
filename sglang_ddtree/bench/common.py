"""Shared benchmark plumbing: timing (CUDA events or wall clock, median of warmed-up repeats), progress
bar, run metadata, and JSON / markdown / PNG output."""
from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import torch


def progress(iterable, total=None, desc=""):
    try:
        from tqdm import tqdm
        return tqdm(iterable, total=total, desc=desc, dynamic_ncols=True)
    except ImportError:  # keep working without the bench extra
        items = list(iterable)
        def gen():
            for i, x in enumerate(items):
                print(f"\r{desc} {i + 1}/{len(items)}", end="", flush=True)
                yield x
            print()
        return gen()


def time_fn(fn, *, device: torch.device, repeats: int = 20, warmup: int = 3, max_seconds: float = 5.0) -> dict:
    """Median/min seconds of fn() (CUDA events on GPU). Repeats stop early past max_seconds."""
    for _ in range(warmup):
        fn()
    samples = []
    start = time.perf_counter()
    for _ in range(repeats):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        if time.perf_counter() - start > max_seconds and len(samples) >= 3:
            break
    return {"median_s": statistics.median(samples), "min_s": min(samples), "n": len(samples)}


def capture(fn, calls: int = 1, warmup: int = 1):
    """(graph, the last captured call's output): `calls` back-to-back calls of fn captured in one CUDA graph,
    warmed up `warmup` times on a side stream first, as capture requires. A replay rewrites the output tensors in
    place, so callers (the GPU tests) read them after changing the inputs the graph reads."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph, out = torch.cuda.CUDAGraph(), None
    with torch.cuda.graph(graph):
        for _ in range(calls):
            out = fn()
    return graph, out


def capture_graph(fn, calls: int = 1) -> "torch.cuda.CUDAGraph":
    """`calls` calls of fn in one CUDA graph, so replays time device work without host launch gaps."""
    return capture(fn, calls, warmup=2)[0]


def graph_us(fn, calls: int = 1, *, repeats: int = 100, max_seconds: float = 0.3) -> float:
    """Median µs a call of fn: `calls` back-to-back calls captured in one CUDA graph, replayed (warmed up, CUDA
    events), so host launch gaps stay out of the number as in the served graphs."""
    graph = capture_graph(fn, calls)
    r = time_fn(graph.replay, device=torch.device("cuda"), repeats=repeats, warmup=3, max_seconds=max_seconds)
    del graph
    return r["median_s"] * 1e6 / calls


def warm_up(seconds: float = 0.5) -> None:
    """Matrix products for `seconds`, so the clocks are up before the first timed kernel."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    while time.time() - t0 < seconds:
        a @ a
    torch.cuda.synchronize()


def host_us(fn, reps: int = 50, *, warmup: int = 1, sync_every: int = 1) -> float:
    """Median µs of the host's wall time in fn (its launches; the GPU is waited for only every `sync_every`
    calls, outside the timed part, so a deep queue does not stall the launches being timed)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for i in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
        if (i + 1) % sync_every == 0:
            torch.cuda.synchronize()
    return statistics.median(samples)


def metadata(device: torch.device) -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip() or None
    except OSError:
        commit = None
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit, "torch": torch.__version__, "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(), "cpu_threads": torch.get_num_threads(),
            "device": str(device)}
    if device.type == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(device)
    return meta


def write_outputs(out_dir: str | os.PathLike, stem: str, result: dict, markdown: str, plot=None) -> list[Path]:
    """Write STEM.json, STEM.md and (if plot is a callable taking a path) STEM.png into out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.json", out / f"{stem}.md"]
    paths[0].write_text(json.dumps(result, indent=1))
    paths[1].write_text(markdown)
    if plot is not None:
        try:
            import matplotlib
            matplotlib.use("Agg")
            png = out / f"{stem}.png"
            plot(png)
            paths.append(png)
        except ImportError:
            print("matplotlib not installed: no plot written")
    return paths


def md_table(headers: list[str], rows: list[list]) -> str:
    fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
