"""DDTree's sampled output through the CPU server is distributed as the plain server's.

Null hypothesis, per prompt and setting: the first three output tokens (the first from the prefill, the next two
from DDTree's first decode round: its tree, its node draws and its walk) of DDTree's samples and of the plain
server's have the same joint law. Test: a chi-square test of homogeneity on the 2 x C table of joint outcomes
(outcomes either side sees fewer than MIN_COUNT times pooled into one), SAMPLES samples a side, each test at
level ALPHA (Bonferroni over the tests of the module keeps the family's false alarms under 1%).
Power: the same statistic, on the same samples, must tell the plain server's law at T = 1 from its law at T = 1 with
top-p 0.9 — the bias of a request filter dropped (or applied where it should not be) at the tree's nodes; the last
test shows it does, so a pass is not a test too weak to fail. Samples are drawn once per server, prompt and setting
and shared by the tests (the power test and TP's draw nothing new).
"""
import pytest

from fleet import generate

SAMPLES, PER_REQUEST, TOKENS, MIN_COUNT = 640, 64, 3, 5
PROMPT_IDS = (3, 11)  # 163 and 235 distinct outcomes at T = 1 in 960 draws (prompt 29: 285, power p 4e-9)
SETTINGS = {"T1": {"temperature": 1.0}, "T1_top_p_0.9": {"temperature": 1.0, "top_p": 0.9}}
ALPHA = 0.01 / (len(PROMPT_IDS) * len(SETTINGS))


_DRAWN: dict = {}


def samples(url, prompt, sampling) -> list[tuple]:
    """SAMPLES joint outcomes (the first TOKENS output tokens), PER_REQUEST at a time through `n` (drawn once per
    server, prompt and setting)."""
    key = (url, prompt, tuple(sorted(sampling.items())))
    if key in _DRAWN:
        return _DRAWN[key]
    out = []
    while len(out) < SAMPLES:
        got = generate(url, prompt, {**sampling, "max_new_tokens": TOKENS, "ignore_eos": True, "n": PER_REQUEST})
        assert isinstance(got, list), got
        out += [tuple(o["output_ids"]) for o in got]
    _DRAWN[key] = out[:SAMPLES]
    return _DRAWN[key]


def homogeneity_p(a: list, b: list) -> float:
    """p-value of the chi-square test of homogeneity of two samples of outcomes (module docstring)."""
    from collections import Counter

    from scipy.stats import chi2_contingency

    ca, cb = Counter(a), Counter(b)
    keep = sorted(k for k in set(ca) | set(cb) if ca[k] + cb[k] >= 2 * MIN_COUNT)
    rows = [[ca[k] for k in keep] + [len(a) - sum(ca[k] for k in keep)],
            [cb[k] for k in keep] + [len(b) - sum(cb[k] for k in keep)]]
    if rows[0][-1] + rows[1][-1] == 0:
        rows = [r[:-1] for r in rows]
    if len(rows[0]) < 2:
        return 1.0  # one outcome only: nothing to compare
    return float(chi2_contingency(rows)[1])


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("prompt_id", PROMPT_IDS)
def test_ddtree_samples_are_distributed_as_the_plain_servers(fleet, prompts, prompt_id, setting):
    sampling = SETTINGS[setting]
    dd = samples(fleet.url("ddtree"), prompts[prompt_id], sampling)
    plain = samples(fleet.url("plain"), prompts[prompt_id], sampling)
    assert len(set(dd)) > 5  # really sampled
    p = homogeneity_p(dd, plain)
    print(f"\nlaw {setting} prompt {prompt_id}: p = {p:.3g} ({len(set(dd))} outcomes)")
    assert p > ALPHA, f"DDTree's samples differ in law from the plain server's (p = {p:.2e} < {ALPHA:.1e})"


@pytest.mark.parametrize("prompt_id", PROMPT_IDS)
def test_the_statistic_catches_a_dropped_filter(fleet, prompts, prompt_id):
    """Power (module docstring): the plain server's samples at T = 1 against its samples at T = 1 with top-p 0.9 (the
    ones the tests above drew) are told apart at the level used above."""
    url = fleet.url("plain")
    a = samples(url, prompts[prompt_id], SETTINGS["T1"])
    b = samples(url, prompts[prompt_id], SETTINGS["T1_top_p_0.9"])
    p = homogeneity_p(a, b)
    print(f"\nlaw power, top-p 0.9 against none at T 1, prompt {prompt_id}: p = {p:.3g}")
    assert p < ALPHA
