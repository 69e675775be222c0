"""Every per-request feature a user can send, through the decode round on CPU with the release's real adapter
(the rig of test_sglang_decode_round.py: SGLang's own Req, SamplingParams, SamplingBatchInfo, grammar tree
traversal and logprob code; a fake model). The round must serve each one as the plain server does — grammar
on every node, penalties counting each node's path, top-p / top-k / min-p, independent requests, logprobs —
and no feature may raise inside the scheduler's forward."""
import numpy as np
import pytest
import torch
from test_sglang_decode_round import MASK, V, greedy_next, make_round, release  # noqa: F401  (release: fixture)

from sglang_ddtree import reference


def make_reqs(world, prompt_lens, **params):
    """Real SGLang requests for the world's rows: prompt = the first prompt_lens[b] prefix tokens, output = the
    rest of the prefix (the committed output before the round's root)."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    import types

    reqs = []
    params.setdefault("temperature", 0.0)  # greedy unless asked (SGLang's default is 1.0)
    tokenizer = types.SimpleNamespace(eos_token_id=5, additional_stop_token_ids=None)  # what the penalizers read
    for b, toks in enumerate(world.prefix_tokens):
        sp = SamplingParams(max_new_tokens=64, **params)
        sp.normalize(tokenizer)
        r = Req(f"r{b}", "", toks[: prompt_lens[b]], sp, vocab_size=V)
        r.tokenizer = tokenizer
        if r.kv is not None:  # 0.5.23 keeps the pool row with the request's KV state
            r.kv.req_pool_idx = b
        else:
            r.req_pool_idx = b
        r.output_ids.extend(toks[prompt_lens[b]:])
        reqs.append(r)
    return reqs


def sampling_info(reqs, penalised=False, seeds=None):
    """SGLang's SamplingBatchInfo as the scheduler hands the worker a forward copy (penalties accumulated)."""
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    sps = [r.sampling_params for r in reqs]
    ks = [sp.top_k for sp in sps]
    return SamplingBatchInfo(
        temperatures=torch.tensor([[sp.temperature] for sp in sps]), top_ps=torch.tensor([sp.top_p for sp in sps]),
        top_ks=torch.tensor(ks, dtype=torch.int32), min_ps=torch.tensor([sp.min_p for sp in sps]),
        is_all_greedy=all(k <= 1 for k in ks), is_any_greedy=any(k <= 1 for k in ks),
        need_top_p_sampling=any(sp.top_p != 1.0 for sp in sps), need_top_k_sampling=any(k < V for k in ks),
        need_min_p_sampling=any(sp.min_p > 0 for sp in sps), vocab_size=V, device="cpu",
        acc_additive_penalties=torch.zeros(len(reqs), V) if penalised else None, sampling_seed=seeds)


def rig(release, budget=9, block=5, ranks=(0, 1, 0, 1), seed=0):
    g = torch.Generator().manual_seed(seed)
    seq_lens = torch.tensor([9, 12, 7])
    prefix = [torch.randint(0, V - 1, (int(L),), generator=g).tolist() for L in seq_lens]
    return make_round(release, budget, block, seq_lens, prefix, list(ranks), True)


def expected(world, adjust):
    """want(b, length): the plain server's greedy tokens, the fake target's logits adjusted by
    adjust(b, context, logits) -> float64 logits at every step."""
    def want(b, length):
        ctx = list(world.prefix_tokens[b]) + [int(world.roots[b])]
        out = []
        for _ in range(length):
            x = np.full(V, -1.0)
            x[greedy_next(ctx)] = 5.0
            out.append(int(np.argmax(adjust(b, ctx, x))))
            ctx.append(out[-1])
        return out
    return want


def decode_with(rnd, world, batch, adjust):
    res = rnd.decode(batch, None)
    return res, res.next_token_ids.view(len(world.seq_lens), rnd.block_size), expected(world, adjust)


