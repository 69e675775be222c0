"""DDTree's sampled output through the CPU server is distributed as the plain server's.

Null hypothesis, per prompt and setting: the first three output tokens (the first from the prefill, the next two
from DDTree's first decode round: its tree, its node draws and its walk) of DDTree's samples and of the plain
server's have the same joint law. Test: a chi-square test of homogeneity on the 2 x C table of joint outcomes
(outcomes either side sees fewer than MIN_COUNT times pooled into one), SAMPLES samples a side, each test at
level ALPHA (Bonferroni over the tests of the module keeps the family's false alarms under 1%).
Power: the same statistic must reject the plain server at temperature 0.9 against itself at 1.0, a bias of the size
a wrong node law (a node's draw reusing its parent's noise, a temperature applied twice) produces; the last test
shows it does, so a pass is not a test too weak to fail.
"""
import pytest

from fleet import generate

SAMPLES, PER_REQUEST, TOKENS, MIN_COUNT = 960, 64, 3, 5
PROMPT_IDS = (3, 11, 29)
SETTINGS = {"T1": {"temperature": 1.0}, "T1_top_p_0.9": {"temperature": 1.0, "top_p": 0.9}}
ALPHA = 0.01 / (len(PROMPT_IDS) * len(SETTINGS))


def samples(url, prompt, sampling) -> list[tuple]:
    """SAMPLES joint outcomes (the first TOKENS output tokens), PER_REQUEST at a time through `n`."""
    out = []
    while len(out) < SAMPLES:
        got = generate(url, prompt, {**sampling, "max_new_tokens": TOKENS, "ignore_eos": True, "n": PER_REQUEST})
        assert isinstance(got, list), got
        out += [tuple(o["output_ids"]) for o in got]
    return out[:SAMPLES]


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


def test_the_statistic_catches_a_law_of_the_size_a_bug_makes(fleet, prompts):
    """Power (module docstring): T = 0.9 against T = 1.0 on the same server is rejected at the level used above."""
    url = fleet.url("plain")
    a = samples(url, prompts[PROMPT_IDS[0]], {"temperature": 1.0})
    b = samples(url, prompts[PROMPT_IDS[0]], {"temperature": 0.9})
    p = homogeneity_p(a, b)
    print(f"\nlaw power, T 0.9 against T 1: p = {p:.3g}")
    assert p < ALPHA
