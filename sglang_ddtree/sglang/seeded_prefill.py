"""A seeded request's first token drawn from the request's own Philox stream, so its whole text reproduces.

SGLang samples a request's first token in the prefill, with torch's generator: seeded per request only under
--enable-deterministic-inference (which SGLang refuses on its CPU backends). DDTree's rounds draw every later token
from the request's own stream (its `sampling_seed` and position: decode_round.py, `node_law`), so without this a
seeded request's text varied through its first token alone. In a DDTREE server the target's sampler is wrapped
(`SeededSampler`, installed by the release's adapter on the Sampler instance it hands over): in a prefill that
carries requests with a seed, each such sampled request's token is replaced by a Gumbel-max draw from its own
filtered law (`draw`: law_rows' kept set, its temperature) over the very logits SGLang's sampler draws from
(after penalties, grammar, logit bias, custom processors and NaN sanitising), keyed by (seed, the request's length)
on PREFILL_STREAM, which no round draws from. So the token is still an exact draw from the request's law, and it
replaces SGLang's before the sampler computes log-probs, so a returned logprob is the drawn token's. Greedy
requests and requests without a seed keep SGLang's token. This module imports no SGLang.
"""
from __future__ import annotations

import contextlib
import logging

import torch

from sglang_ddtree.sampling import KEEP_NONE, MIN_TEMPERATURE, NodeLaw, law_rows

logger = logging.getLogger("sglang_ddtree")

# above every stream a round draws from: node draws < 4096, engine.dflash2.WALK_STREAM 1 << 24, rejection.py's
# ACCEPT / BONUS / DRAW streams 2, 3 and 4 << 24 (each + a node index < 1024)
PREFILL_STREAM = 5 << 24


def draw(round_ops, logits: torch.Tensor, law: NodeLaw, seed: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """int64 [R]: each row's token of logits [R, V] under its law (row r: law's row r), the argmax for a greedy row
    or one with no law (a NaN row, scores that overflow); the draw keyed by (seed, step) int64 [R] on PREFILL_STREAM."""
    R, V = logits.shape
    x = logits.view(R, 1, V)
    rows = law_rows(round_ops, x, law)
    boundary = rows.boundary if law.filtered else None
    temperatures = law.temperatures.float().clamp(min=MIN_TEMPERATURE)
    drawn = round_ops.sample_tokens(x, seed, step, stream=PREFILL_STREAM, temperatures=temperatures,
                                    boundary=boundary).view(R)
    greedy = rows.greedy.view(R)
    bad = (drawn < 0) | (drawn >= V) | (rows.boundary.view(R) == KEEP_NONE)
    return torch.where(law.greedy().view(R).to(drawn.device) | bad, greedy, drawn)


class SeededSampler:
    """Wraps one SGLang Sampler instance's two steps (both releases call them from Sampler.forward): the logits
    preprocessing (where the logits it draws from are final) and the draw from probabilities (where the token is
    replaced, before log-probs). Armed only inside `prefill`; anywhere else the sampler is SGLang's own.
    0.5.23's draw returns (ids, its sampling-mask capture), 0.5.17's the ids."""

    def __init__(self, sampler, round_ops, law_of):
        self.ops, self.law_of = round_ops, law_of  # law_of(sampling_info): its requests' NodeLaw (the adapter's)
        self.seeds = self.logits = None
        self._preprocess_original = sampler._preprocess_logits
        self._sample_original = sampler._sample_from_probs
        sampler._preprocess_logits = self._preprocess_logits
        sampler._sample_from_probs = self._sample_from_probs
        sampler.ddtree_seeded = self

    @contextlib.contextmanager
    def prefill(self, seeds):
        """Arm for one prefill forward: seeds (int64 [bs] seed, bool [bs] given, int64 [bs] step) of the batch's
        requests, one a row of the sampler's logits; None: no request of the batch gave a seed."""
        self.seeds, self.logits = seeds, None
        try:
            yield
        finally:
            self.seeds = self.logits = None

    def _preprocess_logits(self, logits, sampling_info):
        out = self._preprocess_original(logits, sampling_info)
        if self.seeds is not None and self.logits is None:  # the first call: the logits the draw is made from
            self.logits = out.float().clone() if out.shape[0] == self.seeds[0].shape[0] else False
            if self.logits is False:
                logger.warning("sglang-ddtree: a prefill's sampler saw %d rows for %d requests: its seeded "
                               "requests keep SGLang's first token", out.shape[0], self.seeds[0].shape[0])
        return out

    def _sample_from_probs(self, probs, sampling_info, positions, simple_sampling_case):
        out = self._sample_original(probs, sampling_info, positions, simple_sampling_case)
        if self.seeds is None or self.logits is None or self.logits is False:
            return out
        ids, capture = out if isinstance(out, tuple) else (out, None)
        seed, given, step = self.seeds
        law = self.law_of(sampling_info)
        mine = draw(self.ops, self.logits, law, seed.to(ids.device), step.to(ids.device))
        use = given.to(ids.device) & ~law.greedy().to(ids.device)
        ids = torch.where(use, mine.to(ids.dtype), ids)
        self.logits = None
        if capture is not None:  # its selected weight was the replaced token's (SGLang drops it where tokens change)
            capture = capture._replace(selected_weight=None)
        return (ids, capture) if isinstance(out, tuple) else ids
