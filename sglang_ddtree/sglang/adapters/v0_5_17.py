"""sglang 0.5.17's DFlash V2 worker, as the DDTree round uses it (the release served end to end on the H200).

The round's verbs are dflash_v2.DFlashV2Adapter's as written; this module names the 0.5.17 symbols, the
constructor, whose `ps: ParallelState` argument 0.5.23 dropped, and a prefill for batches with logprobs
(0.5.17's DFLASH refuses them; the steps are its own).
"""
from __future__ import annotations

import torch

from .dflash_v2 import DFlashV2Adapter
from .symbols import with_shared_symbols
from .need import Needs

# what this release has (releases.CAPABILITIES; read from this text without importing SGLang)
SUPPORTS = {"pipeline_resolution": False, "cpu_overlap": False, "selector": False, "dflash_logprobs": False,
            "kv_loc_plan": False, "deferred_verify_gather": False}
need = Needs("0.5.17")
_WORKER = "sglang.srt.speculative.dflash_worker_v2"
DFlashWorkerV2 = need(_WORKER, "DFlashWorkerV2")
need(_WORKER, "DFlashWorkerV2.__init__", ("self", "server_args", "gpu_id", "ps", "nccl_port", "target_worker"))
need(_WORKER, "DFlashWorkerV2.forward_batch_generation", ("self", "batch", "on_publish", "grammar_barrier"))
need(_WORKER, "DFlashWorkerV2._append_target_hidden_to_draft_kv_by_loc",
     ("self", "target_hidden", "cache_loc", "positions", "cache_loc_2d", "commit_lens"))
need(_WORKER, "DFlashWorkerV2._make_next_draft_input_decode", ("self", "bonus_tokens", "new_seq_lens"))
need(_WORKER, "DFlashWorkerV2._ensure_draft_block_buffers", ("self", "bs"))
need(_WORKER, "DFlashWorkerV2._make_next_draft_input_prefill", ("self", "bonus_tokens", "seq_lens"))
_FB = "sglang.srt.model_executor.forward_batch_info"
_COMMON = "sglang.srt.speculative.draft_worker_common"


@with_shared_symbols(need)
class Adapter(DFlashV2Adapter):
    RELEASE = "0.5.17"
    SUPPORTS = SUPPORTS
    HOST_MEMBERS = DFlashV2Adapter.HOST_MEMBERS + ("_make_next_draft_input_prefill",)
    DRAFT_KV_LENS = ("reserved_seq_lens_cpu", "reserved_seq_lens_sum")
    need("sglang.srt.speculative.dflash_info", "DFlashVerifyInput.prepare_for_verify",
         ("self", "batch", "target_worker"))
    need("sglang.srt.managers.scheduler", "GenerationBatchResult.__init__", ("cap_lens",))
    SPEC_LOGPROBS = staticmethod(need("sglang.srt.layers.logprob_processor", "compute_spec_v2_logprobs",
                                      ("batch", "logits_output", "predict", "accept_index", "speculative_num_steps")))
    COMPUTE_POSITION = staticmethod(need(_FB, "compute_position", ("attn_backend", "extend_prefix_lens",
                                                                    "extend_seq_lens", "extend_seq_lens_sum")))

    def spec_logprobs(self, batch, logits_output, node_tokens, accept_rows):
        self.SPEC_LOGPROBS(batch, logits_output, node_tokens, accept_rows, int(accept_rows.shape[1]) - 1)


class WorkerBase(DFlashWorkerV2):
    """DFlashWorkerV2 with the constructor and forward entry the DDTree worker calls on every release."""

    ADAPTER = Adapter

    def __init__(self, server_args, gpu_id, nccl_port, target_worker, ps=None, **kwargs):
        common = need.module(_COMMON)
        if str(target_worker.model_runner.device) == "cpu" and "torch_native" not in common._SUPPORTED_DRAFT_BACKENDS:
            # DFlash's draft worker builds only a listed backend (else FlashInfer, CUDA-only); on the CPU the
            # drafter runs on torch_native, its TARGET_VERIFY served by DDTree's cascade (decode_round.py)
            common._SUPPORTED_DRAFT_BACKENDS = (*common._SUPPORTED_DRAFT_BACKENDS, "torch_native")
        super().__init__(server_args=server_args, gpu_id=gpu_id, ps=ps, nccl_port=nccl_port,
                         target_worker=target_worker, **kwargs)

    def dflash_forward(self, batch, on_publish, grammar_barrier, pp_proxy_tensors):
        """DFLASH's own round (prefill, idle): 0.5.17 takes no pipeline proxy tensors. Its DFLASH refuses every
        batch with return_logprob (0.5.23's serves them), so a prefill with logprobs runs its steps here."""
        if getattr(batch, "return_logprob", False) and (batch.forward_mode.is_extend() or batch.is_extend_in_batch):
            return self._prefill(batch, on_publish)
        return DFlashWorkerV2.forward_batch_generation(self, batch, on_publish=on_publish,
                                                       grammar_barrier=grammar_barrier)

    def _prefill(self, batch, on_publish):
        """DFlashWorkerV2.forward_batch_generation's prefill, step for step: the target's prefill (its own
        logprobs included) with the drafter's layers captured, the prompt's hidden states into the draft KV."""
        a = self.ADAPTER
        out = self.target_worker.forward_batch_generation(batch, capture_hidden_mode=a.CAPTURE_HIDDEN_MODE.FULL)
        out.new_seq_lens = batch.seq_lens
        if on_publish is not None:
            on_publish(out.new_seq_lens)
        logits_output = out.logits_output
        if logits_output.hidden_states is None:
            raise RuntimeError("DDTREE needs the target's captured hidden states at prefill (DFlash's layers to capture)")
        device = out.next_token_ids.device
        ctx_lens = torch.tensor(batch.extend_lens, dtype=torch.int32, device=device)
        positions, _ = a.COMPUTE_POSITION(self.model_runner.server_args.attention_backend,
                                          torch.tensor(batch.prefix_lens, dtype=torch.int32, device=device), ctx_lens,
                                          int(sum(batch.extend_lens)))
        self._append_target_hidden_to_draft_kv_by_loc(target_hidden=logits_output.hidden_states,
                                                      cache_loc=batch.out_cache_loc, positions=positions)
        logits_output.hidden_states = None
        out.next_draft_input = self._make_next_draft_input_prefill(bonus_tokens=out.next_token_ids,
                                                                   seq_lens=batch.seq_lens)
        return out
