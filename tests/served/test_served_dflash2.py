"""A DFlash2 drafter (the shipped tiny-dflash2: tiny-dflash's backbone plus a trained candidate selector) served by
DDTree on SGLang 0.5.23: the default (greedy requests over the selector's lattice) and the tree over the backbone's
marginals (SGLANG_DDTREE_SELECTOR=marginals) give the plain server's greedy output token for token; sampled output
is distributed as the plain server's (test_served_law's test and level), from the default (a sampled request's
tree over the marginals, its children drawn) and from the lattice at the request's temperature
(SGLANG_DDTREE_SELECTOR=lattice); and through SGLang's own client the default accepts at least what stock DFLASH's
selector walk accepts on the same drafter, greedy."""
import pytest
from test_served_accept import at_least_dflash
from test_served_law import ALPHA, homogeneity_p, samples

from fleet import generate_many

PROMPTS, TOKENS = 32, 48
GREEDY = {"temperature": 0.0, "max_new_tokens": TOKENS, "ignore_eos": True}


@pytest.mark.parametrize("server", ["ddtree_dflash2", "ddtree_dflash2_marginals"])
def test_greedy_output_is_the_plain_servers(fleet, prompts, server):
    want = generate_many(fleet.url("plain"), prompts[:PROMPTS], GREEDY)
    got = generate_many(fleet.url(server), prompts[:PROMPTS], GREEDY)
    assert not [o for o in got if "output_ids" not in o], got[:2]
    diverged = [i for i, (g, w) in enumerate(zip(got, want)) if g["output_ids"] != w["output_ids"]]
    assert diverged == [], f"{server}: {len(diverged)}/{PROMPTS} prompts diverge from the plain server: {diverged}"
    assert all(o["meta_info"].get("spec_accept_length", 0) > 1.0 for o in got)  # the tree was really used


@pytest.mark.parametrize("server", ["ddtree_dflash2", "ddtree_dflash2_lattice"])
def test_samples_are_distributed_as_the_plain_servers(fleet, prompts, server, prompt_id=3):
    sampling = {"temperature": 1.0}
    dd = samples(fleet.url(server), prompts[prompt_id], sampling)
    plain = samples(fleet.url("plain"), prompts[prompt_id], sampling)
    assert len(set(dd)) > 5  # really sampled
    p = homogeneity_p(dd, plain)
    print(f"\n{server} law T1 prompt {prompt_id}: p = {p:.3g} ({len(set(dd))} outcomes)")
    assert p > ALPHA, f"{server}'s samples differ in law from the plain server's (p = {p:.2e} < {ALPHA:.1e})"


def test_the_default_accepts_at_least_what_the_selector_walk_does(fleet, prompts, tmp_path):
    at_least_dflash(fleet, prompts, tmp_path, "ddtree_dflash2", "dflash_dflash2")
