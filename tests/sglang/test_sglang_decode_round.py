"""The decode round (tree → verify inputs → accept → KV move → drafter commit → result) on CPU, through the
installed release's real adapter (adapters/v0_5_17.py or v0_5_23.py: the `release` fixture; the test body is
the same for both).

The round is built by its real constructor (`DecodeRound(adapter, server_args, knobs)`, the call
DDTreeWorkerV2.__init__ makes after DFlashWorkerV2's own constructor, which loads the drafter and needs a
GPU). The DFlash worker it is bound to (`FakeDFlashHost`) holds what DFlashWorkerV2.__init__ sets and
borrows DFlashWorkerV2's real `_ensure_draft_block_buffers` and `_make_next_draft_input_decode`; the real
ForwardBatch, DFlashVerifyInput, GenerationBatchResult, DFlashDraftInputV2 and, on 0.5.23, the real
KVIndexTranslator / KVLocPlan are used. Only the model is fake: the drafter's forward, the target's verify
behind SGLang's `prepare_for_verify` (which needs a live ScheduleBatch and model runner), the drafter's KV
writer, and a KV pool that stores which node's KV sits in each slot.

The fake target's greedy next token is a hash of the whole context; it reads each node's ancestors from the
mask the attention would use (the tree kernel's bitsets, or SGLang's FULL_MASK layout) and the prefix from
its own KV pool. The drafter favours the target's continuation at rank 0 or 1 per depth, so acceptance has
to go through siblings. Checked against an independent greedy decode: committed tokens, lengths, which KV
ends up at slots prefix..prefix+len, and what the drafter's KV writer is handed.
"""
import contextlib
import types

import pytest
import torch
from sglang.srt.configs.model_config import AttentionArch  # an IntEnum: str() is a number

V, H, MASK = 40, 6, 39
SLOTS_PER_REQ = 64


def greedy_next(context):
    return (sum((i + 1) * t * 31 for i, t in enumerate(context)) + 7 * len(context)) % (V - 1)  # never MASK


class FakeKV:
    """The target's KV pool: per slot, the token it holds and which verify node wrote it."""

    def __init__(self, slots):
        self.token = torch.full((slots,), -1, dtype=torch.int64)
        self.node = torch.full((slots,), -1, dtype=torch.int64)

    def move_kv_cache(self, tgt, src):
        self.token[tgt], self.node[tgt] = self.token[src].clone(), self.node[src].clone()


class FakeTreeAttention:
    """What the round hands the tree kernel: the round's ancestor bitsets."""

    def __init__(self):
        self.loaded = []

    def load_mask(self, mask_bits):
        self.loaded.append(mask_bits.clone())


class FakeDrafter:
    """The draft runner's forward: per depth d, the true chain token at rank ranks[d] (a decoy above it at rank 1)."""

    def __init__(self, world, ranks):
        self.world, self.ranks, self.batches = world, ranks, []

    def forward(self, fb):
        self.batches.append(fb)
        w = self.world
        bs = int(fb.batch_size)
        ids = fb.input_ids.view(bs, -1)
        block = ids.shape[1]
        hidden = torch.full((bs * block, V), -5.0)
        for b in range(bs):
            ctx = w.prefix_context(b, int(fb.seq_lens[b])) + [int(ids[b, 0])]
            for d in range(block - 1):
                t = greedy_next(ctx)
                hidden[b * block + d + 1, t] = 2.0
                if self.ranks[d] == 1:
                    hidden[b * block + d + 1, (t + 1) % (V - 1)] = 3.0
                ctx.append(t)
        return types.SimpleNamespace(logits_output=types.SimpleNamespace(hidden_states=hidden), can_run_graph=False)


