"""A target forward whose logits hold NaN for one request stops that request, flagged, without emitting a
token it does not have (the sampler's -1) and without touching the other requests of the batch."""
import torch

from sglang_ddtree.engine import Engine
from sglang_ddtree.engine.data import heldout_prompts


def _poison_call(engine, call_no, row):
    """Make target forward number `call_no` (1 = prefill) return NaN logits for batch row `row`."""
    tgt, orig, calls = engine.target, engine.target.forward, [0]

    def forward(*a, **k):
        logits, feats = orig(*a, **k)
        calls[0] += 1
        if calls[0] == call_no:
            logits = logits.clone()
            logits[row] = float("nan")
        return logits, feats

    tgt.forward = forward
    return lambda: delattr(tgt, "forward")


def test_nan_logits_stop_only_that_request():
    torch.manual_seed(0)
    engine = Engine.from_pretrained(device="cpu")
    prompts = heldout_prompts(2)
    want = engine.generate(prompts, 24, method="ar")
    for method, call_no in (("ddtree", 1), ("ddtree", 3), ("chain", 3), ("ar", 5)):
        restore = _poison_call(engine, call_no, 0)
        try:
            got = engine.generate(prompts, 24, method=method, budget=8 if method == "ddtree" else None, paper=True)
        finally:
            restore()
        assert got[0].finish_reason == "nonfinite", (method, call_no)
        assert all(t >= 0 for t in got[0].token_ids)
        # what it emitted before the bad forward is the AR output's prefix
        assert got[0].token_ids == want[0].token_ids[:len(got[0].token_ids)]
        assert len(got[0].token_ids) < len(want[0].token_ids)
        assert got[1].token_ids == want[1].token_ids and got[1].finish_reason == want[1].finish_reason
