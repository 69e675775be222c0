"""DDTreeWorkerV2: SGLang's DFlash V2 (overlap) worker with DDTree's decode round.

Prefill, idle rounds and the draft KV cache are DFlashWorkerV2's. The decode round is replaced:

  draft block (DFlash drafter, [bonus, MASK…])        -- DFlash's draft forward, unchanged
  → lm_head → top-k + log-normaliser → tree build      -- DraftTreeHead, inside the draft CUDA graph
  → target verify of the n = budget + 1 tree nodes      -- FULL_MASK tree mask, graphs keep it (hooks.py)
  → per-node target tokens + tree walk                   -- sglang_ddtree.sample_node_tokens / accept_tree
  → move the accepted nodes' KV to slots prefix..prefix+len  (one all-layer copy)
  → materialise the drafter's context KV for the accepted path (DFlash's writer)

Widths: the verify writes n slots per request, the drafter and the committed output use the drafter's
block size (accepted path ≤ depth limit + 1 = block). Nothing is read on the host: sizes come from the
host-side lengths the scheduler already keeps (seq_lens_cpu), and every per-request step is a tensor op.
"""
from __future__ import annotations

import inspect
import logging

import torch

from sglang.kernels.ops.speculative.dflash import _prepare_dflash_draft_block_unchecked
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
from sglang.srt.speculative.dflash_info import DFlashVerifyInput
from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2
from sglang.srt.speculative.dflash_utils import apply_dflash_verify_logits_adjustments
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from sglang_ddtree.accept import accept_tree, sample_node_tokens
from sglang_ddtree.topk import topk_logprobs
from sglang_ddtree.tree import TreeBatch, build_tree_from_topk

from . import compat
from .args import Knobs
from .verify_input import full_tree_mask, host_mask_bound

logger = logging.getLogger("sglang_ddtree")

# DFlashWorkerV2 members this worker calls or overrides (the conformance test checks each exists).
DFLASH_MEMBERS_USED = (
    "__init__", "forward_batch_generation", "init_cuda_graphs", "_maybe_build_draft_sampler",
    "_ensure_draft_block_buffers", "_append_target_hidden_to_draft_kv_by_loc", "_make_next_draft_input_decode",
    "_validate_phase1_sampling_support", "target_worker",
)
# ... and the instance attributes it reads, all set in DFlashWorkerV2.__init__.
DFLASH_INSTANCE_ATTRS = (
    "draft_model_runner", "draft_model", "model_runner", "device", "_mask_token_id", "_draft_block_ids_buf",
    "_draft_block_positions_buf", "_draft_verify_out_cache_loc_buf", "_draft_seq_lens_cpu_buf",
    "_block_pos_offsets", "_draft_block_spec_info",
)
_PARENT_FORWARD_PARAMS = tuple(inspect.signature(DFlashWorkerV2.forward_batch_generation).parameters)