class EvenOddGrammar:
    """A grammar (SGLang's BaseGrammarObject interface) over token ids: after an even token only odd ones
    may follow and the other way round, and MASK never. Its state is the accepted tokens."""

    def __init__(self, history):
        self.tokens = list(history)

    @staticmethod
    def allowed(last):
        return [t for t in range(V) if t != MASK and t % 2 != last % 2]

    def accept_token(self, token):
        assert token in self.allowed(self.tokens[-1]), "the traversal only walks tokens the grammar allows"
        self.tokens.append(token)

    def rollback(self, k):
        del self.tokens[-k:]

    def is_terminated(self):
        return False

    def allocate_vocab_mask(self, vocab_size, batch_size, device):
        return torch.zeros(batch_size, (vocab_size + 31) // 32, dtype=torch.int32)

    def fill_vocab_mask(self, vocab_mask, idx):
        vocab_mask[idx].zero_()
        for t in self.allowed(self.tokens[-1]):
            vocab_mask[idx, t // 32] |= 1 << (t % 32)

    @staticmethod
    def move_vocab_mask(vocab_mask, device):
        return vocab_mask.to(device)

    @staticmethod
    def apply_vocab_mask(logits, vocab_mask):
        bits = (vocab_mask.unsqueeze(-1).to(torch.int64) >> torch.arange(32)) & 1
        allowed = bits.view(vocab_mask.shape[0], -1)[:, : logits.shape[-1]].bool()
        logits.masked_fill_(~allowed, float("-inf"))


def test_grammar_masks_every_node_by_its_own_path(release):
    """Greedy output under a grammar equals the plain server's: at every step the argmax of the logits the
    grammar allows after the tokens so far — so a node is masked by the state its own path leads to."""
    rnd, world, host, captured, batch = rig(release)
    reqs = make_reqs(world, [9, 12, 7])
    barrier = []
    for r, root in zip(reqs, world.roots.tolist()):
        r.grammar = EvenOddGrammar(list(r.origin_input_ids) + [root])
    batch.reqs, batch.has_grammar, batch.sampling_info = reqs, True, sampling_info(reqs)
    masked = lambda b, ctx, x: np.where(np.isin(np.arange(V), EvenOddGrammar.allowed(ctx[-1])), x, -np.inf)
    res = rnd.decode(batch, None, grammar_barrier=lambda: barrier.append(1))
    got = res.next_token_ids.view(3, rnd.block_size)
    want = expected(world, masked)
    plain = [world.want(b, 4) for b in range(3)]
    assert barrier == [1]  # the scheduler's matchers advanced before the traversal read them
    for b in range(3):
        L = int(res.accept_lens[b])
        assert got[b, :L].tolist() == want(b, L)
    assert any(want(b, 4) != plain[b] for b in range(3))  # the grammar changed the greedy continuation


@pytest.mark.parametrize("source", ["output", "path"])
@pytest.mark.parametrize("kind", ["frequency", "presence", "repetition", "min_new"])
def test_penalties_count_each_nodes_path(release, kind, source):
    """Greedy output with a penalty equals the plain server's: each token's logits penalised by the whole
    output before it — the committed output, the root, then this round's tokens so far (the node's path).
    source 'output': the prefix is mostly output already; 'path': all prompt, so only the root and the
    path can count, in a world whose greedy continuation repeats itself within the round."""
    kw = {"frequency": dict(frequency_penalty=1.5), "presence": dict(presence_penalty=1.5),
          "repetition": dict(repetition_penalty=2.0), "min_new": dict(min_new_tokens=30, stop_token_ids=[3])}[kind]
    for seed in range(200):  # a world where the penalty changes what the round can accept (else nothing to see)
        rnd, world, host, captured, batch = rig(release, seed=seed)
        prompt_lens = [2, 3, 1] if source == "output" else world.seq_lens.tolist()
        plain = expected(world, lambda b, c, x: _runner_up(torch.tensor(x), kind).numpy())
        before = lambda b: set(world.prefix_tokens[b][prompt_lens[b]:] + [int(world.roots[b])])
        repeats = lambda b: (len(set(plain(b, 3))) < 3 if source == "path" else bool(set(plain(b, 3)) & before(b)))
        if kind == "min_new" or any(repeats(b) for b in range(3)):
            break

    def penalised(b, ctx, x):
        y = reference.penalized_logits(_runner_up(torch.tensor(x), kind).numpy(), ctx[prompt_lens[b]:],
                                       frequency=kw.get("frequency_penalty", 0.0),
                                       presence=kw.get("presence_penalty", 0.0),
                                       repetition=kw.get("repetition_penalty", 1.0),
                                       min_new_tokens=kw.get("min_new_tokens", 0),
                                       stop_tokens=[3, 5] if kind == "min_new" else ())  # stop ids + eos
        return y

    reqs = make_reqs(world, prompt_lens, **kw)
    batch.reqs, batch.sampling_info = reqs, sampling_info(reqs, penalised=True)
    real_run_verify = rnd.sgl.run_verify

    def verify(fb):
        out = real_run_verify(fb)
        _runner_up(out.logits_output.next_token_logits, kind)
        return out

    rnd.sgl.run_verify = verify
    res, got, want = decode_with(rnd, world, batch, penalised)
    reached = False
    for b in range(3):
        L = int(res.accept_lens[b])
        assert got[b, :L].tolist() == want(b, L)
        diff = [k for k in range(4) if want(b, 4)[k] != plain(b, 4)[k]]
        reached |= bool(diff) and L > diff[0]  # a token the penalty chose was committed
    assert reached
    # the counts carry the committed output into the next round: prefix outputs, root, accepted drafts, no bonus
    for b in range(3):
        L = int(res.accept_lens[b])
        committed = world.prefix_tokens[b][prompt_lens[b]:] + [int(world.roots[b])] + got[b, :L - 1].tolist()
        row = rnd.penalty_counts.counts[b]
        assert row.tolist() == np.bincount(committed, minlength=V).astype(float).tolist()
        assert int(rnd.penalty_counts.lengths[b]) == len(committed)


def _runner_up(logits, kind):
    """The fake target's logits with a runner-up one below each greedy token (so a penalty on the greedy
    token hands it the lead); for min_new_tokens the stop token 3 above everything, so holding it back matters."""
    best = logits.argmax(-1, keepdim=True)
    logits.scatter_(-1, (best + 1) % (V - 1), 4.0)
    if kind == "min_new":
        logits[..., 3] = 6.0
    return logits


def test_filters_and_independent_requests(release):
    """top_p 1e-6 / min_p 0.9999 at T = 1.5 leave the argmax only (the output is greedy); three requests
    sampled at T = 1 from the same logits draw from their own streams (not all equal), reproducibly."""
    rnd, world, host, captured, batch = rig(release)
    reqs = make_reqs(world, [9, 12, 7], temperature=1.5, top_p=1e-6)
    reqs[1].sampling_params.top_p, reqs[1].sampling_params.min_p = 1.0, 0.9999
    batch.reqs, batch.sampling_info = reqs, sampling_info(reqs)
    res, got, want = decode_with(rnd, world, batch, lambda b, c, x: x)
    for b in range(3):
        L = int(res.accept_lens[b])
        assert got[b, :L].tolist() == want(b, L)

    outs = []
    for _ in range(2):
        rnd, world, host, captured, batch = rig(release)
        rnd.sgl.run_verify = lambda fb, bs=3: _flat_target(fb, bs)
        reqs = make_reqs(world, [9, 12, 7], temperature=1.0)
        batch.reqs, batch.sampling_info = reqs, sampling_info(reqs)
        res = rnd.decode(batch, None)
        outs.append(res.next_token_ids.view(3, -1)[:, 0].tolist())
    assert outs[0] == outs[1]                    # the same server seed and rows: the same draws
    assert len(set(outs[0])) > 1                 # three requests, three streams (one shared stream: all equal)


def test_each_requests_tree_is_ranked_under_its_own_law(release, monkeypatch):
    """The round hands the draft head each request's law from SGLang's SamplingBatchInfo (through the adapter):
    in a mixed batch, request b's verified tree is the one keys.DraftKeys builds from its own sampling
    parameters (keys.py) — greedy keys for the greedy request, the tempered and filtered draft for the others."""
    from sglang_ddtree.keys import DraftKeys
    from sglang_ddtree.sampling import NodeLaw
    from sglang_ddtree.sglang.draft_head import DraftTreeHead
    from sglang_ddtree.tree import build_tree_from_topk

    seen, real = [], DraftTreeHead.build
    monkeypatch.setattr(DraftTreeHead, "build", lambda self, hidden, *a: seen.append((self, hidden)) or
                        real(self, hidden, *a))
    rnd, world, host, captured, batch = rig(release, budget=12)
    laws = [{"temperature": 0.0}, {"temperature": 0.7, "top_p": 0.8}, {"temperature": 1.3, "top_k": 3, "min_p": 0.05}]
    reqs = [make_reqs(world, [9, 12, 7], **law)[b] for b, law in enumerate(laws)]
    batch.reqs, batch.sampling_info = reqs, sampling_info(reqs)
    rnd.decode(batch, None)
    ((head, hidden),) = seen
    logits = head.logits(hidden, 3)
    trees = []
    for b, r in enumerate(reqs):
        sp = r.sampling_params
        own = NodeLaw(torch.tensor([sp.temperature]), torch.tensor([sp.top_k]), torch.tensor([sp.top_p]),
                      torch.tensor([sp.min_p]))
        lp, ids = DraftKeys(head.L)(logits[b:b + 1], head.k, "cpu", own)
        trees.append(build_tree_from_topk(lp, ids, head.budget, root_tokens=world.roots[b:b + 1],
                                          backend="reference").tokens[0])
        assert captured["tokens"][b].tolist() == trees[-1].tolist(), b
    greedy_lp, greedy_ids = DraftKeys(head.L)(logits, head.k, "cpu", None)
    greedy = build_tree_from_topk(greedy_lp, greedy_ids, head.budget, root_tokens=world.roots,
                                  backend="reference").tokens
    assert torch.equal(greedy[0], trees[0]) and not torch.equal(greedy[1], trees[1])  # the laws matter here


def _flat_target(fb, bs):
    """A target that is uniform over the vocabulary at every node (what sampling draws from)."""
    import types

    n = int(fb.draft_token_num)
    out = types.SimpleNamespace(next_token_logits=torch.zeros(bs * n, V), hidden_states=torch.zeros(bs * n, 6))
    return types.SimpleNamespace(logits_output=out, can_run_cuda_graph=True, routed_experts_output=None,
                                 indexer_topk_output=None)


def test_logprobs_of_the_committed_tokens(release):
    """return_logprob with top_logprobs_num: per committed token, the log-prob of the adjusted logits at the
    node it was accepted from (the plain server's log_softmax of the logits it sampled from)."""
    rnd, world, host, captured, batch = rig(release)
    reqs = make_reqs(world, [9, 12, 7], logit_bias={"4": 3.0})
    batch.reqs, batch.sampling_info = reqs, sampling_info(reqs)
    batch.sampling_info.logit_bias = torch.zeros(3, V)
    batch.sampling_info.logit_bias[:, 4] = 3.0
    batch.return_logprob, batch.top_logprobs_nums, batch.token_ids_logprobs = True, [2, 0, 1], [None, [1, 2], None]
    res, got, want = decode_with(rnd, world, batch, lambda b, c, x: x + 3.0 * (np.arange(V) == 4))
    lo = res.logits_output
    block = rnd.block_size
    for b in range(3):
        L = int(res.accept_lens[b])
        assert got[b, :L].tolist() == want(b, L)
        ctx = list(world.prefix_tokens[b]) + [int(world.roots[b])]
        for j in range(L):
            x = np.full(V, -1.0)
            x[greedy_next(ctx)] = 5.0
            x[4] += 3.0
            lp = x - np.log(np.exp(x - x.max()).sum()) - x.max()
            assert float(lo.next_token_logprobs[b, j]) == pytest.approx(lp[int(got[b, j])], abs=1e-5)
            if b == 0:
                top = lo.next_token_top_logprobs_idx[b * block + j]
                assert list(top)[:2] == list(np.argsort(-lp, kind="stable")[:2])
            ctx.append(int(got[b, j]))


def test_no_request_feature_raises_in_the_round(release):
    """All of them at once, mixed across the batch: a grammar, sampling filters, penalties, logit bias,
    min_new_tokens, logprobs, a seed — the round serves the batch."""
    rnd, world, host, captured, batch = rig(release)
    reqs = make_reqs(world, [4, 12, 2], temperature=0.7, top_k=5, top_p=0.9, min_p=0.05, frequency_penalty=0.3,
                     presence_penalty=0.2, repetition_penalty=1.1, min_new_tokens=3, logit_bias={"7": -2.0})
    for r, root in zip(reqs, world.roots.tolist()):
        r.grammar = EvenOddGrammar(list(r.origin_input_ids) + list(r.output_ids) + [root])
    reqs[0].grammar = None
    batch.reqs, batch.has_grammar = reqs, True
    batch.sampling_info = sampling_info(reqs, penalised=True, seeds=torch.tensor([5, 6, 7]))
    batch.return_logprob, batch.top_logprobs_nums, batch.token_ids_logprobs = True, [1, 1, 1], [None, None, None]
    res = rnd.decode(batch, None, grammar_barrier=lambda: None)
    assert bool((res.accept_lens >= 1).all())
    out = res.next_token_ids.view(3, -1)
    for b in (1, 2):  # the grammar holds on the committed tokens
        L, last = int(res.accept_lens[b]), int(world.roots[b])
        for t in out[b, :L].tolist():
            assert t in EvenOddGrammar.allowed(last)
            last = t


def test_a_prefill_with_logprobs_is_served(release):
    """0.5.17's DFLASH raises on any batch with return_logprob; the DDTree worker runs DFLASH's prefill steps
    itself for them: the target's prefill (which computes the logprobs) with the drafter's layers captured,
    the prompt's hidden states into the draft KV at their positions, the sampled token as the next root."""
    import types

    if release.Adapter.supports("dflash_logprobs"):
        pytest.skip(f"{release.Adapter.RELEASE}'s DFLASH serves logprob prefills itself (DDTree calls it)")
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    seen = {}

    def target_forward(batch, capture_hidden_mode):
        seen["capture"] = capture_hidden_mode
        lo = types.SimpleNamespace(hidden_states=torch.arange(7.0).view(7, 1), next_token_logprobs=torch.zeros(2))
        return types.SimpleNamespace(logits_output=lo, next_token_ids=torch.tensor([11, 12]))

    host = types.SimpleNamespace(
        ADAPTER=release.Adapter, target_worker=types.SimpleNamespace(forward_batch_generation=target_forward),
        model_runner=types.SimpleNamespace(server_args=types.SimpleNamespace(attention_backend="torch_native")),
        _append_target_hidden_to_draft_kv_by_loc=lambda **kw: seen.update(append=kw))
    host._make_next_draft_input_prefill = lambda **kw: DFlashWorkerV2._make_next_draft_input_prefill(host, **kw)
    host._prefill = lambda *a: release.WorkerBase._prefill(host, *a)
    batch = types.SimpleNamespace(return_logprob=True, forward_mode=ForwardMode.EXTEND, is_extend_in_batch=True,
                                  extend_lens=[3, 4], prefix_lens=[5, 0], seq_lens=torch.tensor([8, 4]),
                                  out_cache_loc=torch.arange(100, 107))
    published = []
    out = release.WorkerBase.dflash_forward(host, batch, published.append, None, None)
    assert seen["capture"] == CaptureHiddenMode.FULL
    assert seen["append"]["positions"].tolist() == [5, 6, 7, 0, 1, 2, 3]
    assert torch.equal(seen["append"]["cache_loc"], batch.out_cache_loc)
    assert seen["append"]["target_hidden"].view(-1).tolist() == list(range(7))
    assert out.logits_output.hidden_states is None and out.next_draft_input.bonus_tokens.tolist() == [11, 12]
    assert torch.equal(published[0], batch.seq_lens) and torch.equal(out.new_seq_lens, batch.seq_lens)


def test_a_request_sampling_seed_gives_its_nodes_their_own_stream(release):
    """A request that sends `sampling_seed` draws from its own stream (its seed, its position), whatever the round
    counter; the others from the server's seed, their pool row and the round: the seeded request's sample is
    reproducible without deterministic inference."""
    rnd, world, host, captured, batch = rig(release)
    reqs = make_reqs(world, [4, 12, 2], temperature=1.0)
    reqs[1].sampling_params.sampling_seed = 1234
    batch.reqs = reqs
    batch.sampling_info = sampling_info(reqs)
    from sglang_ddtree.sglang.decode_round import _ServerRound

    host_round = _ServerRound(rnd, batch, None, None)
    _, seed_a, step_a = host_round.node_law(round_no=3)
    _, seed_b, step_b = host_round.node_law(round_no=9)
    assert int(seed_a[1]) == int(seed_b[1]) == 1234 and int(step_a[1]) == int(step_b[1]) == int(batch.seq_lens[1])
    assert int(step_a[0]) == 3 and int(step_b[0]) == 9 and int(seed_a[0]) != 1234
    for r in reqs:
        r.sampling_params.sampling_seed = None
    _, _, step = host_round.node_law(round_no=3)
    assert step.tolist() == [3, 3, 3]  # no request gave a seed: the round counter for all
