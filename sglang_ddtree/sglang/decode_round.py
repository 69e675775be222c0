"""DecodeRound: the SGLang worker as a host of DDTree's decode round (round.py), through the release's adapter.

The round itself (width, draft, verify, sample, accept, commit) is round.Round's, the same the engine runs;
here are its verbs on a DFlash V2 worker (`_ServerRound`, one per decode call) and what only a server has:
the draft tree head that may run inside the draft CUDA graph (draft_head.py), the verify-attention set-up
(`choose_verify_attention`: the tree kernel, SGLang's FULL_MASK path only as the fallback), the auto budget's
verify graphs and start-up cost tables (`capture_widths`), and a request's penalties, grammar, logit bias,
processors and log-probs. Every SGLang step is an adapter verb (adapters/dflash_v2.py and the release's
module); what is here is the same on every release. With SGLANG_DDTREE_BUDGET=auto the drafter still builds
the widest tree and the round verifies its first w nodes through width w's verify graphs. Widths: the verify
writes n slots per request, the drafter and the committed output use the drafter's block size (accepted path
≤ depth limit + 1 = block). Nothing is read on the host: sizes come from the host-side lengths the scheduler
already keeps, and every per-request step is a tensor op.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import time

import torch

from sglang_ddtree import penalties
from sglang_ddtree.budget import AutoWidth, time_sampled_tail
from sglang_ddtree.attention import choose
from sglang_ddtree.round import Round, RoundHost, RoundOps
from sglang_ddtree.round_config import RoundConfig
from sglang_ddtree.sampling import request_seeds
from sglang_ddtree.stage_clock import StageClock

from . import draft_attention, tree_attention
from .adapters import registration
from .args import drafter_calibration
from .draft_head import DraftTreeHead
from .settings import Settings, env
from .tp import TpAgreement
from .verify_input import full_tree_mask, host_mask_bound

logger = logging.getLogger("sglang_ddtree")
# prefix lengths the auto budget's verify attention is timed at (those within the server's context)
AUTO_CONTEXTS = (1024, 4096, 16384, 65536)


class DecodeRound:
    """Built once per DDTree worker (DDTreeWorkerV2.__init__), after DFlashWorkerV2's own constructor."""

    def __init__(self, sgl, server_args, knobs: Settings, config: RoundConfig):
        self.sgl = sgl  # the release's adapters.*.Adapter, bound to the worker
        self.knobs, self.config = knobs, config  # the server's settings; its round (args.resolve_round)
        served = registration.round_args(server_args)  # what the round reads of the resolved server arguments
        self.verify_width, self.budget = config.verify_width, config.budget  # n = budget + 1, the widest tree
        if served.budget != self.budget:
            raise ValueError(f"DDTREE: the round's budget is {self.budget}, but the server's arguments carry "
                             f"{served.budget} (the argument hook did not run?)")
        self.block_size = served.block_size
        if self.verify_width < self.block_size:
            raise ValueError(f"DDTREE: verify width {self.verify_width} < drafter block {self.block_size}")
        self.device = sgl.device
        sgl.use_block_size(self.block_size)
        self.round = RoundOps(self.device, knobs.ops_backend)
        self._node_offsets = torch.arange(self.verify_width, device=self.device, dtype=torch.int64)
        self._seed, self._max_bs = served.seed, served.max_batch_size
        # a DFlash2 drafter (SGLANG_DDTREE_SELECTOR): greedy requests' trees over its selector's lattice (auto,
        # lattice), sampled ones' too with `lattice`, whose children are then the lattice's top candidates (drawn
        # children are defined over per-depth marginals); args._check_selector_drafter refused it at --tp-size > 1
        self.selector = sgl.selector() if config.selector != "marginals" else None
        if self.selector is not None and config.selector == "lattice":
            config = dataclasses.replace(config, children="top")
            self.config = config
        self._calibration = drafter_calibration(config, served.draft_model_path, self.block_size - 1)
        if self._calibration is not None:  # drawn trees rank by the raw law; the shape table is theirs (§3.12)
            drop = {"sampling": None} if config.children == "drawn" else {"shape": None}
            self._calibration = dataclasses.replace(self._calibration, **drop)
        # the round; .auto: budget.AutoWidth with budget auto
        self.core = Round(self.round, self.verify_width, drawn=config.children == "drawn")
        self.tp = TpAgreement(sgl.tp_group(), check=knobs.tp_check) if served.tp_size > 1 else None  # tp.py
        self._tp_size = 1 if self.tp is None else self.tp.size
        if config.auto:
            self.auto = AutoWidth(list(config.widths), device=self.device)  # its costs come in capture_widths
        self.verify_runners = {}  # width -> the target's verify graph runner at that width (auto only)
        self.head = self._make_head()
        self.tree_attn = None  # set by choose_verify_attention, once the target's backend exists
        self.draft_attn = None  # set by choose_draft_attention (SGLANG_DDTREE_DRAFT_ATTENTION=ddtree / auto)
        self.penalty_counts = None  # penalties.PenaltyCounts, made at the first penalised round
        self.clock = StageClock(self.device) if knobs.stage_times else None  # SGLANG_DDTREE_STAGE_TIMES
        self._after_prefill = False  # another forward (a prefill, an idle one) ran since the last round
        self._host = {"after_prefill": [0.0, 0], "steady": [0.0, 0]}  # host seconds launching rounds, rounds

    @property
    def auto(self):
        return self.core.auto

    @auto.setter
    def auto(self, value) -> None:
        self.core.auto = value

    def _make_head(self) -> DraftTreeHead:
        target = self.sgl.target_head()
        if target is None:
            raise RuntimeError("DDTREE needs the target's lm_head weight (unquantized) for the draft head")
        self.vocab = target.vocab  # the verify's full-vocabulary logits
        tp = {} if self.tp is None else dict(tp=self.tp, vocab=target.vocab, vocab_start=target.vocab_start)
        return DraftTreeHead(weight=target.weight, num_org=target.num_org, block_size=self.block_size, **tp,
                             budget=self.budget, topk=self.config.topk, max_bs=self._max_bs, ops=self.round,
                             tree_in_graph=self.knobs.draft_graph_head, anchor=self.config.anchor,
                             calibration=self._calibration, selector=self.selector,
                             lattice_sampled=self.config.selector == "lattice",
                             predict=None if self.auto is None else self.auto.predict)

    def log_stage_times(self) -> None:
        """Every SGLANG_DDTREE_STAGE_TIMES rounds: ms a round per stage since the last log ("between": from a
        round's end to the next one's draft: the scheduler, prefill forwards and idle time), and the host's
        time launching a round, the first round after another forward (a prefill) apart: the overlap scheduler
        hands out a prefill's first token only once the next round is launched."""
        every = self.knobs.stage_times
        if self.clock is None or self.core.count % every:
            return
        totals = self.clock.result()
        host = {k: (round(t * 1e3 / n, 3), n) for k, (t, n) in self._host.items() if n}
        logger.info("DDTREE stage times over %d rounds (ms a round): %s; host launch (ms a round, rounds): %s",
                    every, {k: round(v * 1e3 / every, 3) for k, v in totals.items()}, host)
        self.clock.reset()
        self._host = {k: [0.0, 0] for k in self._host}

    def describe(self) -> str:
        cal = self._calibration
        temps = lambda t: "raw" if t is None else "T=" + ",".join(f"{x:.2f}" for x in t)  # noqa: E731
        budget = f"auto {list(self.config.auto_budgets)}" if self.config.auto else self.budget
        over = "marginals" if self.selector is None else \
            "the selector lattice" + ("" if self.head.lattice_sampled else " (greedy requests; sampled: marginals)")
        return (f"budget={budget} verify width={self.verify_width} drafter block={self.block_size} "
                f"k={self.head.k} ops={self.round.backend} tree-in-graph={self.head.tree_in_graph} "
                f"tree over={over} "
                f"anchor={self.config.anchor or 'none'} children={self.config.children} calibration="
                + ("off" if cal is None else f"greedy {temps(cal.greedy)}, sampled {temps(cal.sampling)}"))

    def choose_verify_attention(self) -> None:
        """After the target's attention backend exists, before any graph capture: the one place the
        verify-attention path is chosen (tree kernel, or SGLang's FULL_MASK fallback)."""
        self.sgl.check_serving()
        runner = self.sgl.target_runner()
        why = tree_attention.unsupported(runner) if self._tree_ops(runner) else "the CUDA ops are unavailable"
        choice = self.knobs.verify_attention
        if not choose.verify(choice, why, f"{env('verify_attention')}={choice}"):
            page = self.sgl.page_size()
            if self.auto is not None and self.config.auto_default:  # auto was only the default: keep the widest
                logger.warning("sglang-ddtree: no budget was given and auto needs the tree kernel, which is not in "
                               "use here (%s): serving the fixed budget %d instead", why or choice, self.budget)
                self.auto, self.config = None, self.config.fixed()
                self.head = self._make_head()
            for needs, fix in ((self.auto is not None and f"{env('budget')}=auto", "set a fixed budget"),
                               (page != 1 and f"--page-size {page}",
                                "use --page-size 1 (SGLang's FULL_MASK verify assumes page size 1)"),
                               (tree_attention.is_mla(runner) and "an MLA target",
                                "SGLang's MLA backends cannot verify a tree; serve it with the CUDA ops on "
                                f"{' / '.join(tree_attention.BACKENDS['MLATokenToKVPool'])}"),
                               (not tree_attention.is_mla(runner) and tree_attention.no_full_mask(runner),
                                "pass --attention-backend triton or flashinfer (SGLang's fa3 backend applies a tree "
                                "mask only in its topk > 1 cascade mode, which DDTree does not enable)")):
                if needs:
                    raise ValueError(f"DDTREE: {needs} needs the tree kernel, which is not in use here ("
                                     f"{why or env('verify_attention') + '=mask'}). Fix: {fix}")
            if why is not None:
                logger.warning("sglang-ddtree: tree verify through SGLang's FULL_MASK path (slower) because of %s", why)
            self.sgl.install_verify_mask_policy()
            return
        self.tree_attn = tree_attention.TreeVerifyAttention(runner, n=self.verify_width, max_bs=self._max_bs,
                                                            widths=() if self.auto is None else self.auto.widths,
                                                            prefix=self.knobs.prefix, tp=self._tp_size)
        if self.head.static_tree is not None:  # the draft graph writes the bitsets straight where verify reads
            self.tree_attn.mask_bits = self.head.static_tree["mask_bits"]
        self.tree_attn.install()

    def _tree_ops(self, runner) -> bool:
        """Whether the tree verify can run on this runner: the CUDA ops, or SGLang's CPU backend (whose verify is
        the project's torch path); a CUDA server on the CPU fallback ops has neither."""
        return self.round.backend == "cuda" or tree_attention.on_cpu_backend(runner)

    def choose_draft_attention(self) -> None:
        """Before any graph capture: the drafter's block attention through the verify's cascade
        (draft_attention.py) with SGLANG_DDTREE_DRAFT_ATTENTION=ddtree (refused at start-up where it cannot serve)
        or =auto (wherever it can serve; elsewhere the draft backend's own kernel, said once in the log)."""
        choice = self.knobs.draft_attention
        runner = self.sgl.draft_runner()
        if tree_attention.on_cpu_backend(runner):  # SGLang's CPU backend has no TARGET_VERIFY of its own
            choice = "ddtree"
        if choice == "sglang":
            return
        why = draft_attention.unsupported(runner, self.sgl.draft_layers_unsupported()) if self._tree_ops(runner) \
            else "the CUDA ops are unavailable"
        if why is not None:
            if choice == "auto":
                logger.info("sglang-ddtree: the drafter's attention stays on its backend's kernel: %s", why)
                return
            raise ValueError(f"DDTREE: {env('draft_attention')}=ddtree, but {why}. Fix: unset {env('draft_attention')}")
        self.draft_attn = draft_attention.DraftBlockAttention(runner, block=self.block_size, max_bs=self._max_bs,
                                                              tp=self._tp_size)
        self.draft_attn.install()

    def capture_widths(self) -> None:
        """After every graph of the server exists (auto only): the target's verify graphs at each candidate
        width, and the start-up cost tables — the replay time of the draft graph plus each width's verify graph
        per batch bucket (what differs between widths; budget.AutoWidth adds the measured time beyond the
        graphs), and the verify attention's time at longer prefixes than the graphs' (AUTO_CONTEXTS)."""
        if self.auto is None:
            return
        self.verify_runners = self.sgl.capture_verify_widths(self.auto.widths)
        buckets = self.sgl.graph_buckets()
        draft = self.sgl.draft_graph_runner()
        prior = {}
        for bs in buckets:
            t_draft = self.sgl.time_graph(draft, bs)
            for w, runner in self.verify_runners.items():
                t_verify = self.sgl.time_graph(runner, bs)
                if t_draft is not None and t_verify is not None:
                    prior[(bs, w)] = t_draft + t_verify
        attention = self._attention_table(buckets or [1])
        tail = self._tail_table(buckets or [1])
        self.auto.set_costs(buckets, prior, attention, tail)
        logger.info("DDTREE auto budget: verify widths %s, graphs at %s, start-up round cost (ms) %s; verify attention "
                    "beyond prefix 1 (ms a round) %s; sampled tail (ms a round) %s",
                    self.auto.widths, sorted(self.verify_runners),
                    {b: {w: round(prior[(b, w)] * 1e3, 3) for w in self.auto.widths if (b, w) in prior}
                     for b in buckets},
                    {f"{b}x{w}": [(c, round(t * 1e3, 3)) for c, t in pts] for (b, w), pts in attention.items()},
                    {f"{b}x{w}": round(t * 1e3, 3) for (b, w), t in tail.items()})

    def _tail_table(self, buckets) -> dict:
        """{(bucket, width): seconds}: a sampled round's sample step (the drawn tree's, or the independent draws')
        at every bucket and width, timed on the serving GPU (budget.time_sampled_tail); empty off CUDA."""
        if self.device.type != "cuda" or self.round.backend != "cuda":
            return {}
        return {(bs, w): time_sampled_tail(self.round, bs, w, self.vocab, self.block_size - 1, self.head.k,
                                           drawn=self.core.drawn)
                for bs in buckets for w in self.auto.widths}

    def _attention_table(self, buckets) -> dict:
        """{(bucket, width): [(prefix, seconds a round beyond prefix 1)]}: the tree kernel's verify attention
        timed on the serving GPU for every layer of the target, at AUTO_CONTEXTS prefix lengths the server's
        context allows (empty where the verify is not the tree kernel's)."""
        ta = self.tree_attn
        if ta is None or self.device.type != "cuda":
            return {}
        contexts = [c for c in AUTO_CONTEXTS if c + self.verify_width <= ta.context]
        table = {}
        for bs in buckets:
            for w in self.auto.widths:
                base = ta.time_verify(bs, w, 1)
                at = [(c, ta.time_verify(bs, w, c)) for c in contexts] if base is not None else []
                table[(bs, w)] = [(c, ta.layers * max(t - base, 0.0)) for c, t in at if t is not None]
        return table

    def interrupt(self) -> None:
        """Another forward (prefill, idle) ran between decode rounds."""
        self._after_prefill = True
        if self.auto is not None:
            self.auto.interrupt()

    def _penalty_counts(self, batch, vocab: int):
        """The request rows' output counts (penalties.PenaltyCounts) when a request of the batch has a penalty
        or min_new_tokens, else None (no host work)."""
        if not self.sgl.penalized(batch):
            return None
        if self.penalty_counts is None:
            self.penalty_counts = penalties.PenaltyCounts(self.sgl.req_to_token().shape[0], vocab, self.device)
        return self.penalty_counts

    def decode(self, batch, on_publish, grammar_barrier=None):
        """One decode round (round.Round.run) with this worker as its host."""
        start = time.perf_counter()
        out = self.core.run(_ServerRound(self, batch, on_publish, grammar_barrier))
        if self.clock is not None:
            host = self._host["after_prefill" if self._after_prefill else "steady"]
            host[0] += time.perf_counter() - start
            host[1] += 1
            self.log_stage_times()
        self._after_prefill = False
        return out


