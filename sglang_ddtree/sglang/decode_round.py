"""DecodeRound: DDTree's decode round on a DFlash V2 worker, through the release's adapter (SGLang-free).

  draft block (DFlash drafter, [bonus, MASK…]) → lm_head → top-k → tree      -- one draft CUDA graph
  → target verify of the n = budget + 1 tree nodes at slots prefix..prefix+n  -- the tree kernel
        (tree_attention.py; SGLang's FULL_MASK path only as the fallback, see `choose_verify_attention`)
  → per-node target tokens → RoundOps.commit: walk + commit plan              -- one op (round.py)
  → the plan's KV moves (one all-layer copy), the accepted nodes' hidden states → drafter context

Every SGLang step is an adapter verb (adapters/dflash_v2.py and the release's module); what is here is the
same on every release. With SGLANG_DDTREE_BUDGET=auto (budget.AutoWidth) each round first picks its verify
width w on the host among the candidates, from an earlier round's predicted tokens and the cost of a round
at each width in this batch's graph bucket (its graphs' start-up time plus the bucket's measured time beyond
the graphs); the drafter still builds the widest tree, the round
verifies its first w nodes (budget.truncate: exactly the tree of budget w − 1) through that width's verify
graphs, and this round's prediction is published for a later round's choice. Widths: the verify writes n
slots per request, the drafter and the committed output use the drafter's block size (accepted path ≤ depth
limit + 1 = block). Nothing is read on the host: sizes come from the host-side lengths the scheduler already
keeps, and every per-request step is a tensor op.
"""
from __future__ import annotations

import contextlib
import logging

import torch

from sglang_ddtree import penalties
from sglang_ddtree.budget import AutoWidth, truncate
from sglang_ddtree.round import RoundOps
from sglang_ddtree.sampling import node_tokens, request_seeds

from . import tree_attention
from .adapters import registration
from .args import auto_budgets, depth_temperatures
from .draft_head import DraftTreeHead
from .settings import Settings, env
from .verify_input import full_tree_mask, host_mask_bound

logger = logging.getLogger("sglang_ddtree")
# prefix lengths the auto budget's verify attention is timed at (those within the server's context)
AUTO_CONTEXTS = (1024, 4096, 16384, 65536)


