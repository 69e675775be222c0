"""DDTree's TARGET_VERIFY attention inside SGLang: the project's tree kernel on the target runner's backend.

SGLang verifies a tree through its dense FULL_MASK path: per request an n x (prefix + n) bool mask, written
every round and read by the masked (slower) attention kernel in every layer, growing with context and
batch. Here the target runner's attention backend (triton or flashinfer for MHA/GQA; triton, flashmla or
flashinfer for MLA, absorbed: the queries and one latent KV head of 576, values its first 512) keeps every
forward mode it has, except TARGET_VERIFY, which becomes:

  metadata (before the forward, also at CUDA-graph replay):  gather_prefix_slots — kv_indptr and the prefix
      KV slots from req_to_token into static buffers, one small kernel (the same replay-time reads of
      req_to_token as DFLASH's verify, so SGLang's read-done barrier still holds);
  per layer:  store the n tree tokens' K/V at out_cache_loc, then verify_attn_ragged — every tree query of
      a request over its prefix (split per request on the device) and over the tree's own K/V through the
      ancestor bitset (TreeBatch.mask_bits, loaded by the worker into a static buffer) in one online softmax.

No FULL_MASK is built or read, the graph captured at any prefix length replays at every other one, and the
page size does not matter (slots are token-level).

The prefix can instead go through a library, the tree tail through our kernel alone (an empty prefix), the two
merged by LSE — the standalone cascade of sglang_ddtree.attention (SGLANG_DDTREE_PREFIX, `Settings.prefix`). Each
library is one object with plan and run (attention/prefix_attention.py), in its own module and looked up by name
(prefixes.served): the metadata asks it to plan (out of the graph, into static buffers, from req_to_token and the
lengths on the device), each layer to run, and it says which prefix the tail's call reads (none after a library,
all of it for `tree`, native.TreePrefix). What each library reads and how it plans: its object's docstring
(prefixes.LIBRARIES[name].PREFIX).
`auto` picks the FlashInfer cascade on triton and flashinfer, FA3's on fa3 (else FlashInfer's): choose.choose with
host 'server' (attention/choose.py: its table says where the engine's `auto` differs, and why).
`tree` keeps our kernel over prefix and tree everywhere.

One instance serves every verify width the worker captures graphs for (the served auto budget): a forward's width
is its rows per request, and each width has its own static mask buffer (and its own FlashMLA plan / FlashInfer
wrappers). Shapes the kernel does not take are refused up front (`unsupported`), and the worker falls back to
SGLang's FULL_MASK path with the reason logged (MHA/GQA; an MLA target has no fallback: SGLang's MLA backends
cannot verify a tree); a prefix library that cannot serve is decided at construction too, never at a request.
"""
from __future__ import annotations

import logging

import torch

from sglang_ddtree import ops
from sglang_ddtree.attention import choose, native, prefixes
from sglang_ddtree.attention.prefixes import Shape

from . import backends
from .adapters import backend_override
from .adapters.target_runner import Runner, batch_rows, batch_tokens, cache_slots, is_target_verify
from .settings import VARS

logger = logging.getLogger("sglang_ddtree")

# backends whose other modes stay untouched: the tree kernel does the whole verify attention, so the backend's own
# kernels never see a tree (class names, by KV pool)
BACKENDS = {pool: tuple(by_name.values()) for pool, by_name in backends.BY_POOL.items()}
MLA_LATENT, MLA_ROPE = native.MLA_LATENT, native.MLA_ROPE


def is_mla(model_runner) -> bool:
    return Runner(model_runner).is_mla()


def verify_backend_name(model_runner) -> str:
    """The class of the backend that serves the runner's TARGET_VERIFY (adapters/target_runner.Runner)."""
    return Runner(model_runner).verify_backend_name()


