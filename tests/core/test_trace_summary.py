"""The profile summary's arithmetic on a hand-made trace (expected values computed by hand)."""
import gzip
import json

from sglang_ddtree.bench.trace import summarize_trace


def test_summary_of_two_rounds(tmp_path):
    ev = [  # two rounds of 100 us: kernels busy 0-30, 20-50 (union 50), memcpy DtoH 60-70; round 2 shifted by 100
        {"ph": "X", "cat": "kernel", "name": "a", "ts": 0, "dur": 30},
        {"ph": "X", "cat": "kernel", "name": "b", "ts": 20, "dur": 30},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "ts": 60, "dur": 10},
        {"ph": "X", "cat": "kernel", "name": "a", "ts": 100, "dur": 30},
        {"ph": "X", "cat": "kernel", "name": "b", "ts": 120, "dur": 30},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "ts": 160, "dur": 10},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 0, "dur": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 2, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::item", "ts": 140, "dur": 25},
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 5},
    ]
    p = tmp_path / "t.json.gz"
    with gzip.open(p, "wt") as f:
        json.dump({"traceEvents": ev}, f)
    s = summarize_trace(str(p), steps=2)
    assert s["round_us"] == 85.0          # window 0..170 over 2 rounds
    assert s["gpu_busy_us"] == 60.0       # (50 + 10) per round
    assert s["host_gap_us"] == 25.0       # gaps 10, 30, 10 = 50 over 2
    assert s["largest_gaps"][0] == {"us": 30.0, "after": ""}
    assert s["largest_gaps"][1]["after"] == "" and len(s["largest_gaps"]) == 3
    assert s["dtoh_copies_per_round"] == 1.0 and s["host_syncs_per_round"] == 0.5
    assert s["graph_launches_per_round"] == 0.5 and s["kernel_launches_per_round"] == 0.5
    assert s["kernels_per_round"][0] == {"name": "a", "us": 30.0, "count": 1.0}
    assert s["kernels_total_per_round"] == 2.0
