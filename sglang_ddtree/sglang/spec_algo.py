"""DDTreeSpecAlgo: how the DDTREE algorithm answers SGLang's speculative-algorithm questions.

DDTree is a member of SGLang's DFlash family (the drafter is a DFlash block drafter, the draft KV and the
target's captured hidden states are DFlash's), but it is not DFLASH itself: DFLASH-only paths (linear
accept thresholds, legacy draft-parallel, fused HiCache draft) stay off. The methods CustomSpecAlgo lacks
upstream (patches/0001) are defined here because the scheduler calls them at start-up.
"""
from __future__ import annotations

from .adapters import registration as sgl


def _draft_block_size(default: int) -> int:
    """The drafter's block size as published to the scheduler's runtime context (args.py sets it)."""
    try:
        value = sgl.published_block_size()
    except ValueError:  # "config namespace 'spec' not published" (CPU tests, tools): the caller's width
        return default
    return int(value) if value else default


class DDTreeSpecAlgo(sgl.spec_base()):
    # --- DFlash family: reuse the DFlash draft machinery --------------------------------------------
    def is_dflash_family(self) -> bool:
        return True

    def is_dflash(self) -> bool:
        return False

    def supports_target_verify_for_draft(self) -> bool:
        return True  # the DFlash drafter runs as a TARGET_VERIFY forward of the draft runner

    def supports_prefill_shared_read_done(self) -> bool:
        return True

    def supports_grammar_overlap(self) -> bool:
        return True  # the round builds each node's grammar mask on the host while the verify runs, after the
        # scheduler's barrier has advanced the matchers (decode_round.py, adapters: apply_grammar)

    def supports_ragged_verify(self) -> bool:
        return False

    def supports_mixed_chunk(self) -> bool:
        return False

    def has_draft_kv(self) -> bool:
        return True

    # --- methods CustomSpecAlgo lacks upstream (the scheduler calls them unconditionally) -------------
    def carries_draft_hidden_states(self) -> bool:
        return False

    def need_topk(self) -> bool:
        return False  # EAGLE's top-k draft relay; DDTree's top-k lives inside one decode round

    def get_platform_worker_cls(self):
        return None

    def create_future_map(self, device, req_to_token_pool, needs_cpu_seq_lens: bool = True,
                          needs_confidence_relay: bool = False):
        return sgl.future_map(device, self, req_to_token_pool, needs_cpu_seq_lens, needs_confidence_relay)

    # --- widths ----------------------------------------------------------------------------------------
    def get_num_tokens_per_req_for_target_verify(self, num_draft_tokens: int, is_draft_worker: bool) -> int:
        """Target: the tree verify width n = budget + 1. Draft runner: the drafter's block size."""
        if is_draft_worker:
            return _draft_block_size(num_draft_tokens)
        return num_draft_tokens

    def resolve_max_speculative_num_draft_tokens(self, server_args):
        return sgl.draft_tokens(sgl.served_budget(server_args))

    # --- arguments ---------------------------------------------------------------------------------------
    def handle_server_args(self, server_args) -> None:
        from .args import apply_ddtree_defaults

        apply_ddtree_defaults(server_args)


SPEC_METHOD_NAMES = ("carries_draft_hidden_states", "create_future_map", "need_topk", "get_platform_worker_cls")