def unsupported(model_runner) -> str | None:
    """Why the tree kernel cannot serve this target runner's TARGET_VERIFY (None: it can)."""
    sgl = Runner(model_runner)
    pool_name = sgl.pool_name()
    if on_cpu_backend(model_runner):
        return cpu_unsupported(model_runner)
    if pool_name not in BACKENDS or sgl.head_major():
        return (f"KV pool {pool_name} (plain {', '.join(BACKENDS)} only: no SWA, hybrid, quantized-latent or "
                f"head-major pools)")
    name = sgl.verify_backend_name()
    if name not in BACKENDS[pool_name]:
        return (f"attention backend {name} (the tree kernel is wired for {', '.join(BACKENDS[pool_name])} "
                f"on {pool_name})")
    if (pool_name == "MLATokenToKVPool") != sgl.is_mla():
        return f"KV pool {pool_name} for {'an MLA' if sgl.is_mla() else 'a non-MLA'} target"
    k, v = sgl.kv_buffers(0)
    head_dim, v_dim = int(k.shape[-1]), int(v.shape[-1])
    if pool_name == "MLATokenToKVPool":
        if not native.supports_shape("cuda", k.dtype, "mla", head_dim, v_dim, v_dim) or v.data_ptr() != k.data_ptr():
            return (f"MLA KV cache {k.dtype} of {head_dim} (values {v_dim}) (the kernel takes bf16/fp16 latent "
                    f"{MLA_LATENT} + rope {MLA_ROPE}, values the latent part of the keys)")
    elif not native.supports_shape("cuda", k.dtype, "gqa", head_dim, v_dim):
        return (f"KV cache {k.dtype} with head dims {head_dim}/{v_dim} (the kernel takes bf16/fp16, equal key and "
                f"value head dims in {native.GQA_HEAD_DIMS})")
    if sgl.sliding_window():
        return "sliding-window attention"
    if sgl.dcp_size() > 1:
        return "decode context parallelism"
    if k.device.type != "cuda":
        return f"a KV cache on {k.device} (the kernel runs on CUDA)"
    return None


def on_cpu_backend(model_runner) -> bool:
    """Whether TARGET_VERIFY is served by SGLang's CPU backend (torch_native): the project's torch path verifies."""
    sgl = Runner(model_runner)
    if not sgl.has_backend():  # a runner without a backend yet (tools, doubles)
        return False
    return sgl.verify_backend_name() in {c for by_name in backends.CPU.values() for c in by_name.values()}


def cpu_unsupported(model_runner) -> str | None:
    """Why the torch path (native.attend_ragged on CPU tensors: any float dtype and head dims) cannot serve this CPU
    runner's TARGET_VERIFY (None: it can)."""
    sgl = Runner(model_runner)
    pool_name = sgl.pool_name()
    if pool_name not in backends.CPU or sgl.head_major():
        return f"KV pool {pool_name} on the CPU (plain {', '.join(backends.CPU)} only)"
    if sgl.sliding_window():
        return "sliding-window attention"
    return None


def no_full_mask(model_runner) -> str | None:
    """`--attention-backend NAME` where SGLang's FULL_MASK verify cannot stand in for the tree kernel on this
    MHA/GQA runner's backend (backends.NO_FULL_MASK), else None."""
    names = {cls: name for name, cls in backends.BY_POOL["MHATokenToKVPool"].items()}
    name = names.get(verify_backend_name(model_runner))
    return f"--attention-backend {name}" if name in backends.NO_FULL_MASK else None


def backend_flag(model_runner) -> str | None:
    """The --attention-backend name of the backend serving this runner's TARGET_VERIFY (None: not one DDTree
    verifies on)."""
    pool = Runner(model_runner).pool_name()
    names = {cls: name for name, cls in {**backends.BY_POOL.get(pool, {}), **backends.CPU.get(pool, {})}.items()}
    return names.get(verify_backend_name(model_runner))


def prefix_shape(model_runner) -> Shape:
    """What the prefix choice (attention/choose.py) reads of this runner: the layout, the KV pool's head dims, the
    page size and the backend (on SGLang's CPU backend: the CPU, where only `tree` serves). The KV dtype is the tree
    kernel's to refuse (`unsupported`, asked first: every cascade's tail is the kernel)."""
    sgl = Runner(model_runner)
    k, v = sgl.kv_buffers(0)
    mla = sgl.pool_name() == "MLATokenToKVPool"
    return Shape("mla" if mla else "gqa", int(k.shape[-1]), MLA_LATENT if mla else int(v.shape[-1]),
                 page_size=sgl.page_size(),
                 device="cpu" if on_cpu_backend(model_runner) else "cuda",
                 backend=backend_flag(model_runner))


