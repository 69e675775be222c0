"""The builders' time on one device: the top-k tree (build_tree_from_topk's op) and the lattice tree
(build_tree_from_lattice's op, and its stage 1) at the served shapes, depth 15. With BASELINE_CHECKOUT=PATH the
top-k op of another checkout (e.g. the commit before the lattice) and this checkout's are timed on the same inputs,
each in a fresh child process, the two in alternating order every round, so they are compared alike under the same
load. Not collected by CI (a benchmark): `pytest -q -s tests/core/bench_tree_build.py` prints one JSON object
(BENCH_OUT=FILE also writes it, BENCH_ROUNDS=N sets the rounds, 7). CPU: the thread's CPU time, one torch thread;
BENCH_DEVICE=cuda: wall clock around synchronised runs of back-to-back calls, no graph."""
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from sglang_ddtree import ops
from sglang_ddtree.bench.common import metadata
from sglang_ddtree.lattice import lattice_logprobs
from treegen import random_lattice, random_topk

SHAPES = [(1, 15, 16, 15), (16, 15, 16, 63), (64, 15, 16, 63), (64, 15, 64, 63)]  # B, L, K (top-k k), budget
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))


def time_round(fn, device, calls):
    """Seconds per call of fn over `calls` back-to-back calls after one warm-up: on the CPU the calling thread's
    CPU time (one torch thread: on a shared machine, time spent waiting for a core is not counted), on CUDA wall
    time around synchronised calls. The same code times the baseline (its source is the child's)."""
    import time
    clock = time.perf_counter if device == "cuda" else time.thread_time
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    t = clock()
    for _ in range(calls):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (clock() - t) / calls


CHILD = "import json, sys, torch\n" + inspect.getsource(time_round) + '''
from sglang_ddtree import _build, ops  # ops declares the schemas
inputs, device = torch.load(sys.argv[1]), sys.argv[2]
_build.load_cuda() if device == "cuda" else _build.load_cpu()
torch.set_num_threads(1)
op = torch.ops.sglang_ddtree.build_tree_from_topk
out = {}
for key, (lp, ids, roots, lens, budget, chain, calls) in inputs.items():
    args = [t.to(device) for t in (lp, ids, roots, lens)]
    out[key] = time_round(lambda: op(*args, budget, chain), device, calls)
print(json.dumps(out))
'''


def test_builder_times():
    device = os.environ.get("BENCH_DEVICE", "cpu")
    ops.ensure_backend(device)
    load0 = os.getloadavg()[0]
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    cases, topk_inputs = {}, {}
    for B, L, K, budget in SHAPES:
        key = f"B{B}_L{L}_K{K}_budget{budget}"
        cand, scores, temperature = random_lattice(rng, B, L, K, mode="bf16")
        lp_k, ids_k = random_topk(rng, B, L, 4 * K, K, mode="bf16")
        roots, lens = torch.zeros(B, dtype=torch.long), torch.zeros(B, dtype=torch.long)
        calls = max(10, 2000 // B) if device == "cpu" else 200
        topk_inputs[key] = (lp_k, ids_k, roots, lens, budget, L, calls)
        cases[key] = [t.to(device) for t in (cand, scores, temperature, lp_k, ids_k, roots, lens)] + [budget, L, calls]
    samples = {key: {"topk_build": [], "lattice_build": [], "lattice_stage1": [], "topk_build_child": [],
                     "baseline_topk_build_child": []} for key in cases}
    baseline = os.environ.get("BASELINE_CHECKOUT")
    here = str(Path(__file__).resolve().parents[2])
    own_ext = os.environ.get("TORCH_EXTENSIONS_DIR", str(Path(tempfile.gettempdir()) / "ddtree-ext"))
    base_ext = os.environ.get("BASELINE_EXTENSIONS_DIR", str(Path(tempfile.gettempdir()) / "ddtree-base-ext"))

    def child(checkout, ext, name, saved):
        env = dict(os.environ, PYTHONPATH=checkout, OMP_NUM_THREADS="1", TORCH_EXTENSIONS_DIR=ext)
        proc = subprocess.run([sys.executable, "-c", CHILD, str(saved), device], env=env, cwd=checkout,
                              capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, proc.stderr[-3000:]
        for key, t in json.loads(proc.stdout.splitlines()[-1]).items():
            samples[key][name].append(t)

    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "inputs.pt"
        torch.save(topk_inputs, saved)
        for r in range(ROUNDS):
            for key, (cand, scores, temperature, lp_k, ids_k, roots, lens, budget, chain, calls) in cases.items():
                lp, order = lattice_logprobs(scores, temperature)
                s = samples[key]
                s["topk_build"].append(time_round(lambda: ops.op("build_tree_from_topk")(
                    lp_k, ids_k, roots, lens, budget, chain), device, calls))
                s["lattice_build"].append(time_round(lambda: ops.op("build_tree_from_lattice")(
                    lp, order, cand, roots, lens, budget, chain), device, calls))
                s["lattice_stage1"].append(time_round(lambda: lattice_logprobs(scores, temperature), device, calls))
            if baseline:  # both top-k ops timed the same way, in a fresh child each, in alternating order
                runs = [(here, own_ext, "topk_build_child"), (baseline, base_ext, "baseline_topk_build_child")]
                for checkout, ext, name in runs if r % 2 == 0 else runs[::-1]:
                    child(checkout, ext, name, saved)
    result = {"meta": {**metadata(torch.device(device)), "loadavg_1min_at_start_end": [load0, os.getloadavg()[0]]},
              "device": device, "rounds": ROUNDS, "shapes": "B_L_K_budget, chain-anchored, bf16-tied inputs",
              "median_us": {key: {name: round(statistics.median(v) * 1e6, 2) for name, v in s.items() if v}
                            for key, s in samples.items()}}
    if baseline:
        result["baseline"] = baseline
        result["topk_vs_baseline"] = {key: round(statistics.median(s["topk_build_child"]) /
                                                 statistics.median(s["baseline_topk_build_child"]), 3)
                                      for key, s in samples.items()}
    print(json.dumps(result))
    if os.environ.get("BENCH_OUT"):
        Path(os.environ["BENCH_OUT"]).write_text(json.dumps(result, indent=1) + "\n")
    assert all(v for s in samples.values() for k, v in s.items() if baseline or not k.endswith("_child"))
