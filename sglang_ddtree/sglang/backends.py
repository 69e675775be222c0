"""The SGLang attention backends DDTree verifies on, by the target's KV pool: each one's --attention-backend name
and its class (tree_attention.py checks the live backend's class; args.py checks the flags)."""

BY_POOL = {
    "MHATokenToKVPool": {"triton": "TritonAttnBackend", "flashinfer": "FlashInferAttnBackend",
                         "fa3": "FlashAttentionBackend"},
    # MLA (absorbed: one latent KV head of 576, values its first 512), only through the tree kernel
    "MLATokenToKVPool": {"triton": "TritonAttnBackend", "flashmla": "FlashMLABackend",
                         "flashinfer": "FlashInferMLAAttnBackend"},
}
MHA = tuple(BY_POOL["MHATokenToKVPool"])
MLA = tuple(BY_POOL["MLATokenToKVPool"])
# SGLang's fa3 backend verifies a tree only in its topk > 1 cascade mode, which DDTree does not enable: on fa3 its
# FULL_MASK verify is no fallback for the tree kernel (triton and flashinfer apply the mask)
NO_FULL_MASK = ("fa3",)
# On the CPU: SGLang's torch_native backend, whose TARGET_VERIFY the project's torch path serves (MHA/GQA targets)
CPU = {"MHATokenToKVPool": {"torch_native": "TorchNativeAttnBackend"}}