def _sm_count(device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


class TreeVerifyAttention:
    """The static buffers and the patched methods of one target backend (module docstring)."""

    def __init__(self, model_runner, *, n: int, max_bs: int, widths=(), prefix: str = "auto", tp: int = 1):
        self.sgl = Runner(model_runner)  # SGLang's object model, read through the adapter's verbs
        self.tp = int(tp)  # tensor-parallel ranks: this rank serves its share of the query heads
        self.backend = self.sgl.verify_backend()  # a hybrid's TARGET_VERIFY one
        self.req_to_token = self.sgl.req_to_token()
        self.n = int(n)  # the widest verify (the server's --speculative-num-draft-tokens)
        self.widths = sorted({int(w) for w in widths} | {self.n})
        if self.widths[-1] != self.n or self.widths[0] < 1:
            raise ValueError(f"verify widths must lie in [1, {self.n}], got {widths!r}")
        self.context = int(self.req_to_token.shape[1])
        self.mla = self.sgl.pool_name() == "MLATokenToKVPool"
        dev = self.req_to_token.device
        self.device = dev
        ops.ensure_backend("cuda" if dev.type == "cuda" else "cpu")
        self.sms = _sm_count(dev)
        self.masks = {w: torch.zeros(int(max_bs), w, ops.mask_words(w), dtype=torch.int32, device=dev)
                      for w in self.widths}
        self.bs = 0
        asked = prefix  # the server's prefix choice, the engine's policy (attention/choose.py)
        setting = VARS["prefix"].name
        prefix = choose.choose(prefix_shape(model_runner), prefix, host="server", setting=setting)
        target = prefixes.Target(sgl=self.sgl, req_to_token=self.req_to_token, max_bs=int(max_bs),
                                 widths=tuple(self.widths), sms=self.sms, tp=self.tp, mla=self.mla)
        try:  # the library's object: its static buffers (and any plan made at start-up)
            self.lib = prefixes.served(prefix, target)
        except prefixes.Unavailable as why:
            if asked != "auto":
                raise ValueError(f"{setting}={prefix}, but {why}") from None
            logger.warning("sglang-ddtree: the prefix through the tree kernel (%s failed to plan: %s)", why.library,
                           why)
            prefix, self.lib = "tree", prefixes.served("tree", target)
        self.prefix = prefix
        self.calls = 0  # TARGET_VERIFY layer calls served (tests and logs)
        self._graph_state = None  # (max_bs, max_num_tokens) the backend's own graph buffers were sized for
        self._orig = {}

    @property
    def mask_bits(self) -> torch.Tensor:
        """The widest verify's mask buffer (the draft graph's own bitsets can be it: no copy per round)."""
        return self.masks[self.n]

    @mask_bits.setter
    def mask_bits(self, static: torch.Tensor) -> None:
        if tuple(static.shape[1:]) != tuple(self.masks[self.n].shape[1:]):
            raise ValueError(f"mask buffer must be [bs, {self.n}, {ops.mask_words(self.n)}], got {tuple(static.shape)}")
        self.masks[self.n] = static

    # --- what the worker calls ---------------------------------------------------------------------------
    def load_mask(self, mask_bits: torch.Tensor) -> None:
        """The round's ancestor bitsets int32 [bs, w, W] into the static buffer of width w the kernels read."""
        bs, w = mask_bits.shape[0], mask_bits.shape[1]
        if w not in self.masks:
            raise ValueError(f"no verify width {w} here (widths {self.widths})")
        if bs > self.masks[w].shape[0]:
            self._grow(bs)
        if mask_bits.data_ptr() != self.masks[w].data_ptr():
            self.masks[w][:bs].copy_(mask_bits)

    def install(self) -> None:
        """Take the backend instance's TARGET_VERIFY over (adapters/backend_override.py; every other mode stays)."""
        self._orig = backend_override.route_target_verify(self.backend, self)
        logger.info("sglang-ddtree: %s", self.describe())

    def describe(self) -> str:
        return (f"TARGET_VERIFY through the tree kernel on {type(self.backend).__name__} (no FULL_MASK; the prefix "
                f"through {self.lib.name}), verify "
                f"width{'s' if len(self.widths) > 1 else ''} {self.widths}")

    @property
    def layers(self) -> int:
        """The target's attention layers (each runs one verify attention a round)."""
        return self.sgl.layers()

    def time_verify(self, bs: int, n: int, prefix: int, reps: int = 5, calls: int = 4) -> float | None:
        """Seconds of GPU time of one layer's verify attention (the metadata excluded) for bs requests of verify
        width n over prefixes of `prefix` tokens: `calls` layer calls captured in a CUDA graph, as the server
        runs them (eagerly, the host's launches would hide the GPU's time), the median of `reps` replays by CUDA
        events, per call. Through this path's own metadata and layer code on random queries: the auto budget's
        start-up table (before any request: rows 0..bs-1 of req_to_token hold distinct pool slots meanwhile,
        and are restored). None where the pool has fewer request rows than bs."""
        import types

        rt = self.req_to_token
        if bs > rt.shape[0] or prefix + n > rt.shape[1] or n not in self.masks:
            return None
        kc, vc = self.sgl.kv_buffers(0)
        dev, dt = self.device, kc.dtype
        saved = rt[:bs].clone()
        span = prefix + n
        rt[:bs, :span] = ((torch.arange(bs * span, device=dev) % (kc.shape[0] - 1)) + 1).view(bs, span).to(rt.dtype)
        rows = torch.arange(bs, device=dev)
        hq = self.sgl.q_heads(self.tp)
        hkv, d, dv = (1, kc.shape[-1], MLA_LATENT) if self.mla else (int(kc.shape[1]), int(kc.shape[-1]), int(vc.shape[-1]))
        layer = types.SimpleNamespace(layer_id=0, tp_q_head_num=hq, tp_k_head_num=hkv, qk_head_dim=d, v_head_dim=dv,
                                      scaling=d ** -0.5, logit_cap=0)
        fb = types.SimpleNamespace(batch_size=bs, req_pool_indices=rows, seq_lens=torch.full((bs,), prefix, device=dev),
                                   positions=torch.zeros(bs * n, dtype=torch.int64, device=dev),
                                   out_cache_loc=rt[rows, prefix:span].reshape(-1).to(torch.int64),
                                   forward_mode=types.SimpleNamespace(is_target_verify=lambda: True))
        q = torch.randn(bs * n, hq * d, device=dev, dtype=dt)
        k, v = torch.randn(bs * n, hkv * d, device=dev, dtype=dt), torch.randn(bs * n, hkv * dv, device=dev, dtype=dt)
        layer_call = lambda: self._forward_extend(q, k, v, layer, fb, save_kv_cache=False)  # noqa: E731
        times = []
        try:
            self._metadata(fb)
            side = torch.cuda.Stream(dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):  # warm-up off the capture (planning, lazy allocations)
                layer_call()
            torch.cuda.current_stream(dev).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(calls):
                    layer_call()
            for i in range(reps + 2):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                if i >= 2:
                    times.append(start.elapsed_time(end) / 1e3 / calls)
            del graph
        finally:
            rt[:bs].copy_(saved)
        return sorted(times)[len(times) // 2]

    # --- buffers -----------------------------------------------------------------------------------------
    def _grow(self, bs: int) -> None:
        """An eager batch above every graph's (graphs keep the buffers they captured: they never grow)."""
        for w, old in self.masks.items():
            mask = torch.zeros(bs, *old.shape[1:], dtype=torch.int32, device=self.device)
            mask[: old.shape[0]].copy_(old)
            self.masks[w] = mask
        self.lib.grow(bs)

    def _metadata(self, forward_batch) -> None:
        bs, rows, lens = batch_rows(forward_batch)
        if bs > self.masks[self.n].shape[0]:
            self._grow(bs)
        self.lib.reserve(bs)
        width = self._width(forward_batch, bs) if self.lib.needs_width else None
        self.lib.plan(self.req_to_token, rows, lens, width, bs)
        self.bs = bs

    def _width(self, forward_batch, bs: int) -> int:
        """The verify width of this forward from its (padded) token count: at a graph replay SGLang hands the
        metadata the padded batch (bs = the graph's) but the round's own, unpadded out_cache_loc, so rows of
        out_cache_loc / bs is no width (3 requests in the 4-request graph: 51 // 4 = 12, and the plan the graph
        reads would go stale)."""
        tokens = batch_tokens(forward_batch)
        if tokens % bs or tokens // bs not in self.masks:
            raise RuntimeError(f"DDTREE tree verify: {tokens} tokens for {bs} requests is no verify width of "
                               f"{self.widths}")
        return tokens // bs

    # --- the patched backend methods ------------------------------------------------------------------------
    def _init_cuda_graph_state(self, max_bs, max_num_tokens, *args, **kwargs):
        """Each verify graph runner (one per width) calls this; the backend's own buffers serve its other modes,
        so they are sized once, for the widest runner (the first), and never re-made under captured graphs."""
        size = (int(max_bs), int(max_num_tokens))
        if self._graph_state is None or size[0] > self._graph_state[0] or size[1] > self._graph_state[1]:
            self._orig["init_cuda_graph_state"](max_bs, max_num_tokens, *args, **kwargs)
            self._graph_state = size
        if int(max_bs) > self.masks[self.n].shape[0]:
            self._grow(int(max_bs))
        self.lib.reserve(int(max_bs))  # graphs capture these addresses: allocate before any capture

    def _init_forward_metadata(self, forward_batch):
        if is_target_verify(forward_batch):
            return self._metadata(forward_batch)
        return self._orig["init_forward_metadata"](forward_batch)

    def _init_forward_metadata_out_graph(self, forward_batch, in_capture: bool = False, *args, **kwargs):
        if is_target_verify(forward_batch):
            return self._metadata(forward_batch)
        return self._orig["init_forward_metadata_out_graph"](forward_batch, in_capture, *args, **kwargs)

    def _init_forward_metadata_in_graph(self, forward_batch, *args, **kwargs):
        if is_target_verify(forward_batch):
            return None
        return self._orig["init_forward_metadata_in_graph"](forward_batch, *args, **kwargs)

    def _forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, *args, **kwargs):
        if not is_target_verify(forward_batch):
            return self._orig["forward_extend"](q, k, v, layer, forward_batch, save_kv_cache, *args, **kwargs)
        if k is None or v is None:
            raise RuntimeError("DDTREE tree verify needs the layer's K and V (cross-layer KV sharing is not supported)")
        if getattr(layer, "logit_cap", 0) or kwargs.get("sinks") is not None or kwargs.get("score_mod") is not None:
            raise RuntimeError(f"DDTREE tree verify: layer {layer.layer_id} uses logit capping / sinks / score_mod, "
                               f"which the tree kernel does not implement")
        hq, hkv, d = layer.tp_q_head_num, layer.tp_k_head_num, layer.qk_head_dim
        q_pe = q_full = None
        if self.mla:  # queries and the tree's keys as the kernel's MLA layout takes them (latent ‖ rope)
            q_full, q, q_pe, k3, v3 = self._mla_inputs(q, k, kwargs.get("q_rope"), kwargs.get("k_rope"), hq, layer,
                                                       forward_batch, save_kv_cache)
        else:
            k3, v3 = k.view(-1, hkv, d), v.view(-1, hkv, layer.v_head_dim)
            if save_kv_cache:
                self.sgl.store_kv(layer, cache_slots(forward_batch), k3, v3)
            q = q.view(-1, hq, d)
        bs = self.bs
        rows = q.shape[0]
        if bs <= 0 or rows % bs or rows // bs not in self.masks:
            raise RuntimeError(f"DDTREE tree verify: {rows} query rows for {bs} requests is no verify width of "
                               f"{self.widths}")
        n = rows // bs
        kc, vc = self.sgl.kv_buffers(layer.layer_id)
        # the library over the prefix (None for `tree`: the tail's own call reads the prefix), our kernel over the
        # tree (the tail: after a library an empty prefix), the two merged by LSE
        part = self.lib.run(q, q_pe, kc, vc, bs, n, hq, layer.scaling, q_whole=q_full)
        kv_indptr, kv_indices, splits = self.lib.tail(bs, n, hq // hkv, hkv)
        o, lse = native.attend_ragged(q, q_pe, kc, vc, kv_indptr, kv_indices, k3, v3, self.masks[n][:bs],
                                      layer.scaling, splits)
        if part is not None:
            o_p, lse_p, base = part
            o, _ = native.merge(o_p, lse_p, base, o, lse, "e", o.dtype)
        self.calls += 1
        return o.view(rows, hq * layer.v_head_dim)

    def _mla_inputs(self, q, k, q_rope, k_rope, hq, layer, forward_batch, save_kv_cache):
        """MLA (absorbed): SGLang hands the latent queries and keys either concatenated (triton, flashmla:
        q [T, H, 576], k [T, 1, 576]) or split (flashinfer: q [T, H, 512] + q_rope [T, H, 64], k [T, 1, 512]
        + k_rope [T, 1, 64]). Stores the tree's latent KV at out_cache_loc, returns (q [T, H, 576] where SGLang
        handed it whole (else None), q latent, q rope, tree keys [T, 1, 576], tree values = their latent part, a
        view)."""
        rows = q.shape[0]
        q3 = None
        if q_rope is None:
            q3 = q.reshape(rows, hq, MLA_LATENT + MLA_ROPE)
            q_a, q_b = q3[..., :MLA_LATENT], q3[..., MLA_LATENT:]
            k3 = k.reshape(rows, 1, MLA_LATENT + MLA_ROPE)
        else:
            q_a, q_b = q.reshape(rows, hq, MLA_LATENT), q_rope.reshape(rows, hq, MLA_ROPE)
            k3 = torch.cat([k.reshape(rows, 1, MLA_LATENT), k_rope.reshape(rows, 1, MLA_ROPE)], dim=-1)
        if save_kv_cache:
            self.sgl.store_kv(layer, cache_slots(forward_batch), k3, k3[..., :MLA_LATENT])
        q_a, q_b = (t if t.stride(-1) == 1 else t.contiguous() for t in (q_a, q_b))
        return q3, q_a, q_b, k3, k3[..., :MLA_LATENT]
