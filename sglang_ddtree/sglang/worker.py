"""DDTreeWorkerV2: SGLang's DFlash V2 (overlap) worker with DDTree's decode round, on every supported release.

Prefill, idle rounds and the draft KV cache are DFlashWorkerV2's (a seeded request's first token drawn from its
own stream: seeded_prefill.py); the decode round is decode_round.py's.
The base class is the installed release's `adapters.<release>.WorkerBase` (DFlashWorkerV2 with one
constructor and one entry into DFLASH's own forward), and every SGLang step of the round goes through that
release's `Adapter`: this module imports no SGLang.
"""
from __future__ import annotations

import logging

from sglang_ddtree.round_config import RoundConfig

from . import adapters
from .settings import Settings
from .decode_round import DecodeRound

logger = logging.getLogger("sglang_ddtree")

ADAPTER = adapters.current()


class DDTreeWorkerV2(ADAPTER.WorkerBase):
    def __init__(self, server_args, gpu_id, nccl_port, target_worker, ps=None, **kwargs):
        adapters.check_version()
        super().__init__(server_args, gpu_id, nccl_port, target_worker, ps=ps, **kwargs)
        self.sgl = self.ADAPTER(self)
        # the round as the launching process resolved it (args.resolve_round): no budget variable is parsed here
        self.ddtree = DecodeRound(self.sgl, server_args, Settings.from_env(), RoundConfig.published())
        self.sgl.install_eager_embeds_dtype_fix()
        self.seeded = self.sgl.install_seeded_prefill(self.ddtree.round)  # seeded_prefill.py (None: not wrapped)
        logger.info("DDTREE worker (sglang %s): %s", self.sgl.RELEASE, self.ddtree.describe())

    def init_attention_backends(self):
        """The scheduler calls this after the target's attention backend exists, before any graph capture."""
        super().init_attention_backends()
        self.ddtree.choose_verify_attention()
        self.ddtree.choose_draft_attention()

    def init_cuda_graphs(self):
        """The scheduler calls this after the target's graphs are captured: DFlash captures the draft graphs,
        then (SGLANG_DDTREE_BUDGET=auto) the verify graphs at the other widths and the start-up cost table."""
        super().init_cuda_graphs()
        self.ddtree.capture_widths()

    def _maybe_build_draft_sampler(self):
        """Called by DFlashWorkerV2.init_cuda_graphs before the draft graphs are captured."""
        head = self.ddtree.head
        if head.tree_in_graph:
            self.sgl.add_draft_capture_hook(head.capture)
        return None  # DFlash's greedy chain sampler is not used

    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None):
        kind = self.sgl.batch_kind(batch)
        if kind != "decode":
            self.ddtree.interrupt()
            seeds = None if self.seeded is None or kind == "idle" else self.sgl.prefill_seeds(batch)
            if seeds is None:
                return self.dflash_forward(batch, on_publish, grammar_barrier, pp_proxy_tensors)
            with self.seeded.prefill(seeds):  # the seeded requests' first tokens from their own streams
                return self.dflash_forward(batch, on_publish, grammar_barrier, pp_proxy_tensors)
        return self.ddtree.decode(batch, on_publish, grammar_barrier)