class DraftTreeHead:
    """lm_head → top-k log-probs → best-first tree for the L = block − 1 draft positions.

    As a capture-tail hook it runs inside the draft CUDA graph and leaves its results in static buffers
    (the tree is built with root token 0 at position 0; `finish` sets the real root and positions, two
    tiny tensor ops). Eagerly (`build`), the same functions run on the draft hidden states directly.
    """

    def __init__(self, *, weight, num_org: int, block_size: int, budget: int, topk: int | None, max_bs: int,
                 ops_backend: str, tree_in_graph: bool):
        self.weight, self.num_org = weight, int(num_org)
        self.block, self.L, self.budget = int(block_size), int(block_size) - 1, int(budget)
        self.k = min(topk or budget, self.num_org)
        self.ops_backend = ops_backend
        self.stage1 = "cuda" if ops_backend == "cuda" else "cpu"
        self.tree_in_graph = tree_in_graph and ops_backend == "cuda"
        dev, n = weight.device, self.budget + 1
        self.lp = torch.zeros(max_bs, self.L, self.k, dtype=torch.float32, device=dev)
        self.ids = torch.zeros(max_bs, self.L, self.k, dtype=torch.int64, device=dev)
        self.static_tree = None
        if self.tree_in_graph:
            probe = build_tree_from_topk(self.lp[:1], self.ids[:1], self.budget, backend="cuda")
            self.static_tree = {name: torch.zeros((max_bs, *t.shape[1:]), dtype=t.dtype, device=dev)
                                for name, t in probe.tensors().items()}
        self.graph_ready = False

    def logits(self, hidden: torch.Tensor, bs: int) -> torch.Tensor:
        hs = hidden.view(bs, self.block, -1)[:, 1:, :]
        if hs.dtype != self.weight.dtype:
            hs = hs.to(self.weight.dtype)
        return torch.matmul(hs, self.weight[: self.num_org].T)  # [bs, L, V]

    def _topk(self, hidden, bs):
        return topk_logprobs(self.logits(hidden, bs), self.k, self.stage1)

    def capture_hook(self, runner, out, forward_batch, num_tokens):
        del runner
        bs = int(num_tokens) // self.block
        lp, ids = self._topk(out.hidden_states, bs)
        self.lp[:bs].copy_(lp)
        self.ids[:bs].copy_(ids)
        if self.static_tree is not None:
            tree = build_tree_from_topk(lp, ids, self.budget, backend="cuda")
            for name, t in tree.tensors().items():
                self.static_tree[name][:bs].copy_(t)
        self.graph_ready = True

    def _tree(self, lp, ids, roots, prefix) -> TreeBatch:
        if self.ops_backend == "cpu" and lp.device.type != "cpu":  # fallback without the CUDA ops: syncs
            tree = build_tree_from_topk(lp.cpu(), ids.cpu(), self.budget, root_tokens=roots.cpu(),
                                        seq_lens=prefix.cpu().to(torch.int64), backend="cpu")
            return tree.to(lp.device, non_blocking=True)
        return build_tree_from_topk(lp, ids, self.budget, root_tokens=roots, seq_lens=prefix.to(torch.int64),
                                    backend=self.ops_backend)

    def build(self, hidden, bs, roots, prefix) -> TreeBatch:
        lp, ids = self._topk(hidden, bs)
        return self._tree(lp, ids, roots, prefix)

    def from_graph(self, bs, roots, prefix) -> TreeBatch:
        if self.static_tree is None:
            return self._tree(self.lp[:bs], self.ids[:bs], roots, prefix)
        f = {name: buf[:bs] for name, buf in self.static_tree.items()}
        f["tokens"] = f["tokens"].clone()
        f["tokens"][:, 0] = roots
        f["positions"] = f["positions"] + prefix.to(torch.int64).unsqueeze(1)
        return TreeBatch(**f, budget=self.budget, depth_limit=self.L, topk=self.k)


def _ops_backend(requested: str) -> str:
    if requested in ("auto", "cuda"):
        from sglang_ddtree import ops

        if ops.cuda_available():
            return "cuda"
        if requested == "cuda":
            ops.ensure_backend("cuda")  # raises with the reason
        logger.error("sglang-ddtree: the CUDA tree ops are unavailable; falling back to the CPU ops with a host "
                     "round trip per decode round (slow; set SGLANG_DDTREE_OPS_BACKEND=cuda to make this fatal)")
    return "cpu"


