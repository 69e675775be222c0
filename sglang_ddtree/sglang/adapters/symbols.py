"""The SGLang symbols both releases' adapters name and call alike, resolved through a release's `need` (need.py):
`shared_symbols` gives the Adapter attributes DFlashV2Adapter declares (dflash_v2.py), `with_shared_symbols` sets
them on a release's Adapter class; the `need_*` helpers group them by what the round uses them for."""
from __future__ import annotations


def need_graph_runners(need) -> tuple:
    """(DecodeCudaGraphRunner, FullCudaGraphBackend) through a release's `need`: the verify graphs at more
    widths of the auto budget, and timing their replays. Both releases name and call them alike."""
    runner = "sglang.srt.model_executor.runner.decode_cuda_graph_runner"
    backend = "sglang.srt.model_executor.runner_backend.full_cuda_graph_backend"
    need(runner, "DecodeCudaGraphRunner.__init__", ("self", "model_runner", "speculative_num_draft_tokens"))
    need(runner, "DecodeCudaGraphRunner._make_graph_key", ("self", "size"))
    need(backend, "FullCudaGraphBackend.can_run", ("self", "forward_batch", "shape_key"))
    need(backend, "FullCudaGraphBackend.replay", ("self", "shape_key", "static_forward_batch"))
    return need(runner, "DecodeCudaGraphRunner"), need(backend, "FullCudaGraphBackend")


def need_round_types(need) -> tuple:
    """(ForwardBatch, ForwardMode, CaptureHiddenMode, SpeculativeAlgorithm, RadixAttention, DFlashDraftInputV2)
    through a release's `need`: the types the round builds and tests, named alike on both releases."""
    fb = "sglang.srt.model_executor.forward_batch_info"
    return (need(fb, "ForwardBatch"), need(fb, "ForwardMode"), need(fb, "CaptureHiddenMode"),
            need("sglang.srt.speculative.spec_info", "SpeculativeAlgorithm"),
            need("sglang.srt.layers.radix_attention", "RadixAttention"),
            need("sglang.srt.speculative.dflash_info_v2", "DFlashDraftInputV2"))


def need_request_features(need) -> tuple:
    """(GrammarTree, build_grammar_vocab_mask, apply_custom_logit_processor) through a release's `need`: a
    request's grammar over the verify tree and its custom logit processor. Both releases name them alike."""
    spec = "sglang.srt.speculative.spec_utils"
    need(spec, "GrammarTree.from_device", ("retrieve_next_token", "retrieve_next_sibling", "draft_token"))
    return (need(spec, "GrammarTree"),
            need(spec, "build_grammar_vocab_mask", ("reqs", "tree", "sampling_info", "device", "barrier")),
            need("sglang.srt.layers.sampler", "apply_custom_logit_processor",
                 ("logits", "sampling_batch_info", "num_tokens_in_batch")))


def need_sampler(need):
    """SGLang's Sampler, whose two steps the seeded first token wraps (hooks.install_seeded_prefill): its logits
    preprocessing and its draw from probabilities, called by name from Sampler.forward on both releases."""
    mod = "sglang.srt.layers.sampler"
    need(mod, "Sampler._preprocess_logits", ("self", "logits", "sampling_info"))
    need(mod, "Sampler._sample_from_probs", ("self", "probs", "sampling_info", "positions", "simple_sampling_case"))
    return need(mod, "Sampler")


def need_copy_all_layers(need):
    """SGLang's KV-row copy over every layer in one launch (the MHA pool's move), through a release's `need`."""
    return need("sglang.kernels.ops.kvcache.cache_move", "copy_all_layer_kv_cache_func",
                ("data_ptrs", "strides", "tgt_loc", "src_loc", "num_locs", "num_locs_upper", "kv_copy_config"))


def need_tp_group(need):
    """SGLang's tensor-parallel group coordinator getter, through a release's `need`. Both releases name it alike."""
    return need("sglang.srt.distributed.parallel_state", "get_tp_group")


def shared_symbols(need) -> dict:
    """{Adapter attribute: SGLang object} of every symbol the releases name and call alike (DFlashV2Adapter declares
    each), resolved through a release's `need`; functions come as staticmethods, ready for the class."""
    common = "sglang.srt.speculative.draft_worker_common"
    utils = "sglang.srt.speculative.dflash_utils"
    runner = "sglang.srt.model_executor.model_runner"
    grammar_tree, grammar_mask, logit_processor = need_request_features(need)
    decode_graph_runner, full_graph_backend = need_graph_runners(need)
    need(utils, "resolve_dflash_verify_mask_policy", ("attn_backend",))
    need(runner, "ModelRunner._extend_forward_kwargs", ("self", "forward_batch", "pp_proxy_tensors"))
    symbols = dict(zip(("FORWARD_BATCH", "FORWARD_MODE", "CAPTURE_HIDDEN_MODE", "SPECULATIVE_ALGORITHM",
                        "RADIX_ATTENTION", "DRAFT_INPUT"), need_round_types(need)))
    symbols.update(
        VERIFY_INPUT=need("sglang.srt.speculative.dflash_info", "DFlashVerifyInput"),
        BATCH_RESULT=need("sglang.srt.managers.scheduler", "GenerationBatchResult"),
        PREPARE_DRAFT_BLOCK=staticmethod(need(
            "sglang.kernels.ops.speculative.dflash", "_prepare_dflash_draft_block_unchecked",
            ("bonus_tokens", "prefix_lens", "req_pool_indices", "req_to_token", "block_ids_out", "positions_out",
             "cache_loc_out", "mask_token_id"))),
        GRAMMAR_TREE=grammar_tree, BUILD_GRAMMAR_MASK=staticmethod(grammar_mask),
        CUSTOM_LOGIT_PROCESSOR=staticmethod(logit_processor),
        BLOCK_POS_OFFSETS=staticmethod(need(common, "build_block_pos_offsets", ("length", "device"))),
        BLOCK_SPEC_INFO=staticmethod(need(common, "make_draft_block_spec_info", ("draft_token_num", "device"))),
        DECODE_GRAPH_RUNNER=decode_graph_runner, FULL_GRAPH_BACKEND=full_graph_backend,
        COPY_ALL_LAYERS=staticmethod(need_copy_all_layers(need)), TP_GROUP=staticmethod(need_tp_group(need)),
        SAMPLER=need_sampler(need), _DFLASH_UTILS=need.module(utils), _MODEL_RUNNER=need(runner, "ModelRunner"))
    return symbols


def with_shared_symbols(need):
    """Class decorator for a release's Adapter: shared_symbols(need) set on the class."""
    def bind(cls):
        for name, value in shared_symbols(need).items():
            setattr(cls, name, value)
        return cls
    return bind
