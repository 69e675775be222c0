"""sglang 0.5.23's DFlash V2 worker, as the DDTree round uses it.

What 0.5.23 changed under the round (sgl-0.5.23 `speculative/dflash_worker_v2.py` against 0.5.17's):
- KV slots go through a per-iteration `KVLocPlan` (`model_runner.kv_index_translator.plan`): the draft
  forward binds the plan's first `block` columns in the draft runner's id space, the verify input carries
  the plan, and the drafter's context is written at the plan's draft-space ids. The round plans its whole
  window (the n tree slots) once. Pools whose ids are translated (unified / hybrid / fused-draft pools) are
  refused at start-up: the tree kernel's prefix gather and the KV move index slots as `req_to_token` names them.
- The constructor takes no `ps`; `forward_batch_generation` takes `pp_proxy_tensors`.
- The draft block's input embeddings come from `_resolve_dflash_embedding_module` (a drafter may carry its
  own) times `_noise_embed_scale`; the draft forward runs in the draft's tensor-parallel scope.
- The target's LogitsProcessor defers the verify's vocab gather (`defer_verify_gather`): the round finishes
  it, since every tree node needs full-vocab logits.
- DFlash drafters with a candidate selector (DFlash2), LiLiCorr or Domino head are new: DDTree builds its tree over
  a selector's lattice (`Selector`: SGLang's unary transform and transition scores, the project's top-K and tree)
  and refuses LiLiCorr and Domino heads, as it refuses hybrid (mamba) targets.
- DFlash rehearses its own sampling path at start-up (`prewarm_sampling`); DDTree samples with its own ops,
  so the worker keeps the runner's plain rehearsal.
"""
from __future__ import annotations

import torch

from .dflash_v2 import DFlashV2Adapter
from .symbols import with_shared_symbols
from .need import Needs

# what this release has (releases.CAPABILITIES; read from this text without importing SGLang)
SUPPORTS = {"pipeline_resolution": True, "cpu_overlap": True, "selector": True, "dflash_logprobs": True,
            "kv_loc_plan": True, "deferred_verify_gather": True}
need = Needs("0.5.23")
_WORKER = "sglang.srt.speculative.dflash_worker_v2"
DFlashWorkerV2 = need(_WORKER, "DFlashWorkerV2")
need(_WORKER, "DFlashWorkerV2.__init__", ("self", "server_args", "gpu_id", "nccl_port", "target_worker"))
need(_WORKER, "DFlashWorkerV2.forward_batch_generation",
     ("self", "batch", "on_publish", "grammar_barrier", "pp_proxy_tensors"))
need(_WORKER, "DFlashWorkerV2._append_target_hidden_to_draft_kv_by_loc",
     ("self", "target_hidden", "cache_loc", "positions", "cache_loc_2d", "commit_lens"))
need(_WORKER, "DFlashWorkerV2._make_next_draft_input_decode", ("self", "bonus_tokens", "new_seq_lens"))
need(_WORKER, "DFlashWorkerV2._ensure_draft_block_buffers", ("self", "bs"))
need(_WORKER, "DFlashWorkerV2.prewarm_sampling", ("self",))
_CHOICES = "sglang.srt.arg_groups.choices"
DRAFT_BACKENDS = need(_CHOICES, "DRAFT_ATTENTION_BACKEND_CHOICES")
ADD_DRAFT_BACKENDS = need(_CHOICES, "add_draft_attention_backend_choices")
_FB = "sglang.srt.model_executor.forward_batch_info"
_PLAN = "sglang.srt.mem_cache.kv_loc_plan"
_DRAFT_MODELS = "sglang.srt.models.dflash"
need(_DRAFT_MODELS, "DFlash2DraftModel._transform_unary_logits", ("self", "logits"))
need(_DRAFT_MODELS, "CandidateSelector.build_lattice",
     ("self", "candidate_ids", "unary_logits", "hidden_states", "anchor_token_ids"))


class Selector:
    """A DFlash2 drafter's candidate selector, as the draft head reads it: K candidates a slot, their unary scores
    (SGLang's transform of the target head's logits: output multiplier, softcap) and the K × K transition scores
    (SGLang's `build_lattice`, the formula stock DFLASH walks). The candidates are the draft head's own top-K."""

    def __init__(self, draft_model):
        self.model = draft_model
        self.top_k = int(draft_model.candidate_selector.top_k)

    def unary(self, values: torch.Tensor) -> torch.Tensor:
        return self.model._transform_unary_logits(values)

    def scores(self, ids, unary, hidden, roots) -> torch.Tensor:
        """ids int64 [B, L, K], unary float32 [B, L, K], hidden [B, L, H], roots [B] -> float32 [B, L, K, K]."""
        return self.model.candidate_selector.build_lattice(candidate_ids=ids, unary_logits=unary,
                                                           hidden_states=hidden, anchor_token_ids=roots).float()



