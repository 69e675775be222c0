"""The verbs both releases' adapters share, written once against the symbols each adapter resolves.

`DFlashV2Adapter` is bound to one DFlash V2 worker (`host`: the DDTree worker itself, a DFlashWorkerV2) and
is everything the decode round (decode_round.py) asks of SGLang. It imports no SGLang: the class attributes
in CAPITALS are filled by the release's adapter module through `Needs` (those both name alike once, by
symbols.with_shared_symbols), and what differs between releases is overridden there. `HOST_MEMBERS` / `HOST_ATTRS` list the DFlashWorkerV2 methods and the instance
attributes (set in DFlashWorkerV2.__init__) that the adapters read; the conformance test checks the lists
against every `host.<name>` in the adapters and against the installed release.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import statistics

import torch

from sglang_ddtree.penalties import PenaltyRequest
from sglang_ddtree.sampling import NodeLaw

from . import hooks


def law_of(info):
    """The NodeLaw (sampling.py) of SGLang's per-request sampling tensors (a SamplingBatchInfo)."""
    return NodeLaw(info.temperatures.view(-1), info.top_ks.view(-1), info.top_ps.view(-1), info.min_ps.view(-1),
                   filtered=bool(info.need_top_p_sampling or info.need_top_k_sampling or info.need_min_p_sampling))


@dataclasses.dataclass
class RoundBatch:
    """One decode call's ScheduleBatch as the round reads it (DFlashV2Adapter.open_round): tensors and flags, so
    decode_round.py reads no SGLang object; the batch itself only goes back to the adapter's verbs."""

    draft_input: object                 # the batch's DFlashDraftInputV2 (handed back to the verbs)
    seq_lens: torch.Tensor              # [bs] committed prefix lengths on the device
    seq_lens_cpu: torch.Tensor | None   # the scheduler's host copy, None where it keeps none
    host_lens: torch.Tensor | None      # host lengths: seq_lens_cpu, else the draft input's next-round lengths
    req_pool_indices: torch.Tensor      # [bs] each request's req_to_token row
    has_grammar: bool                   # a request of the batch has a grammar
    return_logprob: bool                # a request of the batch asks for log-probs

    @property
    def bs(self) -> int:
        return len(self.seq_lens)


@dataclasses.dataclass(frozen=True)
class TargetHead:
    """The target's lm_head as the draft head reads it (DFlashV2Adapter.target_head)."""

    weight: torch.Tensor  # [rows, H], unquantized
    num_org: int          # rows of the original vocabulary this rank holds
    vocab: int            # the original vocabulary (the verify's full-vocabulary logits)
    vocab_start: int      # this rank's first id of it (tensor parallelism)


ROWS_PER_LAUNCH = 256  # the copy kernel's row count (one compiled shape), as SGLang's MHA pool sizes its chunks


