"""The worker's decode round (tree → verify inputs → accept → KV move → drafter commit → result) on CPU.

Both verify paths: the default one (tree_attention: the round loads the tree's bitsets for the tree kernel and
builds no FULL_MASK — a FULL_MASK build fails the test) and the FULL_MASK fallback.

SGLang's two forwards are replaced by a deterministic fake model: the target's greedy next token is a hash
of the whole context, and the fake "attention" writes node identities into a fake KV pool. The drafter's
logits favour the target's true continuation (at rank 0 or 1 per depth, so acceptance has to go through
siblings). Checked against an independent greedy decode of the fake model: committed tokens, lengths,
which KV rows end up at slots prefix..prefix+len, and what the drafter's KV writer is handed.
"""
import types

import pytest
import torch

V, H = 40, 6


def greedy_next(context):
    return (sum((i + 1) * t * 31 for i, t in enumerate(context)) + 7 * len(context)) % V


class FakeKV:
    def __init__(self, slots):
        self.kv = torch.full((slots,), -1, dtype=torch.int64)

    def move_kv_cache(self, tgt, src):
        self.kv[tgt] = self.kv[src].clone()


class FakeTreeAttention:
    """What the worker hands the tree kernel: the round's ancestor bitsets."""

    def __init__(self):
        self.loaded = []

    def load_mask(self, mask_bits):
        self.loaded.append(mask_bits.clone())


def make_worker(monkeypatch, budget, block, bs, prefix_tokens, seq_lens, ranks, tree_attention=True):
    from sglang_ddtree.round import RoundOps
    from sglang_ddtree.sglang import worker as W

    w = object.__new__(W.DDTreeWorkerV2)
    n = budget + 1
    w.verify_width, w.budget, w.block_size = n, budget, block
    w.device, w.round, w._round, w._seed, w._warned_sampling = torch.device("cpu"), RoundOps("cpu"), 0, 0, False
    w.tree_attn = FakeTreeAttention() if tree_attention else None
    if tree_attention:
        def no_full_mask(*a, **k):
            raise AssertionError("the default verify path built a FULL_MASK")
        monkeypatch.setattr(W, "full_tree_mask", no_full_mask)
    w._node_offsets = torch.arange(n)
    slots_per_req = 64
    req_to_token = torch.arange(bs * slots_per_req).view(bs, slots_per_req) + 1  # slot 0 = padding slot
    kv = FakeKV(bs * slots_per_req + 1)
    w.model_runner = types.SimpleNamespace(req_to_token_pool=types.SimpleNamespace(req_to_token=req_to_token),
                                           token_to_kv_pool=kv)
    roots = torch.tensor([greedy_next(p) for p in prefix_tokens])  # the previous round's bonus

    def draft(batch, draft_input, bs_):
        # per-depth draft logits: the true chain token at rank ranks[d], a decoy above it when rank 1
        lp = torch.full((bs_, block - 1, V), -5.0)
        for b in range(bs_):
            ctx = list(prefix_tokens[b]) + [int(roots[b])]
            for d in range(block - 1):
                t = greedy_next(ctx)
                lp[b, d, t] = 2.0
                if ranks[d] == 1:
                    lp[b, d, (t + 1) % V] = 3.0
                ctx.append(t)
        from sglang_ddtree import build_tree

        return build_tree(lp, budget, root_tokens=roots, seq_lens=seq_lens, backend="cpu")

    w._draft = draft
    captured = {}

    class FakeVerifyInput:
        def __init__(self, **kw):
            captured["verify"] = kw

        def prepare_for_verify(self, batch, target_worker):
            return "fb", False

    def target_forward(batch=None, forward_batch=None, is_verify=False, skip_attn_backend_init=False):
        kwv = captured["verify"]
        tokens = kwv["draft_token"].view(bs, n)
        parents = captured["tree"].parents
        logits = torch.full((bs * n, V), -1.0)
        hidden = torch.zeros(bs * n, H)
        for b in range(bs):
            for i in range(n):
                path, j = [], i
                while j >= 0:
                    path.append(int(tokens[b, j]))
                    j = int(parents[b, j])
                ctx = list(prefix_tokens[b]) + path[::-1]
                logits[b * n + i, greedy_next(ctx)] = 5.0
                hidden[b * n + i, 0] = 1000 * b + i
                kv.kv[int(batch_slots[b, i])] = 1000 * b + i  # the verify writes node i's KV at its slot
        return types.SimpleNamespace(logits_output=types.SimpleNamespace(next_token_logits=logits,
                                                                         hidden_states=hidden),
                                     can_run_cuda_graph=True)

    original_draft = w._draft

    def draft_and_capture(batch, draft_input, bs_):
        tree = original_draft(batch, draft_input, bs_)
        captured["tree"] = tree
        return tree

    w._draft = draft_and_capture
    w._target_worker = types.SimpleNamespace(forward_batch_generation=target_forward)
    w._append_target_hidden_to_draft_kv_by_loc = lambda **kw: captured.setdefault("draft_commit", kw)
    w._make_next_draft_input_decode = lambda **kw: kw
    monkeypatch.setattr(W, "DFlashVerifyInput", FakeVerifyInput)
    cols = seq_lens.unsqueeze(1) + torch.arange(n)
    batch_slots = req_to_token[torch.arange(bs).unsqueeze(1), cols]
    return w, kv, captured, roots, batch_slots


