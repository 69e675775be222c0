"""The accepted nodes' KV move on an MLA target (adapters/dflash_v2.py: move_kv, all_layer_rows, move_rows).

SGLang's MLA pool moves KV one layer at a time; with SGLANG_DDTREE_MLA_KV_MOVE=one_launch the adapter moves every
layer in one launch a chunk through the MHA pool's own copy kernel. Checked against SGLang's own
MLATokenToKVPool.move_kv_cache on a real pool, with commit plans shaped as the round makes them
(kernels/tree_walk.h, commit_column: accepted paths compacted forward, pads copying a slot onto itself, more rows
than one launch takes). On the CPU the kernel is a reference of its contract (each launch reads all
its rows, then writes them); on the GPU the real one.
"""
import pytest
import torch

from sglang_ddtree.sglang.adapters import dflash_v2


def _pool(layers=3, slots=900, device="cpu"):
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool

    pool = MLATokenToKVPool(slots, 1, torch.bfloat16, 512, 64, layers, device, False)
    g = torch.Generator().manual_seed(1)
    for buf in pool.kv_buffer:
        buf.copy_(torch.randn(buf.shape, generator=g).to(buf.dtype))
    return pool


def _plans(B, n, W, slots, seed):
    """dst, src int64 [B, W] as commit_column writes them: request b's tree slots slots_b (distinct across
    requests), an accepted path acc (acc[0] = 0, increasing, a node's parent before it) of length len."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(slots - 1, generator=g)[: B * n].view(B, n) + 1  # slot 0 is SGLang's padding slot
    dst, src = torch.empty(B, W, dtype=torch.int64), torch.empty(B, W, dtype=torch.int64)
    for b in range(B):
        length = int(torch.randint(1, min(n, W) + 1, (1,), generator=g))
        acc = [0] + sorted(torch.randperm(n - 1, generator=g)[: length - 1].add(1).tolist())
        for k in range(W):
            own = perm[b, min(k, n - 1)]
            dst[b, k] = perm[b, k] if k < length else own
            src[b, k] = perm[b, acc[k]] if k < length else own
    return dst.flatten(), src.flatten()


def _reference_copy(pool):
    """SGLang's copy_all_layer_kv_cache_func as its kernel does it: per layer, one launch reads all its rows
    (tgt/src[:num_locs]) before writing them; the layer is the one whose base pointer is given."""
    by_ptr = {b.data_ptr(): b for b in pool.kv_buffer}
    launches = []

    def copy(ptrs, strides, tgt, src, num_locs, num_locs_upper, cfg):
        assert num_locs <= num_locs_upper == cfg["num_locs_upper"] and tgt.dtype == src.dtype == torch.int64
        launches.append(num_locs)
        for ptr, stride in zip(ptrs.tolist(), strides.tolist()):
            buf = by_ptr[ptr]
            assert stride == buf[0].numel() * buf.element_size() <= cfg["byte_tiles"] * cfg["bytes_per_tile"]
            rows = buf[src[:num_locs]].clone()
            buf[tgt[:num_locs]] = rows
    return copy, launches


@pytest.mark.parametrize("B,n,W,per_launch", [(2, 17, 17, 256), (40, 17, 17, 256), (24, 8, 16, 256),
                                                (3, 64, 17, 256), (40, 17, 17, 5), (6, 30, 17, 3)])
def test_all_layer_move_equals_sglangs_per_layer_move(plugins_loaded, monkeypatch, B, n, W, per_launch):
    """Also with a few rows a launch, so launch boundaries cut through requests' compactions everywhere."""
    monkeypatch.setattr(dflash_v2, "ROWS_PER_LAUNCH", per_launch)
    pool, want = _pool(), _pool()
    dst, src = _plans(B, n, W, pool.size, seed=B * 100 + n)
    want.move_kv_cache(dst, src)
    rows = dflash_v2.all_layer_rows(pool)
    assert rows is not None and rows[0].dtype == torch.uint64 and rows[1].tolist() == [1152] * 3
    copy, launches = _reference_copy(pool)
    dflash_v2.move_rows(copy, rows, dst, src)
    assert launches == [min(per_launch, B * W - i) for i in range(0, B * W, per_launch)]  # in order
    for got, exp in zip(pool.kv_buffer, want.kv_buffer):
        assert torch.equal(got, exp)


def test_only_plain_mla_pools_take_the_all_layer_move(plugins_loaded):
    class MHATokenToKVPool:
        kv_buffer = [torch.zeros(4, 1, 576)]

    assert dflash_v2.all_layer_rows(MHATokenToKVPool()) is None
    pool = _pool(layers=2)
    pool.kv_buffer = [pool.kv_buffer[0], pool.kv_buffer[1][:, :, :288]]  # a strided layer: not one row a slot
    assert dflash_v2.all_layer_rows(pool) is None


@pytest.mark.gpu
@pytest.mark.parametrize("B,n,W", [(40, 17, 17), (3, 64, 17)])
def test_all_layer_move_on_the_gpu(plugins_loaded, sglang_release, B, n, W):
    """The real kernel (SGLang's, through the release adapter) on a real MLA pool on the GPU."""
    from sglang_ddtree.sglang import adapters

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (run on the GPU by scripts/gpu_check.sh)")
    pool, want = _pool(device="cuda"), _pool(device="cuda")
    dst, src = (t.cuda() for t in _plans(B, n, W, pool.size, seed=B))
    want.move_kv_cache(dst, src)
    dflash_v2.move_rows(adapters.for_release(sglang_release).Adapter.COPY_ALL_LAYERS,
                        dflash_v2.all_layer_rows(pool), dst, src)
    for got, exp in zip(pool.kv_buffer, want.kv_buffer):
        assert torch.equal(got, exp)
