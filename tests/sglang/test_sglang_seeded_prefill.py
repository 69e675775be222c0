"""A seeded request's first token (sglang/seeded_prefill.py) through SGLang's real Sampler on both releases.

The prefill's token comes from SGLang's sampler; in a DDTREE server the adapter wraps that sampler so a request with
a `sampling_seed` draws it from its own stream. Checked here on the real Sampler.forward and SamplingBatchInfo:
a seeded row's token depends only on its seed, logits and law (not on torch's generator, not on its batch), greedy
and unseeded rows keep SGLang's token, the returned logprob is the drawn token's, a token its law filters out (or
a grammar masked out) is never drawn, and the draws follow the request's filtered law (chi-square: it catches a
draw that ignores the temperature or the top-p filter, each shown to fail below).
"""
import contextlib
import types

import pytest
import torch
from test_sglang_requests import publish  # noqa: F401  (fixture: publishes a server's arguments)

from sglang_ddtree import sampling
from sglang_ddtree.round import RoundOps

V = 16


@pytest.fixture
def sampler(publish, monkeypatch, sglang_release):  # noqa: F811
    """SGLang's Sampler of a DDTREE server (its pytorch backend, as on the CPU), wrapped as the worker wraps it."""
    publish("ddtree", "--speculative-num-draft-tokens", "17", "--sampling-backend", "pytorch")
    from sglang.srt.layers import sampler as S

    from sglang_ddtree.sglang import adapters
    from sglang_ddtree.sglang.adapters import dflash_v2, hooks

    solo = types.SimpleNamespace(tp_group=types.SimpleNamespace(device_group=None))  # one rank, no collectives
    for name in ("get_parallel", "get_tp_group"):
        if hasattr(S, name):
            monkeypatch.setattr(S, name, (lambda: solo) if name == "get_parallel" else (lambda: solo.tp_group))
    s = S.Sampler()
    assert isinstance(s, adapters.for_release(sglang_release).Adapter.SAMPLER)
    return s, hooks.install_seeded_prefill(s, RoundOps("cpu", "cpu"), dflash_v2.law_of)


def info(temperatures, top_ps=None, top_ks=None, min_ps=None):
    """SGLang's SamplingBatchInfo of requests with these laws (SGLang carries temperature 0 as T 1, top_k 1)."""
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

    R = len(temperatures)
    greedy = [t == 0 for t in temperatures]
    top_ps = top_ps or [1.0] * R
    top_ks = [1 if g else (k or V) for g, k in zip(greedy, top_ks or [None] * R)]
    min_ps = min_ps or [0.0] * R
    return SamplingBatchInfo(
        temperatures=torch.tensor([[1.0 if g else t] for g, t in zip(greedy, temperatures)]),
        top_ps=torch.tensor(top_ps), top_ks=torch.tensor(top_ks, dtype=torch.int32), min_ps=torch.tensor(min_ps),
        is_all_greedy=all(greedy), is_any_greedy=any(greedy), need_top_p_sampling=any(p < 1 for p in top_ps),
        need_top_k_sampling=any(k < V for k in top_ks), need_min_p_sampling=any(m > 0 for m in min_ps),
        vocab_size=V, device="cpu")


def run(s, logits, sampling_info, seeds=None, logprob=False, torch_seed=0):
    """One prefill's sampling: (tokens, the logits output) from Sampler.forward, armed with seeds (seed, given,
    step) as the worker arms it."""
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput

    sampler, hook = s
    torch.manual_seed(torch_seed)
    out = LogitsProcessorOutput(next_token_logits=logits.clone())
    R = logits.shape[0]
    with hook.prefill(seeds):
        ids = sampler(out, sampling_info, logprob, [0] * R, [None] * R, torch.full((R,), 9))
    return ids, out


def seeds_of(given, seed=7, step=9):
    R = len(given)
    return (torch.full((R,), seed, dtype=torch.int64) + torch.arange(R), torch.tensor(given),
            torch.full((R,), step, dtype=torch.int64))


def test_a_seeded_rows_token_is_its_seeds_whatever_torchs_generator_and_its_batch(sampler):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, V, generator=g)
    law = info([1.0, 0.8, 1.0, 0.0, 1.3, 1.0], top_ps=[1.0, 0.9, 1.0, 1.0, 1.0, 1.0], top_ks=[None, None, None, None,
                                                                                             5, None])
    given = [True, True, False, True, True, True]
    runs = [run(sampler, logits, law, seeds_of(given), torch_seed=t)[0] for t in range(12)]
    for r in (0, 1, 4, 5):
        assert len({int(x[r]) for x in runs}) == 1, f"seeded row {r} followed torch's generator"
    assert len({int(x[2]) for x in runs}) > 1, "the unseeded row no longer draws from SGLang's sampler"
    assert {int(x[3]) for x in runs} == {int(logits[3].argmax())}  # greedy: SGLang's argmax
    # the seeded row's token is its own (seed, step, law) draw, alone or in another batch
    alone = run(sampler, logits[4:5], info([1.3], top_ks=[5]), (torch.tensor([7 + 4]), torch.tensor([True]),
                                                                 torch.tensor([9])), torch_seed=99)[0]
    assert int(alone[0]) == int(runs[0][4])
    # another seed or another step draws another stream
    other = {int(run(sampler, logits, law, seeds_of(given, seed=s, step=st))[0][0]) for s in range(8) for st in (9, 10)}
    assert len(other) > 1