@with_shared_symbols(need)
class Adapter(DFlashV2Adapter):
    RELEASE = "0.5.23"
    SUPPORTS = SUPPORTS
    HOST_MEMBERS = DFlashV2Adapter.HOST_MEMBERS + ("prewarm_sampling",)
    HOST_ATTRS = DFlashV2Adapter.HOST_ATTRS + ("selector", "lilicorr", "_is_domino", "_need_mamba_verify_commit",
                                               "draft_parallel_layout", "_noise_embed_scale",
                                               "_target_logits_processor")
    NUM_TOKEN_NON_PADDED = staticmethod(need(_FB, "enable_num_token_non_padded"))
    DRAFT_KV_LENS = ("nxt_kv_lens_cpu", "nxt_kv_lens_sum")
    need("sglang.srt.speculative.dflash_info", "DFlashVerifyInput.__init__", ("self", "kv_loc_plan"))
    need("sglang.srt.speculative.dflash_info", "DFlashVerifyInput.prepare_for_verify",
         ("self", "batch", "target_worker", "defer_metadata_init"))
    need("sglang.srt.managers.scheduler", "GenerationBatchResult.__init__",
         ("routed_experts_output", "indexer_topk_output", "cap_lens"))
    SPEC_LOGPROBS = staticmethod(need("sglang.srt.layers.logprob_processor", "compute_spec_logprobs",
                                      ("batch", "logits_output", "predict", "accept_index")))
    EMBEDDING_MODULE = staticmethod(need(_WORKER, "_resolve_dflash_embedding_module",
                                         ("draft_model", "target_model")))
    UNWRAP_LORA = staticmethod(need("sglang.srt.lora.layers", "unwrap_lora_layer", ("module",)))
    DRAFT_TP_CONTEXT = staticmethod(need("sglang.srt.speculative.spec_utils", "draft_tp_context", ("layout",)))
    need("sglang.srt.mem_cache.kv_index_translator", "KVIndexTranslator.plan",
         ("self", "req_pool_indices", "seq_lens", "seq_lens_cpu", "write_virtual", "read_extent"))
    need(_PLAN, "KVLocPlan.bind", ("self", "batch", "reader", "cols"))
    need(_PLAN, "KVLocPlan.write_ids", ("self", "reader", "cols"))
    need("sglang.srt.layers.logits_processor", "LogitsProcessor.is_deferred_shard", ("self", "logits"))
    need("sglang.srt.layers.logits_processor", "LogitsProcessor.finish_deferred_gather", ("self", "logits"))
    need("sglang.srt.model_executor.model_runner", "ModelRunner.prewarm_sampling", ("self",))

    # --- construction ------------------------------------------------------------------------------
    def lm_head(self):
        head = getattr(self.host.target_worker.model_runner.model, "lm_head", None)
        return None if head is None else self.UNWRAP_LORA(head)

    def check_serving(self) -> None:
        h = self.host
        heads = [name for name, on in (("a LiLiCorr head", h.lilicorr is not None), ("a Domino head", h._is_domino))
                 if on]
        if heads:
            raise ValueError(f"DDTREE drafts with a DFlash or DFlash2 (candidate selector) drafter; this drafter has "
                             f"{' and '.join(heads)}, which only --speculative-algorithm dflash serves")
        if h._need_mamba_verify_commit:
            raise ValueError("DDTREE does not serve hybrid (mamba) targets: their state commit after a verify "
                             "follows a chain, not a tree")
        for name, runner in (("target", self.target_runner()), ("draft", h.draft_model_runner)):
            if runner.kv_index_translator.is_translating:
                raise ValueError(f"DDTREE on sglang 0.5.23 needs KV slot ids that index the pool as req_to_token "
                                 f"names them; the {name} runner's pool translates them (a unified, hybrid or "
                                 f"fused-draft pool), which the tree kernel's prefix gather and the KV move do not")

    def selector(self):
        return None if self.host.selector is None else Selector(self.host.draft_model)

    # --- the round's verbs ---------------------------------------------------------------------------
    @staticmethod
    def req_row(req) -> int:
        return int(req.kv.req_pool_idx)

    @staticmethod
    def held_back_tokens(req) -> set:
        return DFlashV2Adapter.held_back_tokens(req) | set(req.eos_token_ids or ())

    def draft_kv_lens(self, draft_input):
        cpu, total = super().draft_kv_lens(draft_input)
        if cpu is None:
            raise RuntimeError("DDTREE needs host-side KV lengths for the round (batch.seq_lens_cpu or "
                               "DFlashDraftInputV2.nxt_kv_lens_cpu); this scheduler passed neither")
        return cpu, total

    def plan_window(self, batch, draft_input, slots):
        """One plan for the round: the n tree slots per request, read up to n past the prefix."""
        seq_lens_cpu = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else self.draft_kv_lens(draft_input)[0]
        return self.target_runner().kv_index_translator.plan(
            req_pool_indices=batch.req_pool_indices, seq_lens=batch.seq_lens, seq_lens_cpu=seq_lens_cpu,
            write_virtual=slots.reshape(-1), read_extent=int(slots.shape[1]))

    def draft_embeds(self, block_ids):
        h = self.host
        embed = self.UNWRAP_LORA(self.EMBEDDING_MODULE(h.draft_model, h.target_worker.model_runner.model))
        embeds = embed(block_ids)
        return embeds if h._noise_embed_scale == 1.0 else embeds * h._noise_embed_scale

    def draft_forward_extras(self, batch, bs, block):
        non_padded = torch.full((), bs * block, dtype=torch.int32, device=self.device) \
            if self.NUM_TOKEN_NON_PADDED() else None
        return {"num_token_non_padded": non_padded, "global_num_token_non_padded_cpu": bs * block,
                "can_run_decode_cuda_graph": batch.can_run_decode_cuda_graph}

    def run_draft(self, forward_batch, window):
        block = int(forward_batch.input_ids.numel()) // int(forward_batch.batch_size)
        window.bind(forward_batch, self.host.draft_model_runner.kv_index_translator, cols=slice(0, block))
        with torch.inference_mode(), self.DRAFT_TP_CONTEXT(self.host.draft_parallel_layout):
            return self.host.draft_model_runner.forward(forward_batch)

    def verify_input(self, tokens, positions, custom_mask, n, window):
        return self.VERIFY_INPUT(draft_token=tokens.reshape(-1), positions=positions.reshape(-1), draft_token_num=n,
                                 custom_mask=custom_mask, capture_hidden_mode=self.CAPTURE_HIDDEN_MODE.FULL,
                                 kv_loc_plan=window)

    def prepare_verify(self, batch, verify_input):
        # DP attention is refused (args.py), so the metadata is never deferred to the model runner
        forward_batch, _ = verify_input.prepare_for_verify(batch, self.host.target_worker, defer_metadata_init=False)
        return forward_batch

    def finish_verify_logits(self, logits_output):
        lp = self.host._target_logits_processor
        if lp is not None and lp.is_deferred_shard(logits_output.next_token_logits):
            logits_output.next_token_logits = lp.finish_deferred_gather(logits_output.next_token_logits)

    def draft_context_slots(self, plan, window):
        bs, block = plan.kv_dst.shape
        ids = window.write_ids(self.host.draft_model_runner.kv_index_translator, cols=slice(0, block))
        return ids.view(bs, block)

    def spec_logprobs(self, batch, logits_output, node_tokens, accept_rows):
        self.SPEC_LOGPROBS(batch, logits_output, node_tokens, accept_index=accept_rows)

    def result_extras(self, target_out):
        return {"routed_experts_output": target_out.routed_experts_output,
                "indexer_topk_output": target_out.indexer_topk_output}