class DecodeRound:
    """Built once per DDTree worker (DDTreeWorkerV2.__init__), after DFlashWorkerV2's own constructor."""

    def __init__(self, sgl, server_args, knobs: Settings):
        self.sgl = sgl  # the release's adapters.*.Adapter, bound to the worker
        self.knobs = knobs
        self.verify_width = int(server_args.speculative_num_draft_tokens)  # n = budget + 1
        self.budget = self.verify_width - 1
        self.block_size = int(server_args.speculative_dflash_block_size)
        if self.verify_width < self.block_size:
            raise ValueError(f"DDTREE: verify width {self.verify_width} < drafter block {self.block_size}")
        self.device = sgl.device
        sgl.use_block_size(self.block_size)
        self.round = RoundOps(self.device, knobs.ops_backend)
        self._node_offsets = torch.arange(self.verify_width, device=self.device, dtype=torch.int64)
        self._round = 0
        self._seed = int(getattr(server_args, "random_seed", 0) or 0)
        self._max_bs = registration.max_batch_size(server_args)
        self._depth_temperature = depth_temperatures(knobs, server_args.speculative_draft_model_path,
                                                     self.block_size - 1)
        self.auto = None  # budget.AutoWidth with SGLANG_DDTREE_BUDGET=auto; its costs come in capture_widths
        if knobs.auto:
            widths = [b + 1 for b in auto_budgets(knobs, self.block_size)]
            if widths[-1] != self.verify_width:
                raise ValueError(f"DDTREE: {env('budget')}=auto's widest candidate is {widths[-1]}, but the server "
                                 f"verifies {self.verify_width} tokens (the argument hook did not run?)")
            self.auto = AutoWidth(widths, device=self.device)
        self.verify_runners = {}  # width -> the target's verify graph runner at that width (auto only)
        self._auto_log_every = 200
        self.head = self._make_head()
        self.tree_attn = None  # set by choose_verify_attention, once the target's backend exists
        self.penalty_counts = None  # penalties.PenaltyCounts, made at the first penalised round

    def _make_head(self) -> DraftTreeHead:
        lm_head = self.sgl.lm_head()
        if lm_head is None or not hasattr(lm_head, "weight") or not torch.is_floating_point(lm_head.weight):
            raise RuntimeError("DDTREE needs the target's lm_head weight (unquantized) for the draft head")
        shard = getattr(lm_head, "shard_indices", None)
        num_org = int(shard.num_org_elements) if shard is not None else int(lm_head.weight.shape[0])
        return DraftTreeHead(weight=lm_head.weight, num_org=num_org, block_size=self.block_size,
                             budget=self.budget, topk=self.knobs.topk, max_bs=self._max_bs, ops=self.round,
                             tree_in_graph=self.knobs.draft_graph_head, anchor=self.knobs.anchor,
                             depth_temperature=self._depth_temperature,
                             predict=None if self.auto is None else self.auto.predict)

    def describe(self) -> str:
        t = self._depth_temperature
        budget = self.budget if self.auto is None else f"auto {[w - 1 for w in self.auto.widths]}"
        return (f"budget={budget} verify width={self.verify_width} drafter block={self.block_size} "
                f"k={self.head.k} ops={self.round.backend} tree-in-graph={self.head.tree_in_graph} "
                f"anchor={self.knobs.anchor or 'none'} calibration="
                + ("off" if t is None else "T=" + ",".join(f"{x:.2f}" for x in t)))

    def choose_verify_attention(self) -> None:
        """After the target's attention backend exists, before any graph capture: the one place the
        verify-attention path is chosen (tree kernel, or SGLang's FULL_MASK fallback)."""
        self.sgl.check_serving()
        runner = self.sgl.target_runner()
        why = tree_attention.unsupported(runner) if self.round.backend == "cuda" else "the CUDA ops are unavailable"
        choice = self.knobs.verify_attention
        if choice == "tree" and why is not None:
            raise ValueError(f"SGLANG_DDTREE_VERIFY_ATTENTION=tree, but the tree kernel cannot serve {why}")
        if choice == "full_mask" or why is not None:
            page = int(getattr(runner, "page_size", 1) or 1)
            if self.auto is not None and self.knobs.auto_default:  # auto was only the default: keep the widest
                logger.warning("sglang-ddtree: no budget was given and auto needs the tree kernel, which is not in "
                               "use here (%s): serving the fixed budget %d instead", why or choice, self.budget)
                self.auto = None
                self.head = self._make_head()
            for needs, fix in ((self.auto is not None and f"{env('budget')}=auto", "set a fixed budget"),
                               (page != 1 and f"--page-size {page}",
                                "use --page-size 1 (SGLang's FULL_MASK verify assumes page size 1)"),
                               (tree_attention.is_mla(runner) and "an MLA target",
                                "SGLang's MLA backends cannot verify a tree; serve it with the CUDA ops on "
                                f"{' / '.join(tree_attention.BACKENDS['MLATokenToKVPool'])}")):
                if needs:
                    raise ValueError(f"DDTREE: {needs} needs the tree kernel, which is not in use here ("
                                     f"{why or 'SGLANG_DDTREE_VERIFY_ATTENTION=full_mask'}). Fix: {fix}")
            if why is not None:
                logger.warning("sglang-ddtree: tree verify through SGLang's FULL_MASK path (slower) because of %s", why)
            self.sgl.install_verify_mask_policy()
            return
        self.tree_attn = tree_attention.TreeVerifyAttention(runner, n=self.verify_width, max_bs=self._max_bs,
                                                            widths=() if self.auto is None else self.auto.widths,
                                                            prefix=self.knobs.prefix)
        if self.head.static_tree is not None:  # the draft graph writes the bitsets straight where verify reads
            self.tree_attn.mask_bits = self.head.static_tree["mask_bits"]
        self.tree_attn.install()

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
        self.auto.set_costs(buckets, prior, attention)
        logger.info("DDTREE auto budget: verify widths %s, graphs at %s, start-up round cost (ms) %s; verify attention "
                    "beyond prefix 1 (ms a round) %s",
                    self.auto.widths, sorted(self.verify_runners),
                    {b: {w: round(prior[(b, w)] * 1e3, 3) for w in self.auto.widths if (b, w) in prior}
                     for b in buckets},
                    {f"{b}x{w}": [(c, round(t * 1e3, 3)) for c, t in pts] for (b, w), pts in attention.items()})

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
        if self.auto is not None:
            self.auto.interrupt()

    # --- the round ----------------------------------------------------------------------------------
    def _node_tokens(self, logits, batch, prefix) -> torch.Tensor:
        """Per-node target tokens [bs, n] (sampling.py): argmax for greedy requests, else a draw from each
        node's law under the request's temperature / top-k / top-p / min-p, from the request's own stream:
        its seed and position under deterministic inference (reproducible whatever the batch), else the
        server's seed with the request's pool row and the round counter."""
        law = self.sgl.node_law(batch)
        if law is None:
            return node_tokens(self.round, logits, None, None, None)
        seed = self.sgl.request_seeds(batch)
        if seed is not None:
            step = prefix.to(torch.int64)
        else:
            seed = request_seeds(self._seed, batch.req_pool_indices)
            step = torch.full_like(seed, self._round)
        return node_tokens(self.round, logits, law, seed.view(-1).to(torch.int64), step)

    def _penalty_counts(self, batch, vocab: int):
        """The request rows' output counts (penalties.PenaltyCounts) when a request of the batch has a penalty
        or min_new_tokens, else None (no host work)."""
        if not self.sgl.penalized(batch):
            return None
        if self.penalty_counts is None:
            self.penalty_counts = penalties.PenaltyCounts(self.sgl.req_to_token().shape[0], vocab, batch.seq_lens.device)
        return self.penalty_counts

    def _tree(self, batch, draft_input, slots, window, bs):
        """The drafter's forward → (the round's widest tree, whether it came from the draft graph's buffers)."""
        draft_out, ran_graph, roots = self.sgl.draft_forward(batch, draft_input, slots, window, bs)
        if ran_graph and self.head.graph_ready:
            return self.head.from_graph(bs), True
        hidden = draft_out.hidden_states
        if hidden is None:
            raise RuntimeError("DDTREE: the DFlash drafter returned no hidden states")
        return self.head.build(hidden, bs, roots, batch.seq_lens), False

    def _choose_width(self, bs: int, host_lens) -> int:
        if self.auto is None:
            return self.verify_width
        width = self.auto.choose(bs, float(host_lens.float().mean()) if host_lens is not None and bs else 1.0)
        if self.auto.round % self._auto_log_every == 0:
            logger.info("DDTREE auto budget after %d rounds: {bucket: {width: rounds, cost ms}} %s",
                        self.auto.round, self.auto.summary())
        return width

    def decode(self, batch, on_publish, grammar_barrier=None):
        sgl = self.sgl
        if batch.spec_info is None:
            batch.spec_info = sgl.idle_draft_input()
        draft_input = batch.spec_info
        if batch.seq_lens.is_cuda:  # produced on another stream under overlap
            batch.seq_lens.record_stream(torch.cuda.current_stream(batch.seq_lens.device))
        bs = len(batch.seq_lens)
        host_lens = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else sgl.draft_kv_lens(draft_input)[0]
        n = self._choose_width(bs, host_lens)  # this round's verify width (the server's, unless the budget is auto)
        self._round += 1
        prefix = batch.seq_lens

        # 1) the slots the verify writes (read from req_to_token before any graph of this round), draft → tree
        req_to_token = sgl.req_to_token()
        slots = req_to_token[batch.req_pool_indices.unsqueeze(1), prefix.unsqueeze(1) + self._node_offsets[:n]]
        slots = slots.to(torch.int64)  # [bs, n]
        window = sgl.plan_window(batch, draft_input, slots)
        tree, from_graph = self._tree(batch, draft_input, slots, window, bs)
        if self.auto is not None:
            self.auto.publish(self.head.predicted(tree, from_graph))
            if n < self.verify_width:
                tree = truncate(tree, n - 1)
        gtree = sgl.grammar_tree(tree) if getattr(batch, "has_grammar", False) else None

        # 2) target verify of the tree: n slots per request at req_to_token[row, prefix : prefix + n]
        host_bound = host_mask_bound(batch.seq_lens_cpu, None if batch.seq_lens_cpu is not None else host_lens, n)
        if self.tree_attn is not None:
            self.tree_attn.load_mask(tree.mask_bits)
            custom_mask = None
        else:
            custom_mask = full_tree_mask(tree.tree_mask, prefix, host_bound.total)
        runner = self.verify_runners.get(n) if n != self.verify_width else None
        with sgl.verify_with(runner) if runner is not None else contextlib.nullcontext():
            target_out = sgl.verify_forward(batch, tree.tokens, tree.positions, custom_mask, slots, host_bound, n,
                                            window)
        logits_output = target_out.logits_output

        # 3) every node's logits as the plain server adjusts the next token's (penalties, grammar, bias,
        #    processors), its token, then accept + commit plan (round.py): one op
        flat = logits_output.next_token_logits
        logits = flat.view(bs, n, -1)
        counts = self._penalty_counts(batch, logits.shape[-1])
        if counts is not None:
            reqs = sgl.penalty_requests(batch)
            rows = counts.begin(reqs, prefix, tree.tokens[:, 0])
            penalties.apply(logits, counts.counts[rows], counts.lengths[rows],
                            penalties.path_tokens(tree.tokens, tree.parents, tree.depths, tree.depth_limit),
                            tree.depths, penalties.params_of(reqs, logits.shape[-1], logits.device))
        if gtree is not None:
            sgl.apply_grammar(batch, gtree, flat, grammar_barrier)
        sgl.apply_bias_and_processors(batch, flat, n)
        targets = self._node_tokens(logits, batch, prefix)
        plan = self.round.commit(tree, targets, prefix, slots)
        if on_publish is not None:
            on_publish(plan.new_seq_lens)
        if counts is not None:  # the accepted tokens below the bonus (the next round's root)
            counts.add(rows, plan.tokens, plan.commit_lens.to(torch.int64) - 1)
        if getattr(batch, "return_logprob", False):
            row0 = torch.arange(bs, device=flat.device).view(bs, 1) * n
            accepted = torch.where(plan.accept_index >= 0, row0 + plan.accept_index.to(torch.int64), row0)
            sgl.spec_logprobs(batch, logits_output, targets.reshape(-1), accepted)

        # 4) apply it: accepted KV to slots prefix..prefix+len (one all-layer copy), drafter context
        sgl.move_kv(plan.kv_dst, plan.kv_src, one_launch=self.knobs.mla_kv_move == "one_launch")
        hidden = logits_output.hidden_states
        if hidden is None:
            raise RuntimeError("DDTREE verify requires the target's captured hidden states")
        sgl.append_draft_context(hidden, plan, window)
        logits_output.hidden_states = None
        return sgl.result(target_out, plan, self.block_size, n)