def test_the_logprob_returned_is_the_drawn_tokens(sampler):
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(1))
    law = info([1.0, 0.7, 1.0])
    ids, out = run(sampler, logits, law, seeds_of([True, True, False]), logprob=True)
    want = torch.log_softmax(logits / torch.tensor([[1.0], [0.7], [1.0]]), -1).gather(1, ids.view(-1, 1).long())
    assert torch.allclose(out.next_token_logprobs.view(-1), want.view(-1), atol=1e-5)


def test_a_token_the_law_or_a_mask_removes_is_never_drawn(sampler):
    """top-k 3 keeps three tokens; a token at -inf (as a grammar's mask or a min_new_tokens hold leaves it) is out."""
    R = 400
    logits = torch.randn(V, generator=torch.Generator().manual_seed(2)).repeat(R, 1)
    masked = int(logits[0].argsort(descending=True)[1])  # the second most likely token
    logits[:, masked] = float("-inf")
    ids, _ = run(sampler, logits, info([1.0] * R, top_ks=[3] * R), seeds_of([True] * R))
    kept = set(logits[0].argsort(descending=True)[:3].tolist())
    assert masked not in kept and set(ids.tolist()) == kept


def chi_square_p(ids: torch.Tensor, probs: torch.Tensor) -> float:
    """Goodness of fit of the drawn tokens to probs [V] (a token the law gives no mass must not be drawn)."""
    from scipy.stats import chisquare

    counts = torch.bincount(ids.long(), minlength=V).double()
    keep = probs > 0
    assert counts[~keep].sum() == 0, "a token outside the law was drawn"
    expected = probs[keep].double() / probs[keep].double().sum() * counts.sum()
    return float(chisquare(counts[keep].numpy(), expected.numpy()).pvalue)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.6, 0.8)])
def test_the_drawn_tokens_follow_the_requests_filtered_law(sampler, temperature, top_p):
    """4,000 seeded requests with one prompt's logits: their tokens against the law's probabilities at level 1e-4.
    The test's power: the same draws are rejected against the law at another temperature, and hold tokens a
    tighter top-p would have dropped."""
    R = 4000
    base = torch.linspace(2.0, -1.5, V)
    ids, _ = run(sampler, base.repeat(R, 1), info([temperature] * R, top_ps=[top_p] * R), seeds_of([True] * R))
    law = sampling.law_probs(base.view(1, V), temperature, top_p=top_p).view(V)
    assert chi_square_p(ids, law) > 1e-4
    for wrong_t, wrong_p in ((1.0 if temperature != 1.0 else 0.6, top_p), (temperature, 0.5)):
        wrong = sampling.law_probs(base.view(1, V), wrong_t, top_p=wrong_p).view(V)
        with pytest.raises(AssertionError) if wrong_p < top_p else contextlib.nullcontext():
            assert chi_square_p(ids, wrong) < 1e-4


def test_the_adapter_reads_each_requests_seed_and_length(sglang_release):
    """prefill_seeds: the seeds of the requests that sent one, their lengths as the step; None without any."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    from sglang_ddtree.sglang import adapters

    def req(seed):
        sp = SamplingParams(max_new_tokens=8, temperature=1.0, sampling_seed=seed)
        sp.normalize(None)
        return Req("r", "", [1, 2, 3], sp, vocab_size=V)

    adapter = adapters.for_release(sglang_release).Adapter.__new__(adapters.for_release(sglang_release).Adapter)
    batch = types.SimpleNamespace(reqs=[req(5), req(None), req(2 ** 40)], sampling_info=None,
                                  seq_lens=torch.tensor([3, 8, 4]))
    seed, given, step = adapter.prefill_seeds(batch)
    assert seed.tolist() == [5, 0, 2 ** 40] and given.tolist() == [True, False, True] and step.tolist() == [3, 8, 4]
    assert adapter.prefill_seeds(types.SimpleNamespace(reqs=[req(None)], sampling_info=None,
                                                       seq_lens=torch.tensor([3]))) is None


def test_the_prefill_stream_is_no_rounds():
    """A round draws node i of a request from stream i (i < 4096), a drawn tree's node v from rejection.py's ACCEPT /
    BONUS / DRAW streams + v, a DFlash2 walk from WALK_STREAM + v (v < 1024): the first token's stream is none of
    them, so it is independent of every draw the request's rounds make at the same step."""
    from sglang_ddtree import rejection
    from sglang_ddtree.engine.dflash2 import WALK_STREAM
    from sglang_ddtree.sglang.seeded_prefill import PREFILL_STREAM

    assert PREFILL_STREAM >= 4096
    for base in (rejection.ACCEPT_STREAM, rejection.BONUS_STREAM, rejection.DRAW_STREAM, WALK_STREAM):
        assert not base <= PREFILL_STREAM < base + 1024, base
