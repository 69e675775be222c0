"""The auto budget's start-up timing of the verify attention at long prefixes (TreeVerifyAttention.time_verify),
on the GPU with the real kernels: the time grows with the prefix and with the width, and the request rows it
borrows from req_to_token are left as they were."""
import types

import pytest
import torch
from sglang.srt.configs.model_config import AttentionArch


class TritonAttnBackend:  # the name the tree kernel wires for; its own modes are never reached here
    def init_forward_metadata(self, fb):
        raise AssertionError("a TARGET_VERIFY went to the backend's own metadata")


class MHATokenToKVPool:
    def __init__(self, slots, hkv, d, layers=36):
        self.k = torch.randn(slots, hkv, d, dtype=torch.bfloat16, device="cuda")
        self.v = torch.randn(slots, hkv, d, dtype=torch.bfloat16, device="cuda")
        self.layer_num = layers

    def get_key_buffer(self, layer_id):
        return self.k

    def get_value_buffer(self, layer_id):
        return self.v


@pytest.mark.gpu
@pytest.mark.parametrize("prefix", ["tree", "flashinfer"])
def test_verify_attention_time_grows_with_the_prefix_and_the_width(plugins_loaded, prefix):
    from sglang_ddtree.sglang.tree_attention import TreeVerifyAttention

    rows, ctx = 8, 20000
    req_to_token = torch.arange(rows * ctx, dtype=torch.int32, device="cuda").view(rows, ctx) % 65536
    runner = types.SimpleNamespace(
        attn_backend=TritonAttnBackend(), token_to_kv_pool=MHATokenToKVPool(65536, 8, 128),
        req_to_token_pool=types.SimpleNamespace(req_to_token=req_to_token), sliding_window_size=None, page_size=1,
        model_config=types.SimpleNamespace(attention_arch=AttentionArch.MHA, num_attention_heads=32),
        server_args=types.SimpleNamespace(dcp_size=1))
    ta = TreeVerifyAttention(runner, n=64, max_bs=8, widths=(16, 64), prefix=prefix)
    before = req_to_token.clone()
    t = {(w, p): ta.time_verify(4, w, p) for w in (16, 64) for p in (1, 16384)}
    assert torch.equal(req_to_token, before)  # the borrowed rows are restored
    assert t[(16, 16384)] > 1.5 * t[(16, 1)] and t[(64, 16384)] > t[(16, 16384)]
    assert ta.layers == 36 and ta.time_verify(rows + 1, 16, 1) is None
