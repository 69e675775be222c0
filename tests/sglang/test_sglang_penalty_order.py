"""Why a plain SGLang server's greedy output under frequency + repetition penalties differs from DDTree's on some
prompts (and from run to run), on SGLang's real penalizers, both releases.

The plain server's synchronous path (`--disable-overlap-schedule`) applies its penalizers one by one in the order
of a dict built from a *set* of penalizer classes (`SamplingBatchInfo.from_schedule_batch`); a class hashes by
its address, so that order changes from process to process. Frequency (additive) then repetition (scaling) is not
repetition then frequency, so the plain server's logits, and where a near tie flips its greedy output, depend on the
process. SGLang's speculative path applies every additive penalty first, then the scaling ones, as DDTree does
(sglang_ddtree/penalties.py, reference.penalized_logits). Each penalty alone is order-free (test_served_requests).
This test fails if SGLang fixes an order (the process test), or if DDTree's order stops being SGLang's speculative
path's.
"""
import inspect
import subprocess
import sys

import numpy as np
import pytest
import torch

from sglang_ddtree import reference

V = 32
OUTPUT = [3, 3, 7, 9, 3, 12]  # the tokens generated so far: 3 three times, 7, 9, 12 once


class Batch:  # what the orchestrator reads of a ScheduleBatch (a weak reference to it, its requests, its device)
    def __init__(self, reqs):
        self.reqs, self.device = reqs, "cpu"


def orchestrator(order, frequency=0.6, repetition=1.4):
    """SGLang's orchestrator over one request with both penalties, its penalizers in `order` (classes), fed OUTPUT."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling import penaltylib
    from sglang.srt.sampling.sampling_params import SamplingParams

    sp = SamplingParams(max_new_tokens=8, frequency_penalty=frequency, repetition_penalty=repetition)
    sp.normalize(None)
    batch = Batch([Req("r", "", [1, 2], sp, vocab_size=V)])
    orch = penaltylib.BatchedPenalizerOrchestrator(V, batch, penalizers=order)
    for t in OUTPUT:
        orch.cumulate_output_tokens(torch.tensor([t]))
    orch._keep = batch  # the orchestrator holds its batch weakly
    return orch


def logits():
    g = torch.Generator().manual_seed(5)
    return torch.randn(1, V, generator=g) * 3


@pytest.fixture(autouse=True)
def eager():
    """SGLang's scaling penalty is torch.compile'd; run it eagerly (the same ops) rather than compile it here."""
    with torch.compiler.set_stance("force_eager"):
        yield


def test_the_plain_path_applies_penalizers_in_its_dicts_order_and_the_order_matters():
    from sglang.srt.sampling import penaltylib

    freq, rep = penaltylib.BatchedFrequencyPenalizer, penaltylib.BatchedRepetitionPenalizer
    x = logits()
    additive_first = reference.penalized_logits(x[0].numpy(), OUTPUT, frequency=0.6, repetition=1.4)
    for order in ([freq, rep], [rep, freq]):
        orch = orchestrator(dict.fromkeys(order))  # a dict keeps the order given; SGLang passes a set
        assert list(orch.penalizers) == order
        got = x.clone()
        orch.apply(got)  # the synchronous plain path
        if order[0] is freq:
            np.testing.assert_allclose(got[0].numpy(), additive_first, rtol=1e-6)
        else:
            assert not np.allclose(got[0].numpy(), additive_first, rtol=1e-4), "the order made no difference"
    # the speculative path: additive penalties first whatever the dict's order, as DDTree (reference) does
    for order in ([freq, rep], [rep, freq]):
        got = x.clone()
        orchestrator(dict.fromkeys(order)).apply(got, repeat=1)
        np.testing.assert_allclose(got[0].numpy(), additive_first, rtol=1e-6)


def test_sglang_hands_its_orchestrator_a_set_of_penalizer_classes():
    from sglang.srt.sampling import sampling_batch_info

    src = inspect.getsource(sampling_batch_info.SamplingBatchInfo.from_schedule_batch)
    assert "penalizers={" in src and "penaltylib.BatchedRepetitionPenalizer" in src


# a fresh process: the torchvision stand-in as conftest installs it, then SGLang's set, as from_schedule_batch makes it
ORDER = ("import sys; sys.path.insert(0, {here!r}); import torchvision_stub; "
         "torchvision_stub.install(hide_from_transformers={hide}); "
         "import sglang.srt.sampling.penaltylib as p; s = {{p.BatchedFrequencyPenalizer, p.BatchedMinNewTokensPenalizer, "
         "p.BatchedPresencePenalizer, p.BatchedRepetitionPenalizer}}; n = [c.__name__ for c in s]; "
         "print(n.index('BatchedFrequencyPenalizer') < n.index('BatchedRepetitionPenalizer'))")


def test_that_sets_order_changes_from_process_to_process(hide_torchvision):
    """Fresh processes (up to 12, four at a time) iterate SGLang's set of penalizers with frequency before
    repetition in some and after it in others (each way has probability about one half in a process)."""
    import os

    code = ORDER.format(here=os.path.dirname(os.path.abspath(__file__)), hide=hide_torchvision)
    seen = set()
    for _ in range(3):
        procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True) for _ in range(4)]
        seen |= {p.communicate(timeout=300)[0].strip().splitlines()[-1] for p in procs}
        if seen >= {"True", "False"}:
            return
    pytest.fail(f"12 processes all iterated the penalizers one way ({seen}): SGLang's order no longer depends on "
                f"the process")