def all_layer_rows(pool):
    """(per-layer base pointers uint64 [L], row bytes int64 [L], the copy kernel's config) of a plain MLA KV pool
    (one latent row per slot in each layer's contiguous buffer), else None (the pool's own move serves)."""
    if type(pool).__name__ != "MLATokenToKVPool":
        return None
    bufs = list(pool.kv_buffer)
    row = bufs[0][0].numel() * bufs[0].element_size()
    if row % 16 or any(not b.is_contiguous() or b[0].numel() * b.element_size() != row or b.device != bufs[0].device
                       for b in bufs):
        return None
    tile = 128  # bytes a program copies of each row (SGLang's MHA pool takes 128 below 4 KB rows)
    ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64, device=bufs[0].device)
    strides = torch.full((len(bufs),), row, dtype=torch.int64, device=bufs[0].device)
    return ptrs, strides, {"bytes_per_tile": tile, "byte_tiles": -(-row // tile), "num_warps": 4,
                           "num_locs_upper": ROWS_PER_LAUNCH}


def move_rows(copy_all_layers, rows, dst: torch.Tensor, src: torch.Tensor) -> None:
    """Row src[i] -> row dst[i] in every layer, ROWS_PER_LAUNCH rows a launch in order. Each launch reads all of
    its rows before writing any; across launches the order is what makes it safe: the round compacts each
    request's accepted nodes forward (dst[k] = the request's k-th tree slot, src[k] = the slot of its k-th
    accepted node, a node at index >= k; pads copy a slot onto itself), so no launch reads a row an earlier
    launch wrote (kernels/tree_walk.h, commit_column)."""
    ptrs, strides, cfg = rows
    n = int(dst.numel())
    for start in range(0, n, ROWS_PER_LAUNCH):
        count = min(ROWS_PER_LAUNCH, n - start)
        copy_all_layers(ptrs, strides, dst[start:start + count], src[start:start + count], count,
                        ROWS_PER_LAUNCH, cfg)


class DFlashV2Adapter:
    RELEASE = ""
    SUPPORTS: dict = {}  # the release module's SUPPORTS (releases.CAPABILITIES: what the release has)
    # DFlashWorkerV2 methods / properties the adapters call, and those the DDTree worker overrides
    HOST_MEMBERS = ("__init__", "forward_batch_generation", "init_cuda_graphs", "init_attention_backends",
                    "_maybe_build_draft_sampler", "_ensure_draft_block_buffers",
                    "_append_target_hidden_to_draft_kv_by_loc", "_make_next_draft_input_decode", "target_worker")
    # instance attributes the adapters read or retarget, all set in DFlashWorkerV2.__init__
    HOST_ATTRS = ("draft_model_runner", "draft_model", "model_runner", "device", "block_size",
                  "speculative_num_draft_tokens", "_mask_token_id", "_draft_block_ids_buf",
                  "_draft_block_positions_buf", "_draft_verify_out_cache_loc_buf", "_draft_seq_lens_cpu_buf",
                  "_block_pos_offsets", "_draft_block_spec_info")
    # filled by the release module (Needs): SGLang classes and functions
    FORWARD_BATCH = FORWARD_MODE = CAPTURE_HIDDEN_MODE = SPECULATIVE_ALGORITHM = None
    DRAFT_INPUT = VERIFY_INPUT = BATCH_RESULT = None
    RADIX_ATTENTION = None  # the attention module SGLang's backends serve (the drafter's layers are read from it)
    PREPARE_DRAFT_BLOCK = BLOCK_POS_OFFSETS = BLOCK_SPEC_INFO = None
    DRAFT_KV_LENS = ("", "")  # DFlashDraftInputV2's host-side next-round KV lengths (cpu [bs], int sum)
    DECODE_GRAPH_RUNNER = FULL_GRAPH_BACKEND = None  # verify graphs at more widths; timing their replays
    COPY_ALL_LAYERS = None  # SGLang's KV-row copy over every layer in one launch (its MHA pool's move)
    GRAMMAR_TREE = BUILD_GRAMMAR_MASK = None  # the verify tree's grammar bitmask (spec_utils), as EAGLE's trees use
    CUSTOM_LOGIT_PROCESSOR = None  # sampler.apply_custom_logit_processor
    # SPEC_LOGPROBS: the release's spec-worker log-probs of committed tokens; each release module defines
    # `spec_logprobs(batch, logits_output, node_tokens [bs·n], accept_rows [bs, W])` around it (return_logprob)
    SPEC_LOGPROBS = None
    TP_GROUP = None  # parallel_state.get_tp_group (the round's agreement across ranks, sglang/tp.py)
    _DFLASH_UTILS = _MODEL_RUNNER = None  # what hooks.py patches: the dflash_utils module, ModelRunner
    SAMPLER = None  # the target's sampler class, whose instance hooks.py wraps for a seeded first token

    def __init__(self, host):
        self.host = host
        self._rows = None  # all_layer_rows of the target pool, made at the first move (False: per layer)

    @classmethod
    def supports(cls, capability: str) -> bool:
        """Whether this adapter's release has `capability` (releases.CAPABILITIES)."""
        return cls.SUPPORTS[capability]

    # --- construction ------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return torch.device(self.host.device)

    def target_runner(self):
        return self.host.target_worker.model_runner

    def draft_runner(self):
        return self.host.draft_model_runner

    def draft_layers_unsupported(self) -> str | None:
        """Why the drafter's attention layers are not all full bidirectional attention (DFlash's default: every
        block query sees the whole context and the whole block), else None: SGLang's RadixAttention modules of the
        draft model, as its attention backends read them (attention type, window, cross attention, logit cap)."""
        layers = [m for m in self.host.draft_model.modules() if isinstance(m, self.RADIX_ATTENTION)]
        if not layers:
            return "the drafter has no attention layer SGLang's backends serve (RadixAttention)"
        for m in layers:
            kind = getattr(getattr(m, "attn_type", None), "name", None)
            if kind != "ENCODER_ONLY" or getattr(m, "is_cross_attention", False):
                return f"draft layer {m.layer_id} is {str(kind).lower()} attention (causal), not bidirectional"
            if int(getattr(m, "sliding_window_size", -1) or -1) > -1:
                return f"draft layer {m.layer_id} attends a sliding window of {m.sliding_window_size}"
            if getattr(m, "logit_cap", 0):
                return f"draft layer {m.layer_id} caps its logits"
        return None

    def lm_head(self):
        return getattr(self.host.target_worker.model_runner.model, "lm_head", None)

    def target_head(self) -> TargetHead | None:
        """The target's lm_head weight and vocabulary layout, None where it has no unquantized floating weight."""
        lm_head = self.lm_head()
        if lm_head is None or not hasattr(lm_head, "weight") or not torch.is_floating_point(lm_head.weight):
            return None
        shard = getattr(lm_head, "shard_indices", None)
        num_org = int(shard.num_org_elements) if shard is not None else int(lm_head.weight.shape[0])
        return TargetHead(lm_head.weight, num_org, int(getattr(lm_head, "org_vocab_size", num_org)),
                          int(shard.org_vocab_start_index) if shard is not None else 0)

    def page_size(self) -> int:
        """The target runner's KV page size."""
        return int(getattr(self.target_runner(), "page_size", 1) or 1)

    def add_draft_capture_hook(self, hook) -> None:
        """`hook(hidden_states, input_ids, seq_lens, num_tokens)` at the tail of every draft CUDA-graph capture (the
        draft runner calls it inside the capture with its output and forward batch)."""
        def tail(runner, out, forward_batch, num_tokens):
            del runner
            hook(out.hidden_states, forward_batch.input_ids, forward_batch.seq_lens, num_tokens)

        self.host.draft_model_runner.capture_tail_hooks.append(tail)

    @staticmethod
    def batch_kind(batch) -> str:
        """'idle', 'extend' (a prefill in the batch) or 'decode': which forward the worker runs."""
        mode = batch.forward_mode
        if mode.is_idle():
            return "idle"
        return "extend" if mode.is_extend() or batch.is_extend_in_batch else "decode"

    def tp_group(self):
        """SGLang's group coordinator of this worker's tensor-parallel ranks (asked for at --tp-size > 1 only)."""
        return self.TP_GROUP()

    def use_block_size(self, block: int) -> None:
        """DFlash sized its draft block from --speculative-num-draft-tokens (DDTree's verify width n); the
        draft runner, the prefill/idle paths and the output stride use the drafter's block instead."""
        h = self.host
        h.block_size = block
        h.speculative_num_draft_tokens = block  # output stride: accepted path <= block
        h._block_pos_offsets = self.BLOCK_POS_OFFSETS(length=block, device=self.device)
        h._draft_block_spec_info = self.BLOCK_SPEC_INFO(draft_token_num=block, device=self.device)
        if hasattr(h.draft_model, "set_block_size"):
            h.draft_model.set_block_size(block)

    def check_serving(self) -> None:
        """Refuse (loudly, at start-up) what the round cannot serve on this release; nothing on 0.5.17."""

    def selector(self):
        """The drafter's candidate selector as the draft head uses it (a DFlash2 drafter: top_k, unary(values),
        scores(ids, unary, hidden, roots)), or None: a plain DFlash drafter (0.5.17 has no other kind)."""
        return None

    # --- the round's verbs ---------------------------------------------------------------------------
    def idle_draft_input(self):
        return self.DRAFT_INPUT.create_idle_input(device=self.device)

    def open_round(self, batch) -> RoundBatch:
        """The decode call's batch as the round reads it: an idle draft input where it has none, its lengths made
        safe to read on this stream (produced on another under overlap), the host lengths the round sizes with."""
        if batch.spec_info is None:
            batch.spec_info = self.idle_draft_input()
        if batch.seq_lens.is_cuda:
            batch.seq_lens.record_stream(torch.cuda.current_stream(batch.seq_lens.device))
        host = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else self.draft_kv_lens(batch.spec_info)[0]
        return RoundBatch(batch.spec_info, batch.seq_lens, batch.seq_lens_cpu, host, batch.req_pool_indices,
                          bool(getattr(batch, "has_grammar", False)), bool(getattr(batch, "return_logprob", False)))

    def draft_kv_lens(self, draft_input):
        """(int64 cpu [bs], int sum): the draft input's next-round KV lengths (host side)."""
        cpu, total = self.DRAFT_KV_LENS
        return getattr(draft_input, cpu), getattr(draft_input, total)

    def req_to_token(self) -> torch.Tensor:
        return self.host.model_runner.req_to_token_pool.req_to_token

    def plan_window(self, batch, draft_input, slots: torch.Tensor):
        """The round's KV write window as the release plans it (None where releases plan nothing)."""
        return None

    def prepare_draft_block(self, batch, draft_input, slots: torch.Tensor, bs: int):
        """[bonus, MASK…] ids, positions prefix.., and the block's KV slots, into DFlash's draft buffers.

        On CUDA, DFlash's prepare kernel (as DFLASH runs it); elsewhere the same three tensors from the
        round's slots (SGLang has no CPU path for it).
        """
        h = self.host
        h._ensure_draft_block_buffers(bs)
        block_ids = h._draft_block_ids_buf[:bs]
        positions_2d = h._draft_block_positions_buf[:bs]
        cache_loc_2d = h._draft_verify_out_cache_loc_buf[:bs]
        req_to_token = self.req_to_token()
        if req_to_token.is_cuda:
            self.PREPARE_DRAFT_BLOCK(
                bonus_tokens=draft_input.bonus_tokens.view(-1), prefix_lens=batch.seq_lens.view(-1),
                req_pool_indices=batch.req_pool_indices.view(-1), req_to_token=req_to_token,
                block_ids_out=block_ids, positions_out=positions_2d, cache_loc_out=cache_loc_2d,
                mask_token_id=int(h._mask_token_id))
        else:
            block = block_ids.shape[1]
            block_ids.fill_(int(h._mask_token_id))
            block_ids[:, 0].copy_(draft_input.bonus_tokens.view(-1))
            torch.add(batch.seq_lens.view(-1, 1).to(positions_2d.dtype), h._block_pos_offsets, out=positions_2d)
            cache_loc_2d.copy_(slots[:, :block])
        return block_ids, positions_2d, cache_loc_2d

    def draft_embeds(self, block_ids: torch.Tensor) -> torch.Tensor:
        return self.host.target_worker.model_runner.model.get_input_embeddings()(block_ids)

    def draft_seq_lens_cpu(self, batch, draft_input, bs: int, block: int):
        """Host upper bound of the draft forward's KV lengths (committed prefix + one block), no device read."""
        seq_lens_cpu = self.host._draft_seq_lens_cpu_buf[:bs]
        if batch.seq_lens_cpu is not None:
            seq_lens_cpu.copy_(batch.seq_lens_cpu)
            seq_lens_cpu.add_(block)
            return seq_lens_cpu, int(seq_lens_cpu.sum())
        lens_cpu, lens_sum = self.draft_kv_lens(draft_input)
        seq_lens_cpu.copy_(lens_cpu)
        return seq_lens_cpu, int(lens_sum)

    def draft_forward_batch(self, batch, block_ids, positions_2d, cache_loc_2d, embeds, seq_lens_cpu,
                            seq_lens_sum: int, bs: int):
        return self.FORWARD_BATCH(
            forward_mode=self.FORWARD_MODE.TARGET_VERIFY, batch_size=bs, input_ids=block_ids.flatten(),
            req_pool_indices=batch.req_pool_indices, seq_lens=batch.seq_lens, out_cache_loc=cache_loc_2d.reshape(-1),
            seq_lens_sum=seq_lens_sum, seq_lens_cpu=seq_lens_cpu, positions=positions_2d.reshape(-1),
            input_embeds=embeds.view(-1, embeds.shape[-1]), spec_algorithm=self.SPECULATIVE_ALGORITHM.DFLASH,
            spec_info=self.host._draft_block_spec_info, capture_hidden_mode=self.CAPTURE_HIDDEN_MODE.NULL,
            **self.draft_forward_extras(batch, bs, block_ids.shape[1]))

    def draft_forward_extras(self, batch, bs: int, block: int) -> dict:
        return {}

    def draft_forward(self, batch, draft_input, slots, window, bs: int):
        """DFlash's draft forward over [bonus, MASK…] -> (the drafter's hidden states, None where it returned none;
        whether the draft CUDA graph ran; the block's first ids = the roots)."""
        block_ids, positions_2d, cache_loc_2d = self.prepare_draft_block(batch, draft_input, slots, bs)
        embeds = self.draft_embeds(block_ids)
        seq_lens_cpu, seq_lens_sum = self.draft_seq_lens_cpu(batch, draft_input, bs, block_ids.shape[1])
        forward_batch = self.draft_forward_batch(batch, block_ids, positions_2d, cache_loc_2d, embeds, seq_lens_cpu,
                                                 seq_lens_sum, bs)
        out = self.run_draft(forward_batch, window)
        return out.logits_output.hidden_states, out.can_run_graph, block_ids[:, 0]

    def run_draft(self, forward_batch, window):
        with torch.inference_mode():
            return self.host.draft_model_runner.forward(forward_batch)

    def verify_input(self, tokens, positions, custom_mask, n: int, window):
        return self.VERIFY_INPUT(draft_token=tokens.reshape(-1), positions=positions.reshape(-1), draft_token_num=n,
                                 custom_mask=custom_mask, capture_hidden_mode=self.CAPTURE_HIDDEN_MODE.FULL)

    def verify_forward(self, batch, tokens, positions, custom_mask, slots, host_bound, n: int, window):
        """Target TARGET_VERIFY of the n tree nodes per request at `slots` -> the target's output (raw logits:
        the round adjusts them per node). The host lengths are the bound's during the preparation."""
        verify_input = self.verify_input(tokens, positions, custom_mask, n, window)
        batch.out_cache_loc = slots.reshape(-1)
        seq_lens_cpu_backup, seq_lens_sum_backup = batch.seq_lens_cpu, batch.seq_lens_sum
        batch.seq_lens_cpu, batch.seq_lens_sum = host_bound.seq_lens_cpu, host_bound.seq_lens_sum
        verify_forward_batch = self.prepare_verify(batch, verify_input)
        batch.seq_lens_cpu, batch.seq_lens_sum = seq_lens_cpu_backup, seq_lens_sum_backup
        target_out = self.run_verify(verify_forward_batch)
        self.finish_verify_logits(target_out.logits_output)
        return target_out

    def prepare_verify(self, batch, verify_input):
        forward_batch, _ = verify_input.prepare_for_verify(batch, self.host.target_worker)
        return forward_batch

    def run_verify(self, verify_forward_batch):
        return self.host.target_worker.forward_batch_generation(
            batch=None, forward_batch=verify_forward_batch, is_verify=True, skip_attn_backend_init=True)

    def finish_verify_logits(self, logits_output) -> None:
        """Full-vocab verify logits (0.5.23 may hand back a vocab shard)."""

    @staticmethod
    def verify_logits(target_out) -> torch.Tensor:
        """[bs·n, V] the verify's logits (verify_forward's output)."""
        return target_out.logits_output.next_token_logits

    @staticmethod
    def take_verify_hidden(target_out):
        """The verify's captured hidden states [bs·n, ...] (None where it captured none), dropped from its output
        (the batch result does not carry them)."""
        logits_output = target_out.logits_output
        hidden, logits_output.hidden_states = logits_output.hidden_states, None
        return hidden

    def committed_logprobs(self, batch, target_out, node_tokens: torch.Tensor, accept_rows: torch.Tensor) -> None:
        """The committed tokens' log-probs (return_logprob) from the verify's output: node_tokens [bs·n], accept_rows
        [bs, W] rows of the verify's logits (the release's spec_logprobs)."""
        self.spec_logprobs(batch, target_out.logits_output, node_tokens, accept_rows)

    # --- a request's own sampling, on every node (decode_round.py applies them in the plain server's order) ---
    def grammar_tree(self, tree):
        """Start the host copy of the tree's links and tokens (before the verify launch, as SGLang's EAGLE does)."""
        return self.GRAMMAR_TREE.from_device(tree.retrive_next_token, tree.retrive_next_sibling, tree.tokens)

    def apply_grammar(self, batch, gtree, logits: torch.Tensor, barrier) -> None:
        """Each node's logits [bs·n, V] masked by its request's grammar state along the node's path (SGLang's
        tree traversal, on the host while the verify runs); `barrier` first advances the matchers over the
        previous round's committed tokens."""
        mask = self.BUILD_GRAMMAR_MASK(reqs=batch.reqs, tree=gtree, sampling_info=batch.sampling_info,
                                       device=logits.device, barrier=barrier)
        if mask is not None:
            mask.apply(logits)

    def apply_bias_and_processors(self, batch, logits: torch.Tensor, n: int) -> None:
        """After the penalties and the grammar, as the plain server: the request's logit_bias, then its custom
        logit processor, on every node's logits [bs·n, V]."""
        info = batch.sampling_info
        if info is None:
            return
        bias = getattr(info, "logit_bias", None)
        if bias is not None:
            logits.view(-1, n, logits.shape[-1]).add_(bias.to(logits.dtype).unsqueeze(1))
        if info.has_custom_logit_processor:
            self.CUSTOM_LOGIT_PROCESSOR(logits, info, num_tokens_in_batch=n)

    def node_law(self, batch):
        """The round's NodeLaw (sampling.py) from SGLang's per-request sampling tensors; None: all greedy."""
        info = batch.sampling_info
        if info is None or info.is_all_greedy:
            return None
        return law_of(info)

    def request_seeds(self, batch):
        """(int64 [bs] seeds, bool [bs] which requests gave one) of the requests' own sampling seeds, or None where
        none did: all of them under deterministic inference (SGLang's tensor), else each request's `sampling_seed`
        where it sent one (the plain server honours it only under deterministic inference; DDTree always does, so
        such a request's sample is reproducible). Read only in a round with a sampled request."""
        info = batch.sampling_info
        seeds = None if info is None else getattr(info, "sampling_seed", None)
        if seeds is not None:
            return seeds.view(-1).to(torch.int64), torch.ones_like(seeds.view(-1), dtype=torch.bool)
        given = [req.sampling_params.sampling_seed for req in batch.reqs]
        if all(s is None for s in given):
            return None
        dev = batch.seq_lens.device
        return (torch.tensor([0 if s is None else int(s) for s in given], dtype=torch.int64).to(dev, non_blocking=True),
                torch.tensor([s is not None for s in given]).to(dev, non_blocking=True))

    def prefill_seeds(self, batch):
        """(int64 [bs] seed, bool [bs] given, int64 [bs] step) of a prefill batch's requests for the seeded first
        token (seeded_prefill.py): request_seeds', the step the request's length after its prompt; None where no
        request gave a seed."""
        own = self.request_seeds(batch)
        if own is None:
            return None
        return own[0], own[1], batch.seq_lens.view(-1).to(torch.int64)

    def penalized(self, batch) -> bool:
        """Whether any request of the batch has a penalty or min_new_tokens (SGLang prepared its penalizers)."""
        info = batch.sampling_info
        return info is not None and (getattr(info, "acc_additive_penalties", None) is not None
                                     or getattr(info, "acc_scaling_penalties", None) is not None)

    @staticmethod
    def req_row(req) -> int:
        """The request's row of req_to_token (0.5.23 keeps it under req.kv)."""
        return int(req.req_pool_idx)

    @staticmethod
    def held_back_tokens(req) -> set:
        """The tokens SGLang's min_new_tokens penalizer holds back: the request's stop token ids, the tokenizer's
        extra stop ids and its eos (0.5.23 adds the request's eos_token_ids)."""
        sp, tok = req.sampling_params, req.tokenizer
        stop = set(sp.stop_token_ids or ()) | set(getattr(tok, "additional_stop_token_ids", None) or ())
        if getattr(tok, "eos_token_id", None) is not None:
            stop.add(tok.eos_token_id)
        return stop

    def penalty_requests(self, batch) -> list:
        """penalties.PenaltyRequest per request of a penalised batch (host), the held-back tokens as SGLang's
        min_new_tokens penalizer lists them (held_back_tokens)."""
        out = []
        for req in batch.reqs:
            sp, stop = req.sampling_params, self.held_back_tokens(req)
            out.append(PenaltyRequest(req, self.req_row(req), float(sp.frequency_penalty),
                                      float(sp.presence_penalty), float(sp.repetition_penalty),
                                      int(sp.min_new_tokens or 0), tuple(sorted(stop)), list(req.output_ids),
                                      len(req.origin_input_ids)))
        return out

    def move_kv(self, dst: torch.Tensor, src: torch.Tensor, one_launch: bool = False) -> None:
        """The accepted nodes' KV to the committed slots, every layer. SGLang's MHA pool does it in one launch;
        its MLA pool loops over layers (two launches a layer, ~120 a round on a 61-layer Kimi K2), so with
        one_launch (SGLANG_DDTREE_MLA_KV_MOVE=one_launch) an MLA pool on CUDA is moved here through the MHA
        pool's own kernel over the MLA layers' rows."""
        pool = self.host.model_runner.token_to_kv_pool
        if one_launch and self._rows is None:  # on CUDA only: SGLang's copy kernel is triton
            self._rows = (all_layer_rows(pool) if self.device.type == "cuda" else None) or False
        if one_launch and self._rows:
            move_rows(self.COPY_ALL_LAYERS, self._rows, dst.reshape(-1), src.reshape(-1))
        else:
            pool.move_kv_cache(dst.reshape(-1), src.reshape(-1))

    def draft_context_slots(self, plan, window):
        """The committed columns' slots as the draft KV pool indexes them."""
        return plan.kv_dst

    def append_draft_context(self, hidden: torch.Tensor, plan, window) -> None:
        """The accepted nodes' target hidden states -> the drafter's KV at the committed slots."""
        cache_loc_2d = self.draft_context_slots(plan, window)
        self.host._append_target_hidden_to_draft_kv_by_loc(
            target_hidden=hidden.index_select(0, plan.hidden_index.reshape(-1)),
            cache_loc=cache_loc_2d.reshape(-1), cache_loc_2d=cache_loc_2d, positions=plan.positions.reshape(-1),
            commit_lens=plan.commit_lens)

    def result_extras(self, target_out) -> dict:
        return {}

    def result(self, target_out, plan, block: int, width: int):
        """`block`: the committed tokens' stride per request; `width`: the round's verify width, reported as
        SGLang's per-request verify cap (`cap_lens`, a host tensor: no device work), which SGLang already turns
        into the response's meta_info `spec_cap_length` (mean verify width over the request's rounds) and
        `spec_cap_lens_histogram` (rounds per width) and into the decode log's `cap len`: what a user needs
        to see the auto budget choose."""
        return self.BATCH_RESULT(
            logits_output=target_out.logits_output, next_token_ids=plan.tokens.reshape(-1),
            accept_lens=plan.commit_lens, can_run_cuda_graph=target_out.can_run_cuda_graph,
            next_draft_input=self.host._make_next_draft_input_decode(bonus_tokens=plan.bonus,
                                                                     new_seq_lens=plan.new_seq_lens),
            speculative_num_draft_tokens=block, new_seq_lens=plan.new_seq_lens,
            cap_lens=torch.full((int(plan.commit_lens.shape[0]),), int(width), dtype=torch.int32),
            **self.result_extras(target_out))

    # --- verify graphs at several widths (the served auto budget, decode_round.py) ----------------------
    def verify_graph_runner(self):
        """The target's own verify graph runner (None: the target runs without CUDA graphs)."""
        return self.target_runner().decode_cuda_graph_runner

    def capture_verify_widths(self, widths) -> dict:
        """{width: verify graph runner}: the server's runner at its own width (the widest), and one more
        DecodeCudaGraphRunner per other width, capturing the same batch buckets into SGLang's graph memory pool
        (widest first, so narrower graphs reuse its memory). {} when the target runs without CUDA graphs."""
        main = self.verify_graph_runner()
        if main is None:
            return {}
        runners = {int(main.captured_req_width): main}
        for w in sorted({int(w) for w in widths}, reverse=True):
            if w not in runners:
                runners[w] = self.DECODE_GRAPH_RUNNER(self.target_runner(), speculative_num_draft_tokens=w)
        return runners

    @contextlib.contextmanager
    def verify_with(self, runner):
        """Run the round's verify through `runner` (its width's graphs); the server's own runner is back after."""
        mr = self.target_runner()
        saved = mr.decode_cuda_graph_runner
        mr.decode_cuda_graph_runner = runner
        try:
            yield
        finally:
            mr.decode_cuda_graph_runner = saved

    def graph_buckets(self) -> list:
        """The batch sizes the target's verify graphs were captured for ([] without graphs)."""
        main = self.verify_graph_runner()
        return [] if main is None else sorted(int(b) for b in main.capture_bs)

    def draft_graph_runner(self):
        return self.host.draft_model_runner.decode_cuda_graph_runner

    def time_graph(self, runner, bs: int, reps: int = 5):
        """Median replay time (s) of `runner`'s graph for batch bucket bs, by CUDA events after two warm
        replays; None where the runner has no such graph or its graphs cannot replay outside a forward (only
        whole-forward graphs can). The static inputs are the capture's: padding slots, prefix length 1."""
        backend = getattr(runner, "backend", None)
        if runner is None or not isinstance(backend, self.FULL_GRAPH_BACKEND):
            return None
        key = runner._make_graph_key(int(bs))
        if not backend.can_run(None, key):
            return None
        times = []
        for i in range(reps + 2):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            backend.replay(key, None)
            end.record()
            end.synchronize()
            if i >= 2:
                times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)

    # --- run-time fixes (hooks.py), on the SGLang objects the release module resolved --------------------
    def install_verify_mask_policy(self) -> None:
        hooks.install_verify_mask_policy(self._DFLASH_UTILS)

    def install_eager_embeds_dtype_fix(self) -> None:
        hooks.install_eager_embeds_dtype_fix(self._MODEL_RUNNER)

    def install_seeded_prefill(self, round_ops):
        """The target's sampler wrapped for seeded first tokens (seeded_prefill.SeededSampler), or None where the
        target samples with another class (a custom sampler backend), said once in the log."""
        sampler = self.host.target_worker.model_runner.sampler
        if not isinstance(sampler, self.SAMPLER):
            logging.getLogger("sglang_ddtree").warning(
                "sglang-ddtree: the target samples with %s, not SGLang's Sampler: a seeded request's first token "
                "is that sampler's (its later tokens are DDTree's seeded draws)", type(sampler).__name__)
            return None
        return hooks.install_seeded_prefill(sampler, round_ops, law_of)
