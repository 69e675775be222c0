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


def test_compare_sets_two_rounds_side_by_side():
    """b's round against a's: totals b − a, kernels by name with their own work marked (values by hand)."""
    from sglang_ddtree.bench.trace import compare, compare_markdown

    a = {"round_us": 100.0, "gpu_busy_us": 80.0, "host_gap_us": 20.0,
         "kernel_us_by_name": {"gemm": [60.0, 2.0], "attn": [20.0, 1.0], "argmax": [1.0, 1.0]}}
    b = {"round_us": 130.0, "gpu_busy_us": 95.0, "host_gap_us": 35.0,
         "kernel_us_by_name": {"gemm": [61.0, 2.0], "attn": [14.0, 1.0], "tree_tail": [9.0, 1.0],
                               "merge": [11.0, 1.0]}}
    c = compare(a, b, top=3)
    assert c["totals"]["round_us"] == {"a": 100.0, "b": 130.0, "delta": 30.0}
    assert c["totals"]["host_syncs_per_round"] == {"a": None, "b": None, "delta": None}
    assert c["kernels_only_in_b_us"] == 20.0 and c["kernels_only_in_a_us"] == 1.0
    assert [(r["name"], r["delta_us"], r["only_in"]) for r in c["kernels"]] == [
        ("merge", 11.0, "b"), ("tree_tail", 9.0, "b"), ("attn", -6.0, "")]
    md = compare_markdown("ddtree (b) against dflash (a), c=1", c)
    assert "| round_us | 100.0 | 130.0 | 30.0 |" in md and "| merge (only in b) | 0.0 | 11.0 | 11.0 |" in md


def test_summary_keeps_every_kernel_by_name(tmp_path):
    ev = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": 10 * i, "dur": 5} for i in range(30)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(ev))
    s = summarize_trace(str(p), steps=2, top=3)
    assert len(s["kernels_per_round"]) == 3 and len(s["kernel_us_by_name"]) == 30
    assert s["kernel_us_by_name"]["k7"] == [2.5, 0.5]