@pytest.mark.parametrize("tree_attention", [True, False], ids=["tree_kernel", "full_mask"])
@pytest.mark.parametrize("budget,block,ranks", [(7, 4, [0, 0, 0]), (12, 5, [0, 1, 0, 1]), (9, 6, [1, 1, 0, 0, 1])])
def test_decode_round_commits_the_targets_greedy_tokens(plugins_loaded, monkeypatch, budget, block, ranks,
                                                        tree_attention):
    bs = 3
    g = torch.Generator().manual_seed(budget)
    seq_lens = torch.tensor([5, 9, 12])
    prefix_tokens = [torch.randint(0, V, (int(L),), generator=g).tolist() for L in seq_lens]
    w, kv, captured, roots, slots = make_worker(monkeypatch, budget, block, bs, prefix_tokens, seq_lens, ranks,
                                                tree_attention)
    batch = types.SimpleNamespace(spec_info=types.SimpleNamespace(), seq_lens=seq_lens.clone(),
                                  seq_lens_cpu=seq_lens.to(torch.int32), seq_lens_sum=int(seq_lens.sum()),
                                  req_pool_indices=torch.arange(bs), sampling_info=None, out_cache_loc=None)
    published = []
    res = w._decode_round(batch, published.append)
    commit = res.accept_lens
    assert res.speculative_num_draft_tokens == block
    out = res.next_token_ids.view(bs, block)
    for b in range(bs):
        ctx = list(prefix_tokens[b]) + [int(roots[b])]
        want = []
        for _ in range(block):
            want.append(greedy_next(ctx))
            ctx.append(want[-1])
        L = int(commit[b])
        assert 1 <= L <= block
        assert out[b, :L].tolist() == want[:L]          # accepted drafts then the bonus, all the target's
        assert out[b, L:].tolist() == [0] * (block - L)
        assert int(res.next_draft_input["bonus_tokens"][b]) == want[L - 1]
        # the walk goes as deep as the tree holds the target's own continuation
        tree, cur, depth = captured["tree"], 0, 0
        while depth < block - 1:
            kids = [c for c in range(tree.n) if int(tree.parents[b, c]) == cur and int(tree.tokens[b, c]) == want[depth]]
            if not kids:
                break
            cur, depth = kids[0], depth + 1
        assert L == depth + 1
        if ranks == [0] * (block - 1):
            assert L == block  # the drafter's top-1 chain is the target's: everything is accepted
    assert torch.equal(res.new_seq_lens, seq_lens + commit.to(seq_lens.dtype))
    assert torch.equal(published[0], res.new_seq_lens)
    # KV: slot prefix + k now holds accepted node k's KV
    acc = captured["tree"]
    dc = captured["draft_commit"]
    for b in range(bs):
        L = int(commit[b])
        nodes = []
        cur = 0
        for k in range(L):
            nodes.append(cur)
            if k + 1 < L:  # the next accepted node: the child of cur carrying the target's token
                kids = [c for c in range(acc.n) if int(acc.parents[b, c]) == cur
                        and int(acc.tokens[b, c]) == out[b, k]]
                cur = kids[0]
        assert [int(kv.kv[int(slots[b, k])]) for k in range(L)] == [1000 * b + i for i in nodes]
        rows = dc["target_hidden"].view(bs, block, H)[b, :L, 0].tolist()
        assert rows == [1000 * b + i for i in nodes]
        assert dc["positions"].view(bs, block)[b].tolist() == list(range(int(seq_lens[b]), int(seq_lens[b]) + block))
        assert dc["cache_loc_2d"][b].tolist() == slots[b, :block].tolist()
    assert torch.equal(dc["commit_lens"], commit)
    # verify inputs: n nodes per request, positions = prefix + depth; the tree kernel gets the bitsets and no
    # FULL_MASK exists, the fallback gets a FULL_MASK covering prefix + tree
    v = captured["verify"]
    assert v["draft_token_num"] == budget + 1
    assert torch.equal(v["positions"].view(bs, -1), seq_lens.unsqueeze(1) + acc.depths.to(torch.int64))
    if tree_attention:
        assert v["custom_mask"] is None
        assert len(w.tree_attn.loaded) == 1 and torch.equal(w.tree_attn.loaded[0], acc.mask_bits)
    else:
        assert v["custom_mask"].numel() >= (budget + 1) * int((seq_lens + budget + 1).sum())
    assert torch.equal(batch.out_cache_loc.view(bs, -1), slots)


def test_decode_round_partial_acceptance(plugins_loaded, monkeypatch):
    """A drafter that is right only at depth 1: one draft token and the bonus get committed."""
    bs, budget, block = 2, 6, 4
    seq_lens = torch.tensor([3, 4])
    prefix_tokens = [[1, 2, 3], [4, 5, 6, 7]]
    w, kv, captured, roots, slots = make_worker(monkeypatch, budget, block, bs, prefix_tokens, seq_lens, [0, 0, 0])
    real_draft = w._draft

    def wrong_after_first(batch, draft_input, bs_):
        tree = real_draft(batch, draft_input, bs_)
        deep = tree.depths >= 2
        tree.tokens = torch.where(deep, (tree.tokens + 1) % V, tree.tokens)  # every deeper guess is wrong
        captured["tree"] = tree
        return tree

    w._draft = wrong_after_first
    batch = types.SimpleNamespace(spec_info=types.SimpleNamespace(), seq_lens=seq_lens.clone(),
                                  seq_lens_cpu=seq_lens.to(torch.int32), seq_lens_sum=7,
                                  req_pool_indices=torch.arange(bs), sampling_info=None, out_cache_loc=None)
    res = w._decode_round(batch, None)
    assert res.accept_lens.tolist() == [2, 2]