class _ServerRound(RoundHost):
    """One decode round's verbs on the worker (round.RoundHost), for one ScheduleBatch: `batch` goes only to the
    adapter's verbs; what the round reads of it is `view` (the adapter's RoundBatch)."""

    def __init__(self, dr: DecodeRound, batch, on_publish, grammar_barrier):
        self.dr, self.sgl, self.batch = dr, dr.sgl, batch
        self.on_publish, self.grammar_barrier = on_publish, grammar_barrier
        self.view = view = self.sgl.open_round(batch)
        self.draft_input, self.bs, self.host_lens = view.draft_input, view.bs, view.host_lens
        self.window = self.target_out = self.gtree = self.counts = self.rows = self.tree = None

    def batch_size(self) -> int:
        return self.bs

    def agree_width(self, n):
        return n if self.dr.tp is None else self.dr.tp.width(n)

    def agree_targets(self, targets):
        return targets if self.dr.tp is None else self.dr.tp.targets(targets)

    def context(self) -> float:
        return float(self.host_lens.float().mean()) if self.host_lens is not None and self.bs else 1.0

    def prefix(self) -> torch.Tensor:
        return self.view.seq_lens

    def sampled(self) -> bool:
        return self.sgl.node_law(self.batch) is not None

    def slots(self, n: int) -> torch.Tensor:
        """Read from req_to_token before any graph of this round."""
        view = self.view
        req_to_token = self.sgl.req_to_token()
        slots = req_to_token[view.req_pool_indices.unsqueeze(1),
                             view.seq_lens.unsqueeze(1) + self.dr._node_offsets[:n]].to(torch.int64)
        self.window = self.sgl.plan_window(self.batch, self.draft_input, slots)
        return slots

    def draft(self, slots):
        """The drafter's forward; the tree from the draft graph's buffers where the graph built it."""
        head, batch = self.dr.head, self.batch
        law = self.sgl.node_law(batch)  # the tree ranks each request under its own law (keys.py)
        head.load_law(law, self.bs)
        hidden, ran_graph, roots = self.sgl.draft_forward(batch, self.draft_input, slots, self.window, self.bs)
        if ran_graph and head.graph_ready:
            tree, from_graph = head.from_graph(self.bs), True
        else:
            if hidden is None:
                raise RuntimeError("DDTREE: the DFlash drafter returned no hidden states")
            tree, from_graph = head.build(hidden, self.bs, roots, self.view.seq_lens, law), False
        self.from_graph = from_graph
        return tree, (head.predicted(tree, from_graph) if self.dr.auto is not None else None)

    def draft_keys(self):
        return self.dr.head.keys_of(self.bs, self.from_graph)

    def verify(self, tree, slots, n: int) -> torch.Tensor:
        """n slots per request at req_to_token[row, prefix : prefix + n], through width n's graphs."""
        sgl, batch, dr, view = self.sgl, self.batch, self.dr, self.view
        self.tree = tree
        self.gtree = sgl.grammar_tree(tree) if view.has_grammar else None
        host_bound = host_mask_bound(view.seq_lens_cpu, None if view.seq_lens_cpu is not None else self.host_lens, n)
        if dr.tree_attn is not None:
            dr.tree_attn.load_mask(tree.mask_bits)
            custom_mask = None
        else:
            custom_mask = full_tree_mask(tree.tree_mask, view.seq_lens, host_bound.total)
        runner = dr.verify_runners.get(n) if n != dr.verify_width else None
        with sgl.verify_with(runner) if runner is not None else contextlib.nullcontext():
            self.target_out = sgl.verify_forward(batch, tree.tokens, tree.positions, custom_mask, slots, host_bound,
                                                 n, self.window)
        return sgl.verify_logits(self.target_out).view(self.bs, n, -1)

    def adjust_logits(self, logits, tree) -> None:
        """As the plain server adjusts the next token's: penalties, grammar, bias, processors."""
        sgl, batch = self.sgl, self.batch
        flat = logits.view(-1, logits.shape[-1])
        self.counts = self.dr._penalty_counts(batch, logits.shape[-1])
        if self.counts is not None:
            reqs = sgl.penalty_requests(batch)
            self.rows = self.counts.begin(reqs, self.view.seq_lens, tree.tokens[:, 0])
            penalties.apply(logits, self.counts.counts[self.rows], self.counts.lengths[self.rows],
                            penalties.path_tokens(tree.tokens, tree.parents, tree.depths, tree.depth_limit),
                            tree.depths, penalties.params_of(reqs, logits.shape[-1], logits.device))
        if self.gtree is not None:
            sgl.apply_grammar(batch, self.gtree, flat, self.grammar_barrier)
        sgl.apply_bias_and_processors(batch, flat, logits.shape[1])

    def node_law(self, round_no: int):
        """The request's law (sampling.py), from the request's own stream: its sampling seed and position where it
        gave a seed (reproducible whatever the batch), else the server's seed with the request's pool row and the
        round counter."""
        batch, view = self.batch, self.view
        law = self.sgl.node_law(batch)
        if law is None:
            return None, None, None
        seed = request_seeds(self.dr._seed, view.req_pool_indices)
        step = torch.full_like(seed, round_no)
        own = self.sgl.request_seeds(batch)
        if own is not None:
            given_seed, given = own
            seed = torch.where(given, given_seed, seed)
            step = torch.where(given, view.seq_lens.to(torch.int64), step)
        return law, seed.view(-1).to(torch.int64), step

    def committed(self, plan, targets) -> None:
        if self.dr.tp is not None:
            self.dr.tp.check(self.dr.core.count, self.tree, plan)
        if self.on_publish is not None:
            self.on_publish(plan.new_seq_lens)
        if self.counts is not None:  # the accepted tokens below the bonus (the next round's root)
            self.counts.add(self.rows, plan.tokens, plan.commit_lens.to(torch.int64) - 1)
        if self.view.return_logprob:
            n = targets.shape[1]
            row0 = torch.arange(self.bs, device=targets.device).view(self.bs, 1) * n
            accepted = torch.where(plan.accept_index >= 0, row0 + plan.accept_index.to(torch.int64), row0)
            self.sgl.committed_logprobs(self.batch, self.target_out, targets.reshape(-1), accepted)

    def move_kv(self, plan) -> None:
        """One all-layer copy."""
        self.sgl.move_kv(plan.kv_dst, plan.kv_src, one_launch=self.dr.knobs.mla_kv_move == "one_launch")

    def append_draft_context(self, plan) -> None:
        hidden = self.sgl.take_verify_hidden(self.target_out)
        if hidden is None:
            raise RuntimeError("DDTREE verify requires the target's captured hidden states")
        self.sgl.append_draft_context(hidden, plan, self.window)

    def result(self, plan, n: int):
        out = self.sgl.result(self.target_out, plan, self.dr.block_size, n)
        self.mark("between")
        return out

    def mark(self, stage: str) -> None:
        if self.dr.clock is not None:
            self.dr.clock.mark(stage)