class WorkerBase(DFlashWorkerV2):
    """DFlashWorkerV2 with the constructor and forward entry the DDTree worker calls on every release."""

    ADAPTER = Adapter

    def __init__(self, server_args, gpu_id, nccl_port, target_worker, ps=None, **kwargs):
        del ps  # 0.5.23 reads the parallel state from its runtime context
        if str(target_worker.model_runner.device) == "cpu" and "torch_native" not in DRAFT_BACKENDS:
            # DFlash's draft worker builds only a listed backend (else FlashInfer, CUDA-only); on the CPU the
            # drafter runs on torch_native, its TARGET_VERIFY served by DDTree's cascade (decode_round.py)
            ADD_DRAFT_BACKENDS(["torch_native"])
        super().__init__(server_args=server_args, gpu_id=gpu_id, nccl_port=nccl_port, target_worker=target_worker,
                         **kwargs)

    def dflash_forward(self, batch, on_publish, grammar_barrier, pp_proxy_tensors):
        """DFLASH's own round (prefill, idle)."""
        return DFlashWorkerV2.forward_batch_generation(self, batch, on_publish=on_publish,
                                                       grammar_barrier=grammar_barrier,
                                                       pp_proxy_tensors=pp_proxy_tensors)

    def prewarm_sampling(self):
        """DFlash rehearses its own chain sampler here; DDTree's sampling is its own (round.RoundOps)."""
        return self.model_runner.prewarm_sampling()
