"""DDTreeWorkerV2: SGLang's DFlash V2 (overlap) worker with DDTree's decode round.

Prefill, idle rounds and the draft KV cache are DFlashWorkerV2's. The decode round is replaced:

  draft block (DFlash drafter, [bonus, MASK…]) → lm_head → top-k → tree      -- one draft CUDA graph
  → target verify of the n = budget + 1 tree nodes at slots prefix..prefix+n  -- the tree kernel
        (tree_attention.py; SGLang's FULL_MASK path only as the fallback, see `verify_attention`)
  → per-node target tokens → RoundOps.commit: walk + commit plan              -- one op (round.py)
  → the plan's KV moves (one all-layer copy), the accepted nodes' hidden states → drafter context

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

from sglang_ddtree.round import RoundOps

from . import compat, hooks, tree_attention
from .args import Knobs, depth_temperatures
from .draft_head import DraftTreeHead
from .verify_input import full_tree_mask, host_mask_bound

logger = logging.getLogger("sglang_ddtree")

# DFlashWorkerV2 members this worker calls or overrides (the conformance test checks each exists).
DFLASH_MEMBERS_USED = (
    "__init__", "forward_batch_generation", "init_cuda_graphs", "init_attention_backends",
    "_maybe_build_draft_sampler", "_ensure_draft_block_buffers", "_append_target_hidden_to_draft_kv_by_loc",
    "_make_next_draft_input_decode", "_validate_phase1_sampling_support", "target_worker",
)
# ... and the instance attributes it reads, all set in DFlashWorkerV2.__init__.
DFLASH_INSTANCE_ATTRS = (
    "draft_model_runner", "draft_model", "model_runner", "device", "_mask_token_id", "_draft_block_ids_buf",
    "_draft_block_positions_buf", "_draft_verify_out_cache_loc_buf", "_draft_seq_lens_cpu_buf",
    "_block_pos_offsets", "_draft_block_spec_info",
)
_PARENT_FORWARD_PARAMS = tuple(inspect.signature(DFlashWorkerV2.forward_batch_generation).parameters)


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
        self.round = RoundOps(self.device, self.knobs.ops_backend)
        self._node_offsets = torch.arange(self.verify_width, device=self.device, dtype=torch.int64)
        self._round = 0
        self._seed = int(getattr(server_args, "random_seed", 0) or 0)
        self._max_bs = compat.max_batch_size(server_args)
        self._depth_temperature = depth_temperatures(self.knobs, server_args.speculative_draft_model_path,
                                                     self.block_size - 1)
        self._head = self._make_head()
        self.tree_attn = None  # set in init_attention_backends, once the target's backend exists
        self._warned_sampling = False
        hooks.install_eager_embeds_dtype_fix()
        logger.info("DDTREE worker: budget=%d verify width=%d drafter block=%d k=%d ops=%s tree-in-graph=%s "
                    "anchor=%s calibration=%s", self.budget, self.verify_width, self.block_size, self._head.k,
                    self.round.backend, self._head.tree_in_graph, self.knobs.anchor or "none",
                    "off" if self._depth_temperature is None else
                    "T=" + ",".join(f"{t:.2f}" for t in self._depth_temperature))

    # --- construction -----------------------------------------------------------------------------
    def _make_head(self) -> DraftTreeHead:
        lm_head = getattr(self.target_worker.model_runner.model, "lm_head", None)
        if lm_head is None or not hasattr(lm_head, "weight") or not torch.is_floating_point(lm_head.weight):
            raise RuntimeError("DDTREE needs the target's lm_head weight (unquantized) for the draft head")
        shard = getattr(lm_head, "shard_indices", None)
        num_org = int(shard.num_org_elements) if shard is not None else int(lm_head.weight.shape[0])
        return DraftTreeHead(weight=lm_head.weight, num_org=num_org, block_size=self.block_size,
                             budget=self.budget, topk=self.knobs.topk, max_bs=self._max_bs, ops=self.round,
                             tree_in_graph=self.knobs.draft_graph_head, anchor=self.knobs.anchor,
                             depth_temperature=self._depth_temperature)

    def init_attention_backends(self):
        """The scheduler calls this after the target's attention backend exists, before any graph capture:
        the one place the verify-attention path is chosen (tree kernel, or SGLang's FULL_MASK fallback)."""
        super().init_attention_backends()
        runner = self.target_worker.model_runner
        why = tree_attention.unsupported(runner) if self.round.backend == "cuda" else "the CUDA ops are unavailable"
        choice = self.knobs.verify_attention
        if choice == "tree" and why is not None:
            raise ValueError(f"SGLANG_DDTREE_VERIFY_ATTENTION=tree, but the tree kernel cannot serve {why}")
        if choice == "full_mask" or why is not None:
            page = int(getattr(runner, "page_size", 1) or 1)
            if page != 1:
                raise ValueError(f"DDTREE: --page-size {page} needs the tree kernel, which cannot serve "
                                 f"{why or 'this server (SGLANG_DDTREE_VERIFY_ATTENTION=full_mask)'}; "
                                 f"SGLang's FULL_MASK verify assumes page size 1. Fix: use --page-size 1")
            if why is not None:
                logger.warning("sglang-ddtree: tree verify through SGLang's FULL_MASK path (slower) because of %s", why)
            hooks.install_verify_mask_policy()
            return
        self.tree_attn = tree_attention.TreeVerifyAttention(runner, n=self.verify_width, max_bs=self._max_bs)
        if self._head.static_tree is not None:  # the draft graph writes the bitsets straight where verify reads
            self.tree_attn.mask_bits = self._head.static_tree["mask_bits"]
        self.tree_attn.install()

    def _maybe_build_draft_sampler(self):
        """Called by DFlashWorkerV2.init_cuda_graphs before the draft graphs are captured."""
        if self._head.tree_in_graph:
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
        """DFlash's draft forward over [bonus, MASK…] (block positions prefix..prefix+block−1) → the tree."""
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
        seq_lens_cpu = self._draft_seq_lens_cpu_buf[:bs]
        if batch.seq_lens_cpu is not None:
            seq_lens_cpu.copy_(batch.seq_lens_cpu)
            seq_lens_cpu.add_(block)
            seq_lens_sum = int(seq_lens_cpu.sum())
        else:
            lens_cpu, lens_sum = compat.draft_kv_lens(draft_input)
            seq_lens_cpu.copy_(lens_cpu)
            seq_lens_sum = int(lens_sum)
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, input_ids=block_ids.flatten(),
            req_pool_indices=batch.req_pool_indices, seq_lens=prefix, out_cache_loc=cache_loc_2d.reshape(-1),
            seq_lens_sum=seq_lens_sum, seq_lens_cpu=seq_lens_cpu, positions=positions_2d.reshape(-1),
            input_embeds=embeds.view(-1, embeds.shape[-1]), spec_algorithm=SpeculativeAlgorithm.DFLASH,
            spec_info=self._draft_block_spec_info, capture_hidden_mode=CaptureHiddenMode.NULL)
        with torch.inference_mode():
            out = self.draft_model_runner.forward(forward_batch)
        if out.can_run_graph and self._head.graph_ready:
            return self._head.from_graph(bs)
        hidden = out.logits_output.hidden_states
        if hidden is None:
            raise RuntimeError("DDTREE: the DFlash drafter returned no hidden states")
        return self._head.build(hidden, bs, block_ids[:, 0], prefix)

    def _node_tokens(self, logits, sampling_info) -> torch.Tensor:
        """Per-node target tokens [bs, n]: argmax for greedy requests, an exact per-node sample otherwise."""
        if sampling_info is None or sampling_info.is_all_greedy:
            return self.round.greedy_tokens(logits)
        if not self._warned_sampling:
            self._warned_sampling = True
            logger.warning("DDTREE samples with temperature only (top-p / top-k < vocab / min-p are ignored "
                           "at T > 0 in this release)")
        bs = logits.shape[0]
        temps = sampling_info.temperatures.view(-1, 1, 1).float().clamp(min=1e-6)
        seed = sampling_info.sampling_seed if getattr(sampling_info, "sampling_seed", None) is not None \
            else torch.full((bs,), self._seed, dtype=torch.int64, device=logits.device)
        step = torch.full((bs,), self._round, dtype=torch.int64, device=logits.device)
        sampled = self.round.sample_tokens(logits.float() / temps, seed.view(-1).expand(bs), step)
        greedy = self.round.greedy_tokens(logits)
        return torch.where(sampling_info.top_ks.view(-1, 1) <= 1, greedy, sampled)

    def _decode_round(self, batch, on_publish):
        if batch.spec_info is None:
            batch.spec_info = DFlashDraftInputV2.create_idle_input(device=self.device)
        draft_input = batch.spec_info
        if batch.seq_lens.is_cuda:  # produced on another stream under overlap
            batch.seq_lens.record_stream(torch.cuda.current_stream(batch.seq_lens.device))
        bs, n = len(batch.seq_lens), self.verify_width
        self._round += 1
        prefix = batch.seq_lens

        # 1) the slots the verify writes (read from req_to_token before any graph of this round), draft → tree
        req_to_token = self.model_runner.req_to_token_pool.req_to_token
        slots = req_to_token[batch.req_pool_indices.unsqueeze(1), prefix.unsqueeze(1) + self._node_offsets]
        slots = slots.to(torch.int64)  # [bs, n]
        tree = self._draft(batch, draft_input, bs)

        # 2) target verify of the tree: n slots per request at req_to_token[row, prefix : prefix + n]
        host_bound = host_mask_bound(batch.seq_lens_cpu, draft_input, n)
        if self.tree_attn is not None:
            self.tree_attn.load_mask(tree.mask_bits)
            custom_mask = None
        else:
            custom_mask = full_tree_mask(tree.tree_mask, prefix, host_bound.total)
        verify_input = DFlashVerifyInput(draft_token=tree.tokens.reshape(-1), positions=tree.positions.reshape(-1),
                                         draft_token_num=n, custom_mask=custom_mask,
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

        # 3) accept + commit plan (round.py): one op
        logits = logits_output.next_token_logits.view(bs, n, -1)
        plan = self.round.commit(tree, self._node_tokens(logits, sampling_info), prefix, slots)
        if on_publish is not None:
            on_publish(plan.new_seq_lens)

        # 4) apply it: accepted KV to slots prefix..prefix+len (one all-layer copy), drafter context
        self.model_runner.token_to_kv_pool.move_kv_cache(plan.kv_dst.reshape(-1), plan.kv_src.reshape(-1))
        hidden = logits_output.hidden_states
        if hidden is None:
            raise RuntimeError("DDTREE verify requires the target's captured hidden states")
        self._append_target_hidden_to_draft_kv_by_loc(
            target_hidden=hidden.index_select(0, plan.hidden_index.reshape(-1)),
            cache_loc=plan.kv_dst.reshape(-1), cache_loc_2d=plan.kv_dst, positions=plan.positions.reshape(-1),
            commit_lens=plan.commit_lens)
        logits_output.hidden_states = None

        return GenerationBatchResult(
            logits_output=logits_output, next_token_ids=plan.tokens.reshape(-1), accept_lens=plan.commit_lens,
            can_run_cuda_graph=target_out.can_run_cuda_graph,
            next_draft_input=self._make_next_draft_input_decode(bonus_tokens=plan.bonus,
                                                                new_seq_lens=plan.new_seq_lens),
            speculative_num_draft_tokens=self.block_size, new_seq_lens=plan.new_seq_lens)
