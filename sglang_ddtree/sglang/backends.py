"""The SGLang attention backends DDTree verifies on, by the target's KV pool: each one's --attention-backend name
and its class (tree_attention.py checks the live backend's class; args.py checks the flags)."""

BY_POOL = {
    "MHATokenToKVPool": {"triton": "TritonAttnBackend", "flashinfer": "FlashInferAttnBackend"},
    # MLA (absorbed: one latent KV head of 576, values its first 512), only through the tree kernel
    "MLATokenToKVPool": {"triton": "TritonAttnBackend", "flashmla": "FlashMLABackend",
                         "flashinfer": "FlashInferMLAAttnBackend"},
}
MHA = tuple(BY_POOL["MHATokenToKVPool"])  # also where SGLang's FULL_MASK fallback applies a tree mask
MLA = tuple(BY_POOL["MLATokenToKVPool"])