class DDTreeWorkerV2(DFlashWorkerV2):
    def __init__(self, server_args, gpu_id, nccl_port, target_worker, ps=None, **kwargs):
        compat.check_worker_release()
        super().__init__(server_args=server_args, gpu_id=gpu_id, nccl_port=nccl_port,
                         target_worker=target_worker, **compat.worker_init_kwargs(ps), **kwargs)
        from sglang.srt.speculative.draft_worker_common import build_block_pos_offsets, make_draft_block_spec_info

        self.knobs = Knobs.from_env()
        self.verify_width = int(server_args.speculative_num_draft_tokens)  # n = budget + 1
        self.budget = self.verify_width - 1
        self.block_size = int(server_args.speculative_dflash_block_size)
        self.speculative_num_draft_tokens = self.block_size  # output stride: accepted path <= block
        if self.verify_width < self.block_size:
            raise ValueError(f"DDTREE: verify width {self.verify_width} < drafter block {self.block_size}")
        self._block_pos_offsets = build_block_pos_offsets(length=self.block_size, device=self.device)
        self._draft_block_spec_info = make_draft_block_spec_info(draft_token_num=self.block_size,
                                                                 device=self.device)
        if hasattr(self.draft_model, "set_block_size"):
            self.draft_model.set_block_size(self.block_size)
        self.ops_backend = _ops_backend(self.knobs.ops_backend)
        self._node_offsets = torch.arange(self.verify_width, device=self.device, dtype=torch.int64)
        self._round = 0
        self._seed = int(getattr(server_args, "random_seed", 0) or 0)
        self._head = self._make_head(max_bs=int(getattr(server_args, "max_running_requests", 48) or 48))
        self._warned_sampling = False
        logger.info("DDTREE worker: budget=%d verify width=%d drafter block=%d k=%d ops=%s tree-in-graph=%s",
                    self.budget, self.verify_width, self.block_size, self._head.k, self.ops_backend,
                    self._head.tree_in_graph)

    # --- construction -----------------------------------------------------------------------------
    def _make_head(self, max_bs: int) -> DraftTreeHead:
        lm_head = getattr(self.target_worker.model_runner.model, "lm_head", None)
        if lm_head is None or not hasattr(lm_head, "weight") or not torch.is_floating_point(lm_head.weight):
            raise RuntimeError("DDTREE needs the target's lm_head weight (unquantized) for the draft head")
        shard = getattr(lm_head, "shard_indices", None)
        num_org = int(shard.num_org_elements) if shard is not None else int(lm_head.weight.shape[0])
        try:
            from sglang.srt.runtime_context import get_exec

            max_bs = max(max_bs, max(get_exec().graph.cuda_graph_config.decode.bs))
        except Exception:
            pass
        return DraftTreeHead(weight=lm_head.weight, num_org=num_org, block_size=self.block_size,
                             budget=self.budget, topk=self.knobs.topk, max_bs=max_bs,
                             ops_backend=self.ops_backend, tree_in_graph=self.knobs.draft_graph_head)

    def _maybe_build_draft_sampler(self):
        """Called by DFlashWorkerV2.init_cuda_graphs before the draft graphs are captured."""
        if self.knobs.draft_graph_head:
            self.draft_model_runner.capture_tail_hooks.append(self._head.capture_hook)
        return None  # DFlash's greedy chain sampler is not used

    # --- the round ----------------------------------------------------------------------------------
    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None):
        if batch.forward_mode.is_extend() or batch.is_extend_in_batch or batch.forward_mode.is_idle():
            kwargs = {"on_publish": on_publish, "grammar_barrier": grammar_barrier}
            if "pp_proxy_tensors" in _PARENT_FORWARD_PARAMS:
                kwargs["pp_proxy_tensors"] = pp_proxy_tensors
            return super().forward_batch_generation(batch, **kwargs)
        if getattr(batch, "return_logprob", False):
            raise ValueError("DDTREE speculative decoding does not support return_logprob yet.")
        if getattr(batch, "has_grammar", False):
            raise ValueError("DDTREE speculative decoding does not support grammar-constrained requests yet.")
        return self._decode_round(batch, on_publish)

    def _draft(self, batch, draft_input, bs):
        """DFlash's draft forward over [bonus, MASK…] (block positions prefix..prefix+block−1)."""
        block = self.block_size
        self._ensure_draft_block_buffers(bs)
        block_ids = self._draft_block_ids_buf[:bs]
        positions_2d = self._draft_block_positions_buf[:bs]
        cache_loc_2d = self._draft_verify_out_cache_loc_buf[:bs]
        prefix = batch.seq_lens
        _prepare_dflash_draft_block_unchecked(
            bonus_tokens=draft_input.bonus_tokens.view(-1), prefix_lens=prefix.view(-1),
            req_pool_indices=batch.req_pool_indices.view(-1),
            req_to_token=self.model_runner.req_to_token_pool.req_to_token, block_ids_out=block_ids,
            positions_out=positions_2d, cache_loc_out=cache_loc_2d, mask_token_id=int(self._mask_token_id))
        embeds = self.target_worker.model_runner.model.get_input_embeddings()(block_ids)
        # The drafter may run in another dtype than the target (fp32 checkpoints resolve per runner); the
        # draft CUDA graph casts when it copies into its static input, the eager path must do it here.
        embeds = embeds.to(self.draft_model_runner.dtype)
        seq_lens_cpu = self._draft_seq_lens_cpu_buf[:bs]
        if batch.seq_lens_cpu is not None:
            seq_lens_cpu.copy_(batch.seq_lens_cpu)
            seq_lens_cpu.add_(block)
            seq_lens_sum = int(seq_lens_cpu.sum())
        else:
            seq_lens_cpu.copy_(draft_input.reserved_seq_lens_cpu)
            seq_lens_sum = int(draft_input.reserved_seq_lens_sum)
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, input_ids=block_ids.flatten(),
            req_pool_indices=batch.req_pool_indices, seq_lens=prefix, out_cache_loc=cache_loc_2d.reshape(-1),
            seq_lens_sum=seq_lens_sum, seq_lens_cpu=seq_lens_cpu, positions=positions_2d.reshape(-1),
            input_embeds=embeds.view(-1, embeds.shape[-1]), spec_algorithm=SpeculativeAlgorithm.DFLASH,
            spec_info=self._draft_block_spec_info, capture_hidden_mode=CaptureHiddenMode.NULL)
        with torch.inference_mode():
            out = self.draft_model_runner.forward(forward_batch)
        roots = block_ids[:, 0]
        if out.can_run_graph and self._head.graph_ready:
            return self._head.from_graph(bs, roots, prefix)
        hidden = out.logits_output.hidden_states
        if hidden is None:
            raise RuntimeError("DDTREE: the DFlash drafter returned no hidden states")
        return self._head.build(hidden, bs, roots, prefix)

    def _sample(self, logits, temperature, seed=0, step=0) -> torch.Tensor:
        if self.ops_backend == "cuda" or logits.device.type == "cpu":
            return sample_node_tokens(logits, temperature, seed=seed, step=step)
        # CPU-ops fallback with device logits: the project's torch sampler, which runs on any device
        from sglang_ddtree.accept import sample_rows_torch

        B, n, V = logits.shape
        seeds = torch.as_tensor(seed, device=logits.device).to(torch.int64).expand(B).repeat_interleave(n)
        steps = torch.full((B * n,), int(step), dtype=torch.int64, device=logits.device)
        nodes = torch.arange(n, device=logits.device, dtype=torch.int64).repeat(B)
        return sample_rows_torch(logits.reshape(B * n, V), float(temperature), seeds, steps, nodes).view(B, n)

    def _node_tokens(self, logits, sampling_info) -> torch.Tensor:
        """Per-node target tokens: argmax for greedy requests, an exact per-node sample otherwise."""
        if sampling_info is None or sampling_info.is_all_greedy:
            return self._sample(logits, 0.0)
        if not self._warned_sampling:
            self._warned_sampling = True
            logger.warning("DDTREE samples with temperature only (top-p / top-k < vocab / min-p are ignored "
                           "at T > 0 in this release)")
        temps = sampling_info.temperatures.view(-1, 1, 1).float().clamp(min=1e-6)
        seed = sampling_info.sampling_seed if getattr(sampling_info, "sampling_seed", None) is not None \
            else self._seed
        sampled = self._sample(logits.float() / temps, 1.0, seed=seed, step=self._round)
        greedy = self._sample(logits, 0.0)
        return torch.where(sampling_info.top_ks.view(-1, 1) <= 1, greedy, sampled)

    def _accept(self, tree: TreeBatch, target_tokens: torch.Tensor):
        if self.ops_backend == "cuda":
            return accept_tree(tree, target_tokens)
        res = accept_tree(tree.to("cpu"), target_tokens.cpu())
        return type(res)(**{f: getattr(res, f).to(self.device) for f in res.__dataclass_fields__})

    def _decode_round(self, batch, on_publish):
        if batch.spec_info is None:
            batch.spec_info = DFlashDraftInputV2.create_idle_input(device=self.device)
        draft_input = batch.spec_info
        if batch.seq_lens.is_cuda:  # produced on another stream under overlap
            batch.seq_lens.record_stream(torch.cuda.current_stream(batch.seq_lens.device))
        bs, n, block = len(batch.seq_lens), self.verify_width, self.block_size
        self._round += 1
        prefix = batch.seq_lens

        # 1) draft block → tree (TreeBatch on the device; n slots per request)
        tree = self._draft(batch, draft_input, bs)
        if self.ops_backend == "cpu" and tree.tokens.device.type == "cpu":
            tree = tree.to(self.device)

        # 2) target verify of the tree: n slots per request at req_to_token[row, prefix : prefix + n]
        req_to_token = self.model_runner.req_to_token_pool.req_to_token
        cols = prefix.to(torch.int64).unsqueeze(1) + self._node_offsets
        slots = req_to_token[batch.req_pool_indices.to(torch.int64).unsqueeze(1), cols].to(torch.int64)  # [bs,n]
        host_bound = host_mask_bound(batch.seq_lens_cpu, draft_input, n)
        verify_input = DFlashVerifyInput(
            draft_token=tree.tokens.reshape(-1), positions=tree.positions.reshape(-1), draft_token_num=n,
            custom_mask=full_tree_mask(tree.tree_mask, prefix, host_bound.total),
            capture_hidden_mode=CaptureHiddenMode.FULL)
        batch.out_cache_loc = slots.reshape(-1)
        seq_lens_cpu_backup, seq_lens_sum_backup = batch.seq_lens_cpu, batch.seq_lens_sum
        batch.seq_lens_cpu, batch.seq_lens_sum = host_bound.seq_lens_cpu, host_bound.seq_lens_sum
        verify_forward_batch, _ = verify_input.prepare_for_verify(batch, self.target_worker)
        batch.seq_lens_cpu, batch.seq_lens_sum = seq_lens_cpu_backup, seq_lens_sum_backup
        target_out = self.target_worker.forward_batch_generation(
            batch=None, forward_batch=verify_forward_batch, is_verify=True, skip_attn_backend_init=True)
        logits_output = target_out.logits_output
        sampling_info = batch.sampling_info
        if sampling_info is not None:
            apply_dflash_verify_logits_adjustments(next_token_logits=logits_output.next_token_logits,
                                                   sampling_info=sampling_info, draft_token_num=n)

        # 3) accept: per-node target tokens, bounded tree walk (shared ops)
        logits = logits_output.next_token_logits.view(bs, n, -1)
        result = self._accept(tree, self._node_tokens(logits, sampling_info))
        commit_lens = result.accept_len                       # int32 [bs], incl. the bonus
        new_seq_lens = prefix + commit_lens.to(prefix.dtype)
        if on_publish is not None:
            on_publish(new_seq_lens)

        # 4) KV: accepted node i_k's target KV moves to slot prefix + k (k < len); pads copy slot 0 to itself
        accept_index = result.accept_index.to(torch.int64)  # [bs, block], −1 pad
        live = accept_index >= 0
        src = torch.gather(slots, 1, accept_index.clamp(min=0))
        tgt = slots[:, :block]
        src = torch.where(live, src, torch.zeros_like(src))
        tgt = torch.where(live, tgt, torch.zeros_like(tgt))
        self.model_runner.token_to_kv_pool.move_kv_cache(tgt.reshape(-1), src.reshape(-1))

        # 5) drafter context: DFlash's writer, fed the accepted nodes' captured target hidden states
        hidden = logits_output.hidden_states
        if hidden is None:
            raise RuntimeError("DDTREE verify requires the target's captured hidden states")
        hidden = hidden.view(bs, n, -1)
        acc_hidden = torch.gather(hidden, 1, accept_index.clamp(min=0).unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
        positions = (prefix.to(torch.int64).unsqueeze(1) + self._node_offsets[:block]).reshape(-1)
        block_slots = slots[:, :block].contiguous()
        self._append_target_hidden_to_draft_kv_by_loc(
            target_hidden=acc_hidden.reshape(bs * block, -1), cache_loc=block_slots.reshape(-1),
            cache_loc_2d=block_slots, positions=positions, commit_lens=commit_lens)
        logits_output.hidden_states = None

        out_tokens = result.accepted_tokens.clamp(min=0)  # [bs, block], committed tokens then zeros
        return GenerationBatchResult(
            logits_output=logits_output, next_token_ids=out_tokens.reshape(-1), accept_lens=commit_lens,
            can_run_cuda_graph=target_out.can_run_cuda_graph,
            next_draft_input=self._make_next_draft_input_decode(bonus_tokens=result.bonus, new_seq_lens=new_seq_lens),
            speculative_num_draft_tokens=block, new_seq_lens=new_seq_lens)