class FakeDFlashHost:
    """A DFlash V2 worker's state as DFlashWorkerV2.__init__ leaves it (adapters' HOST_ATTRS), around a fake model."""

    _ensure_draft_block_buffers = None  # DFlashWorkerV2's own, set per release by the fixture
    _make_next_draft_input_decode = None

    def __init__(self, world, release, ranks):
        self.device = torch.device("cpu")
        self.block_size = self.speculative_num_draft_tokens = world.n  # DFlash sizes its block from n
        self._mask_token_id = MASK
        for name in ("_draft_block_ids_buf", "_draft_block_positions_buf", "_draft_block_tokens_buf",
                     "_draft_verify_out_cache_loc_buf", "_draft_block_end_buf", "_draft_seq_lens_cpu_buf"):
            setattr(self, name, None)
        self._block_pos_offsets = self._draft_block_spec_info = None
        self.draft_model = types.SimpleNamespace(block_sizes=[])
        self.draft_model.set_block_size = self.draft_model.block_sizes.append
        model = types.SimpleNamespace(lm_head=types.SimpleNamespace(weight=torch.eye(V)),
                                      get_input_embeddings=lambda: world.embedding)
        self.model_runner = types.SimpleNamespace(
            model=model, req_to_token_pool=types.SimpleNamespace(req_to_token=world.req_to_token),
            token_to_kv_pool=world.kv, page_size=1)
        self.target_worker = types.SimpleNamespace(model_runner=self.model_runner)
        self.draft_model_runner = FakeDrafter(world, ranks)
        self.appended = []
        if release.Adapter.supports("kv_loc_plan"):  # the host's KV index translators, its 0.5.23 attributes
            from sglang.srt.configs.draft_parallel import DraftParallelLayout
            from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator

            def translator(pool):
                return KVIndexTranslator(req_to_token=world.req_to_token, token_to_kv_pool_allocator=None,
                                         token_to_kv_pool=pool, page_size=1, device="cpu")

            self.model_runner.kv_index_translator = translator(world.kv)
            self.draft_model_runner.kv_index_translator = translator(object())
            self.selector = self.lilicorr = self._target_logits_processor = None
            self._is_domino = self._need_mamba_verify_commit = False
            self.draft_parallel_layout = DraftParallelLayout(tp_group=None, attn_tp_size=1)
            self._noise_embed_scale = 1.0

    def _append_target_hidden_to_draft_kv_by_loc(self, **kw):  # the drafter's KV projection: model
        self.appended.append(kw)


class World:
    """Requests, their prefixes in the fake KV pool, and an independent greedy decode."""

    def __init__(self, budget, seq_lens, prefix_tokens):
        bs = len(seq_lens)
        self.n, self.seq_lens, self.prefix_tokens = budget + 1, seq_lens, prefix_tokens
        self.req_to_token = torch.arange(bs * SLOTS_PER_REQ).view(bs, SLOTS_PER_REQ) + 1  # slot 0: padding
        self.kv = FakeKV(bs * SLOTS_PER_REQ + 1)
        for b, toks in enumerate(prefix_tokens):
            self.kv.token[self.req_to_token[b, :len(toks)]] = torch.tensor(toks)
        self.embedding = torch.nn.Embedding(V, 3)
        self.roots = torch.tensor([greedy_next(p) for p in prefix_tokens])  # the previous round's bonus

    def prefix_context(self, b, length):
        return self.kv.token[self.req_to_token[b, :length]].tolist()

    def slots(self):
        cols = self.seq_lens.unsqueeze(1) + torch.arange(self.n)
        return self.req_to_token[torch.arange(len(self.seq_lens)).unsqueeze(1), cols]

    def want(self, b, length):
        ctx, out = list(self.prefix_tokens[b]) + [int(self.roots[b])], []
        for _ in range(length):
            out.append(greedy_next(ctx))
            ctx.append(out[-1])
        return out


def fake_model_adapter(release, world, host, captured):
    """The release's real Adapter; only the target's verify behind SGLang's prepare_for_verify is the model's."""

    class WithFakeTarget(release.Adapter):
        def prepare_verify(self, batch, verify_input):
            captured["verify"] = verify_input
            captured["verify_host_lens"] = batch.seq_lens_cpu.clone()
            captured["verify_out_cache_loc"] = batch.out_cache_loc.clone()
            return verify_input

        def run_verify(self, verify_input):
            bs, n = len(world.seq_lens), int(verify_input.draft_token_num)  # the round's width (auto: any)
            tokens = verify_input.draft_token.view(bs, n)
            positions = verify_input.positions.view(bs, n)
            ancestors = captured["ancestors"] = ancestors_from_mask(captured, verify_input, world)
            captured["tokens"] = tokens.clone()
            logits = torch.full((bs * n, V), -1.0)
            hidden = torch.zeros(bs * n, H)
            slots = captured["verify_out_cache_loc"].view(bs, n)
            for b in range(bs):
                prefix = world.prefix_context(b, int(world.seq_lens[b]))
                for i in range(n):
                    path = sorted(ancestors[b][i], key=lambda j: int(positions[b, j]))
                    logits[b * n + i, greedy_next(prefix + [int(tokens[b, j]) for j in path])] = 5.0
                    hidden[b * n + i, 0] = 1000 * b + i
            world.kv.token[slots.reshape(-1)] = tokens.reshape(-1)  # the verify writes every node's KV
            world.kv.node[slots.reshape(-1)] = hidden[:, 0].to(torch.int64)
            out = types.SimpleNamespace(next_token_logits=logits, hidden_states=hidden)
            return types.SimpleNamespace(logits_output=out, can_run_cuda_graph=True, routed_experts_output=None,
                                         indexer_topk_output=None)

    return WithFakeTarget(host)


