"""Host time of one TARGET_VERIFY metadata call (tree_attention.TreeVerifyAttention._metadata) for the
whole-prefix tree kernel and the FlashMLA-prefix cascade, Kimi-shaped (64 heads, width 16), on the GPU, and
of the cascade's two pieces (FlashMLA's planner, the page-table gather). Prints JSON.

Why: served on FlashMLA at one request, the cascade's round was slower than the whole-prefix kernel's with the
same GPU time a round in the profiles (docs/benchmarks/round-cost-h200-2026-12-04.md), so the difference is
host work outside the graph; the metadata is the part of it that differs between the two.

    PYTHONPATH=tests/sglang python3 scripts/probe_verify_metadata.py   # (+ the GPU bundle's site, sglang_env.sh)

It builds its runner with the plugin tests' SGLang harness (tests/sglang: torchvision_stub,
test_sglang_tree_attention), hence the PYTHONPATH.
"""
import json
import types

import torch
import torchvision_stub

torchvision_stub.install(hide_from_transformers=False)
from sglang.srt.plugins import load_plugins  # noqa: E402

load_plugins()
from test_sglang_tree_attention import Mode, make_mla_runner  # noqa: E402

from sglang_ddtree.attention import flashmla  # noqa: E402
from sglang_ddtree.bench.common import host_us as _host_us  # noqa: E402
from sglang_ddtree.sglang import tree_attention as TA  # noqa: E402


def host_us(fn):
    return round(_host_us(fn, 400, warmup=20, sync_every=50), 1)


def case(prefix, bs, n=16, h=64, ctx=40960, rows=40, page=64, plen=1024):
    runner = make_mla_runner("FlashMLABackend", ctx=64, rows=2)
    runner.page_size, runner.attn_backend.num_q_heads = page, h
    runner.req_to_token_pool.req_to_token = torch.arange(rows * ctx, dtype=torch.int32, device="cuda").view(rows, ctx)
    runner.token_to_kv_pool.kv = torch.zeros(8, 1, 576, device="cuda", dtype=torch.bfloat16)
    ta = TA.TreeVerifyAttention(runner, n=n, max_bs=32, prefix=prefix)
    ta.install()
    fb = types.SimpleNamespace(forward_mode=Mode("TARGET_VERIFY"), batch_size=bs,
                               req_pool_indices=torch.arange(bs, device="cuda"),
                               seq_lens=torch.full((bs,), plen, device="cuda", dtype=torch.int32),
                               out_cache_loc=torch.zeros(bs * n, dtype=torch.int64, device="cuda"),
                               positions=torch.zeros(bs * n, dtype=torch.int64, device="cuda"))
    return runner, ta, fb


out = {}
for bs in (1, 16):
    for prefix in ("tree", "flashmla"):
        runner, ta, fb = case(prefix, bs)
        out[f"{prefix}_bs{bs}_metadata_host_us"] = host_us(lambda: runner.attn_backend.init_forward_metadata(fb))
        if prefix == "flashmla":
            lens = ta.lib.prefix_lens[:bs]
            out[f"get_mla_metadata_bs{bs}_host_us"] = host_us(lambda: flashmla.metadata(lens, 16, 64))
            rows = fb.req_pool_indices
            out[f"block_table_bs{bs}_host_us"] = host_us(  # as the metadata gathers it (PagedPrefix.plan)
                lambda: torch.div(ta.req_to_token[:, :: ta.lib.page].index_select(0, rows), ta.lib.page,
                                  rounding_mode="floor", out=ta.lib.block_table[:bs]))
print(json.dumps(out, indent=1))