def ancestors_from_mask(captured, verify_input, world):
    """Ancestor-or-self sets per node, decoded from what the attention reads: the tree kernel's bitsets, or
    SGLang's FULL_MASK layout (per request n rows of prefix + n columns, requests concatenated)."""
    bs, n = len(world.seq_lens), int(verify_input.draft_token_num)
    tree_attn = captured["tree_attn"]
    if tree_attn is not None:
        bits = tree_attn.loaded[-1]
        return [[{j for j in range(n) if (int(bits[b, i, j // 32]) >> (j % 32)) & 1} for i in range(n)]
                for b in range(bs)]
    mask, start, out = verify_input.custom_mask, 0, []
    for b in range(bs):
        p = int(world.seq_lens[b])
        rows = mask[start:start + n * (p + n)].view(n, p + n)
        assert bool(rows[:, :p].all())  # the whole prefix is visible
        out.append([{j for j in range(n) if bool(rows[i, p + j])} for i in range(n)])
        start += n * (p + n)
    return out


@pytest.fixture
def release(sglang_release):
    """The installed release's adapter module, and the parallel layout its SGLang reads at run time."""
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    from sglang_ddtree.sglang import adapters

    mod = adapters.for_release(sglang_release)
    FakeDFlashHost._ensure_draft_block_buffers = DFlashWorkerV2._ensure_draft_block_buffers
    FakeDFlashHost._make_next_draft_input_decode = DFlashWorkerV2._make_next_draft_input_decode
    from sglang.srt import runtime_context

    if hasattr(runtime_context, "get_parallel"):  # a release that reads its parallel state from its runtime context
        with runtime_context.get_parallel().override(moe_ep_size=1):
            yield mod
    else:
        yield mod


def make_round(release, budget, block, seq_lens, prefix_tokens, ranks, tree_attention, auto_budgets=(),
               auto_default=False, stage_times=None):
    from sglang_ddtree.round_config import RoundConfig
    from sglang_ddtree.sglang.settings import Settings
    from sglang_ddtree.sglang.decode_round import DecodeRound

    if auto_budgets:
        budget = max(auto_budgets)
    world = World(budget, seq_lens, prefix_tokens)
    host = FakeDFlashHost(world, release, ranks)
    captured = {}
    sgl = fake_model_adapter(release, world, host, captured)
    server_args = types.SimpleNamespace(speculative_num_draft_tokens=budget + 1, speculative_dflash_block_size=block,
                                        speculative_draft_model_path=None, random_seed=0, max_running_requests=8)
    knobs = Settings(ops_backend="cpu", draft_graph_head=False, verify_attention="auto", stage_times=stage_times)
    config = RoundConfig(budget=budget, auto_budgets=tuple(sorted(auto_budgets)), auto_default=auto_default,
                         topk=None, anchor=None, calibration="off")
    rnd = DecodeRound(sgl, server_args, knobs, config)
    rnd.tree_attn = captured["tree_attn"] = FakeTreeAttention() if tree_attention else None
    batch = types.SimpleNamespace(
        spec_info=release.Adapter.DRAFT_INPUT(
            topk_p=torch.empty(len(seq_lens), 0), topk_index=torch.empty(len(seq_lens), 0, dtype=torch.int64),
            bonus_tokens=world.roots.clone(), new_seq_lens=seq_lens.clone(),
            hidden_states=torch.empty(len(seq_lens), 0)),
        seq_lens=seq_lens.clone(), seq_lens_cpu=seq_lens.to(torch.int32), seq_lens_sum=int(seq_lens.sum()),
        req_pool_indices=torch.arange(len(seq_lens)), sampling_info=None, out_cache_loc=None,
        can_run_decode_cuda_graph=True)
    return rnd, world, host, captured, batch


@pytest.mark.parametrize("tree_attention", [True, False], ids=["tree_kernel", "full_mask"])
@pytest.mark.parametrize("budget,block,ranks", [(7, 4, [0, 0, 0]), (12, 5, [0, 1, 0, 1]), (9, 6, [1, 1, 0, 0, 1])])
def test_decode_round_commits_the_targets_greedy_tokens(release, budget, block, ranks, tree_attention):
    bs, n = 3, budget + 1
    g = torch.Generator().manual_seed(budget)
    seq_lens = torch.tensor([5, 9, 12])
    prefix_tokens = [torch.randint(0, V - 1, (int(L),), generator=g).tolist() for L in seq_lens]
    rnd, world, host, captured, batch = make_round(release, budget, block, seq_lens, prefix_tokens, ranks,
                                                   tree_attention)
    # the constructor retargeted DFlash's block from n to the drafter's
    assert host.block_size == host.speculative_num_draft_tokens == block and host.draft_model.block_sizes == [block]
    slots = world.slots()
    published = []
    res = rnd.decode(batch, published.append)

    from sglang.srt.managers.scheduler import GenerationBatchResult

    assert isinstance(res, GenerationBatchResult) and res.speculative_num_draft_tokens == block
    assert res.cap_lens.tolist() == [budget + 1] * bs  # the verify width, SGLang's per-request cap (meta_info)
    commit = res.accept_lens
    out = res.next_token_ids.view(bs, block)
    nodes_of = []
    for b in range(bs):
        want = world.want(b, block)
        L = int(commit[b])
        assert 1 <= L <= block
        assert out[b, :L].tolist() == want[:L]          # accepted drafts then the bonus, all the target's
        assert out[b, L:].tolist() == [0] * (block - L)
        # the walk goes down the tree the target verified as long as a child carries the target's token
        anc, toks, path = captured["ancestors"][b], captured["tokens"][b], [0]
        while len(path) < block:
            cur = path[-1]
            kids = [c for c in range(n) if c not in anc[cur] and anc[c] == anc[cur] | {c}
                    and int(toks[c]) == want[len(path) - 1]]
            if not kids:
                break
            path.append(kids[0])
        assert L == len(path)
        if ranks == [0] * (block - 1):
            assert L == block  # the drafter's top-1 chain is the target's: everything is accepted
        # slots prefix..prefix+L-1 now hold the accepted nodes' KV (moved there), the drafts' tokens in order
        nodes_of.append([1000 * b + i for i in path])
        assert world.kv.node[slots[b, :L]].tolist() == nodes_of[b]
        assert world.kv.token[slots[b, 1:L]].tolist() == want[:L - 1]
    assert isinstance(res.next_draft_input, release.Adapter.DRAFT_INPUT)
    assert res.next_draft_input.bonus_tokens.tolist() == [world.want(b, int(commit[b]))[-1] for b in range(bs)]
    assert torch.equal(res.new_seq_lens, seq_lens + commit.to(seq_lens.dtype))
    assert torch.equal(published[0], res.new_seq_lens)

    # the drafter: [bonus, MASK…] at positions prefix.., KV at the block's first slots, lengths bounded on the host
    (fb,) = host.draft_model_runner.batches
    assert fb.input_ids.view(bs, block)[:, 0].tolist() == world.roots.tolist()
    assert (fb.input_ids.view(bs, block)[:, 1:] == MASK).all()
    assert fb.positions.view(bs, block).tolist() == (seq_lens.unsqueeze(1) + torch.arange(block)).tolist()
    assert torch.equal(fb.out_cache_loc.view(bs, block), slots[:, :block])
    assert torch.equal(fb.input_embeds, world.embedding(fb.input_ids).detach())
    assert fb.seq_lens_cpu.tolist() == (seq_lens + block).tolist()

    # the drafter's context: the accepted nodes' hidden rows at the committed slots
    (dc,) = host.appended
    for b in range(bs):
        L = int(commit[b])
        assert dc["target_hidden"].view(bs, block, H)[b, :L, 0].tolist() == nodes_of[b]
        assert dc["positions"].view(bs, block)[b].tolist() == list(range(int(seq_lens[b]), int(seq_lens[b]) + block))
    assert torch.equal(dc["cache_loc_2d"], slots[:, :block]) and torch.equal(dc["commit_lens"], commit)

    # the verify: n nodes per request at slots prefix..prefix+n, the host bound covering prefix + n
    v = captured["verify"]
    assert isinstance(v, release.Adapter.VERIFY_INPUT) and v.draft_token_num == n
    assert torch.equal(captured["verify_out_cache_loc"].view(bs, n), slots)
    assert captured["verify_host_lens"].tolist() == (seq_lens + n).tolist()
    assert batch.seq_lens_cpu.tolist() == seq_lens.tolist()  # restored after the preparation
    if tree_attention:
        assert v.custom_mask is None and len(captured["tree_attn"].loaded) == 1
    else:
        assert v.custom_mask is not None
    if release.Adapter.supports("kv_loc_plan"):  # one KVLocPlan for the round: the n tree slots
        assert torch.equal(v.kv_loc_plan.write_virtual.view(bs, n), slots)
        assert fb.kv_loc_plan is v.kv_loc_plan


def test_decode_round_partial_acceptance(release, monkeypatch):
    """A drafter that is right only at depth 1: one draft token and the bonus get committed, by one call of
    the round core the engine uses (round.RoundOps.commit)."""
    from sglang_ddtree.round import RoundOps

    commits, real_commit = [], RoundOps.commit
    monkeypatch.setattr(RoundOps, "commit", lambda self, *a: commits.append(a) or real_commit(self, *a))
    seq_lens = torch.tensor([3, 4])
    rnd, world, host, captured, batch = make_round(release, 6, 4, seq_lens, [[1, 2, 3], [4, 5, 6, 7]], [0, 0, 0],
                                                   True)
    drafter = host.draft_model_runner
    real_forward = drafter.forward

    def wrong_after_first(fb):
        out = real_forward(fb)
        h = out.logits_output.hidden_states.view(2, 4, V)
        h[:, 2:] = h[:, 2:].roll(1, dims=-1)  # every deeper guess is off by one token
        return out

    drafter.forward = wrong_after_first
    res = rnd.decode(batch, None)
    assert res.accept_lens.tolist() == [2, 2] and len(commits) == 1
    for b in range(2):
        assert res.next_token_ids.view(2, 4)[b, :2].tolist() == world.want(b, 2)


def test_decode_round_finishes_a_deferred_vocab_gather(release):
    """0.5.23's target LogitsProcessor may hand the verify back a vocab shard (defer_verify_gather): the round
    gathers the full vocab before choosing per-node tokens. 0.5.17 hands back full logits (nothing to do)."""
    if not release.Adapter.supports("deferred_verify_gather"):
        pytest.skip(f"{release.Adapter.RELEASE} has no deferred verify gather")
    seq_lens = torch.tensor([3, 4])
    rnd, world, host, captured, batch = make_round(release, 6, 4, seq_lens, [[1, 2, 3], [4, 5, 6, 7]], [0, 0, 0],
                                                   True)

    class ShardingProcessor:  # the target model's LogitsProcessor, sharded over the vocab
        def __init__(self):
            self.full, self.gathered = None, 0

        def is_deferred_shard(self, logits):
            return logits.shape[-1] < V

        def finish_deferred_gather(self, logits):
            self.gathered += 1
            return self.full

    lp = host._target_logits_processor = ShardingProcessor()
    sgl, real_run_verify = rnd.sgl, rnd.sgl.run_verify

    def sharded(fb):
        out = real_run_verify(fb)
        lp.full = out.logits_output.next_token_logits
        out.logits_output.next_token_logits = lp.full[:, : V // 2].clone()
        return out

    sgl.run_verify = sharded
    res = rnd.decode(batch, None)
    assert lp.gathered == 1 and res.accept_lens.tolist() == [4, 4]
    for b in range(2):
        assert res.next_token_ids.view(2, 4)[b].tolist() == world.want(b, 4)


def test_start_up_refuses_what_the_round_cannot_serve(release):
    """0.5.23's refusals name the cause; 0.5.17's adapter has none (its serving path is unchanged)."""
    rnd, world, host, captured, batch = make_round(release, 6, 4, torch.tensor([3]), [[1, 2, 3]], [0, 0, 0], True)
    from sglang_ddtree.sglang.adapters.dflash_v2 import DFlashV2Adapter

    if type(rnd.sgl).check_serving is DFlashV2Adapter.check_serving:  # the release refuses nothing at start-up
        assert rnd.sgl.check_serving() is None
        return
    rnd.sgl.check_serving()  # the plain fake host is servable
    for attr, value, why in (("lilicorr", object(), "LiLiCorr"), ("_is_domino", True, "Domino"),
                             ("_need_mamba_verify_commit", True, "mamba")):
        saved = getattr(host, attr)
        setattr(host, attr, value)
        with pytest.raises(ValueError, match=why):
            rnd.choose_verify_attention()
        setattr(host, attr, saved)
    host.draft_model_runner.kv_index_translator.is_translating = True
    with pytest.raises(ValueError, match="draft runner's pool translates"):
        rnd.choose_verify_attention()


def test_fa3_without_the_tree_kernel_is_refused_at_start_up(release):
    """On SGLang's fa3 backend the FULL_MASK verify is no fallback (its tree mask needs topk > 1): where the tree
    kernel cannot serve, start-up refuses naming the fix instead of serving a verify that ignores the tree."""
    rnd, _, host, _, _ = make_round(release, 7, 4, torch.tensor([5, 9]), [[1] * 5, [2] * 9], [1, 0, 0], False)
    runner = host.model_runner
    runner.attn_backend, rnd.sgl.target_runner = type("FlashAttentionBackend", (), {})(), lambda: runner
    with pytest.raises(ValueError, match="--attention-backend fa3 needs the tree kernel.*Fix: pass --attention-backend "
                                         "triton or flashinfer"):
        rnd.choose_verify_attention()


@pytest.mark.parametrize("tree_attention", [True, False], ids=["tree_kernel", "full_mask_rejected"])
def test_auto_budget_round_at_width_w_is_the_fixed_budget_w_minus_1_round(release, tree_attention):
    """SGLANG_DDTREE_BUDGET=auto: the drafter builds the widest tree, the round verifies its first w nodes
    through width w's verify graphs. Whatever width the chooser picks, the round must be exactly the round of a
    server with the fixed budget w − 1 (the same tokens, lengths, KV moves and drafter context), verified at w
    slots; the first round verifies the chain's width, and every round publishes its prediction."""
    from sglang_ddtree.budget import AutoWidth

    block, cands, ranks = 4, (3, 7, 12), [1, 0, 1]
    seq_lens = torch.tensor([5, 9, 12])
    g = torch.Generator().manual_seed(3)
    prefix_tokens = [torch.randint(0, V - 1, (int(L),), generator=g).tolist() for L in seq_lens]
    if not tree_attention:  # the auto budget verifies through the tree kernel only: refused, naming the knob
        rnd, _, host, _, _ = make_round(release, 0, block, seq_lens, prefix_tokens, ranks, False, auto_budgets=cands)
        runner = host.model_runner  # a backend the tree kernel does not take: the FULL_MASK path would serve
        runner.attn_backend, rnd.sgl.target_runner = object(), lambda: runner
        with pytest.raises(ValueError, match="SGLANG_DDTREE_BUDGET=auto"):
            rnd.choose_verify_attention()
        return
    for width in (4, 8, 13):
        rnd, world, host, captured, batch = make_round(release, 0, block, seq_lens, prefix_tokens, ranks, True,
                                                       auto_budgets=cands)
        assert isinstance(rnd.auto, AutoWidth) and rnd.auto.widths == [4, 8, 13] and rnd.verify_width == 13
        used = []
        rnd.verify_runners = {w: f"runner{w}" for w in rnd.auto.widths}

        @contextlib.contextmanager
        def verify_with(runner):
            used.append(runner)
            yield

        rnd.sgl.verify_with = verify_with
        if width == 4:
            assert rnd.core.width(3, 1.0) == 4  # nothing predicted yet: the chain's width
            rnd.auto.round -= 1
        contexts = []
        rnd.auto.choose = lambda bs, context=1, sampled=False, w=width: contexts.append(context) or w
        got = rnd.decode(batch, None)
        assert contexts == [pytest.approx((5 + 9 + 12) / 3)]  # the batch's mean prefix prices the verify
        assert rnd.auto._expected.landed()  # this round's prediction is on its way to a later round's choice
        assert used == ([] if width == 13 else [f"runner{width}"])  # the widest is the server's own runner
        assert captured["verify"].draft_token_num == width
        assert torch.equal(captured["verify_out_cache_loc"].view(3, width), world.slots()[:, :width])
        assert captured["tree_attn"].loaded[-1].shape[1] == width

        ref, world_f, host_f, captured_f, batch_f = make_round(release, width - 1, block, seq_lens, prefix_tokens,
                                                               ranks, True)
        want = ref.decode(batch_f, None)
        assert torch.equal(got.next_token_ids, want.next_token_ids) and torch.equal(got.accept_lens, want.accept_lens)
        assert got.cap_lens.tolist() == [width] * 3  # what meta_info's spec_cap_length averages
        assert torch.equal(captured["tokens"], captured_f["tokens"])
        assert torch.equal(world.kv.node, world_f.kv.node) and torch.equal(world.kv.token, world_f.kv.token)
        for key in ("target_hidden", "cache_loc_2d", "positions", "commit_lens"):
            assert torch.equal(host.appended[0][key], host_f.appended[0][key]), key


def test_auto_by_default_keeps_the_widest_budget_where_the_tree_kernel_does_not_serve(release):
    """Auto only because no budget was given (RoundConfig.auto_default, set by the argument hook):
    where the tree kernel turns out not to serve, the server does not refuse, as it does an explicit auto; it
    serves the widest budget it reserved, fixed, and its rounds are that fixed budget's rounds."""
    block, cands, ranks = 4, (3, 7, 12), [1, 0, 1]
    seq_lens = torch.tensor([5, 9, 12])
    g = torch.Generator().manual_seed(5)
    prefix_tokens = [torch.randint(0, V - 1, (int(L),), generator=g).tolist() for L in seq_lens]
    rnd, world, host, captured, batch = make_round(release, 0, block, seq_lens, prefix_tokens, ranks, False,
                                                   auto_budgets=cands, auto_default=True)
    runner = host.model_runner  # a backend the tree kernel does not take: the FULL_MASK path serves
    runner.attn_backend, rnd.sgl.target_runner = object(), lambda: runner
    rnd.sgl.install_verify_mask_policy = lambda: None
    rnd.choose_verify_attention()
    assert rnd.auto is None and rnd.budget == 12 and rnd.head.predict is None
    got = rnd.decode(batch, None)
    ref, _, _, _, batch_f = make_round(release, 12, block, seq_lens, prefix_tokens, ranks, False)
    want = ref.decode(batch_f, None)
    assert torch.equal(got.next_token_ids, want.next_token_ids) and torch.equal(got.accept_lens, want.accept_lens)
    assert got.cap_lens.tolist() == [13] * 3


def test_default_verify_path_builds_no_full_mask(release, monkeypatch):
    """With defaults (SGLANG_DDTREE_VERIFY_ATTENTION=auto) on a target the tree kernel serves, the round's verify
    goes through the tree kernel: SGLang's FULL_MASK is never built (the writer would raise here), no custom
    mask reaches the verify input, and SGLang's mask policy is left alone."""
    from sglang_ddtree.sglang import decode_round, tree_attention

    rnd, world, host, captured, batch = make_round(release, 6, 4, torch.tensor([3, 5]), [[1, 2, 3], [4, 5, 6, 7, 8]],
                                                   [0, 1, 0], False)
    made = []

    class RecordingTreeAttention(FakeTreeAttention):
        def __init__(self, runner, *, n, max_bs, widths=(), prefix="auto", tp=1):
            super().__init__()
            made.append((runner, n, max_bs, prefix))

        def install(self):
            made.append("installed")

    monkeypatch.setattr(tree_attention, "unsupported", lambda runner: None)  # a target the kernel serves
    monkeypatch.setattr(tree_attention, "TreeVerifyAttention", RecordingTreeAttention)
    monkeypatch.setattr(rnd.sgl, "install_verify_mask_policy", lambda: made.append("FULL_MASK policy"))
    monkeypatch.setattr(rnd.round, "backend", "cuda")  # what the choice asks of the ops (the CPU ops run the round)
    rnd.choose_verify_attention()
    monkeypatch.setattr(rnd.round, "backend", "cpu")
    assert made == [(host.model_runner, 7, rnd._max_bs, "auto"), "installed"]

    def no_full_mask(*a, **k):
        raise AssertionError("the default verify path built a FULL_MASK")

    monkeypatch.setattr(decode_round, "full_tree_mask", no_full_mask)
    captured["tree_attn"] = rnd.tree_attn
    res = rnd.decode(batch, None)
    assert captured["verify"].custom_mask is None and len(rnd.tree_attn.loaded) == 1
    for b in range(2):
        L = int(res.accept_lens[b])
        assert res.next_token_ids.view(2, 4)[b, :L].tolist() == world.want(b, L)


def test_an_mla_target_has_no_full_mask_fallback(release):
    """SGLang's MLA backends cannot verify a tree: where the tree kernel cannot serve an MLA target (here: the
    CPU ops), the round refuses to start, naming the cause and the fix, instead of falling back."""
    rnd, world, host, captured, batch = make_round(release, 6, 4, torch.tensor([3]), [[1, 2, 3]], [0, 0, 0], False)
    host.model_runner.model_config = types.SimpleNamespace(attention_arch=AttentionArch.MLA)
    why = r"an MLA target needs the tree kernel, which is not in use here \(the CUDA ops are unavailable\)"
    with pytest.raises(ValueError, match=why):
        rnd.choose_verify_attention()


def test_the_worker_and_the_engine_run_the_same_round_function(release, monkeypatch):
    """round.Round.run is the decode round of both hosts: the server's decode call and every engine round go
    through it (spied, not mocked: the real round runs), each with its own host."""
    from sglang_ddtree import round as core
    from sglang_ddtree.engine import Engine
    from sglang_ddtree.engine.data import heldout_prompts
    from sglang_ddtree.sglang import decode_round, worker

    hosts, real_run = [], core.Round.run

    def spy(self, host):
        hosts.append(type(host).__name__)
        return real_run(self, host)

    monkeypatch.setattr(core.Round, "run", spy)
    assert worker.DecodeRound is decode_round.DecodeRound
    seq_lens = torch.tensor([5, 9, 12])
    g = torch.Generator().manual_seed(1)
    prefix_tokens = [torch.randint(0, V - 1, (int(L),), generator=g).tolist() for L in seq_lens]
    rnd, _, _, _, batch = make_round(release, 7, 4, seq_lens, prefix_tokens, [0, 1, 0], True)
    rnd.decode(batch, None)
    assert hosts == ["_ServerRound"]
    res = Engine.from_pretrained(device="cpu").generate(heldout_prompts(2), 8, method="ddtree", budget=8)
    rounds = sum(r.rounds for r in res)
    assert hosts[1:] == ["_EngineBatch"] * res[0].stage_times["rounds"] and rounds > 0


def test_stage_times_are_logged_every_n_rounds(release, caplog):
    """SGLANG_DDTREE_STAGE_TIMES=N: every N-th round logs each stage's time a round (the round's own stages and
    the stretch between rounds), then starts counting afresh; unset, the round keeps no clock."""
    import logging

    seq_lens = torch.tensor([5, 9, 12])
    g = torch.Generator().manual_seed(2)
    prefix_tokens = [torch.randint(0, V - 1, (int(L),), generator=g).tolist() for L in seq_lens]
    rnd, *_ = make_round(release, 7, 4, seq_lens, prefix_tokens, [0, 0, 0], True)
    assert rnd.clock is None
    rnd, _, _, _, batch = make_round(release, 7, 4, seq_lens, prefix_tokens, [0, 0, 0], True, stage_times=2)
    with caplog.at_level(logging.INFO, logger="sglang_ddtree"):
        rnd.interrupt()  # a prefill ran: the next round's launch is counted apart
        rnd.decode(batch, None)
        assert "stage times" not in caplog.text
        rnd.decode(batch, None)
    logged = [r.getMessage() for r in caplog.records if "stage times over 2 rounds" in r.getMessage()]
    assert len(logged) == 1
    for stage in ("draft", "verify", "sample", "accept", "commit", "between"):
        assert f"'{stage}':" in logged[0], (stage, logged[0])
    host = logged[0].split("host launch (ms a round, rounds): ")[1]
    assert "'after_prefill': (" in host and "'steady': (" in host and host.count(", 1)") == 2, host
    assert all(v == 0.0 for v in rnd.clock.totals.values())
    assert all(n == 0 for _, n in rnd._host.values())
