"""Drafter calibration (sglang_ddtree/calibration.py): the fit recovers a known temperature, the calibration
error it reports falls when the fit is right, and calibration files are checked."""
import json

import pytest
import torch

from sglang_ddtree.calibration import (FILE, SAMPLING_KEY, cross_entropy, fit_sampling_temperatures, fit_temperature,
                                       load_calibration, nll, reliability)


def synthetic(T0, n=4000, V=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, V, generator=g) * 3
    y = torch.multinomial(torch.softmax(z / T0, -1), 1, generator=g)[:, 0]
    return z, y


@pytest.mark.parametrize("T0", [0.4, 1.0, 2.0])
def test_fit_recovers_the_temperature_that_generated_the_targets(T0):
    z, y = synthetic(T0)
    T = fit_temperature(z, y)
    assert abs(T - T0) / T0 < 0.08, (T, T0)
    assert nll(z, y, T) <= min(nll(z, y, T * 1.1), nll(z, y, T / 1.1))


def test_reliability_error_falls_at_the_fitted_temperature():
    z, y = synthetic(0.5)                    # the raw logits are under-confident (as the shipped drafter is)
    raw, cal = reliability(z, y), reliability(z, y, fit_temperature(z, y))
    assert raw["confidence"] < raw["hit_rate"] and cal["ece"] < raw["ece"] / 3
    assert abs(sum(b["share"] for b in raw["bins"]) - 1) < 1e-9


def test_calibration_files_are_checked(tmp_path):
    good = tmp_path / "d"
    good.mkdir()
    (good / FILE).write_text(json.dumps({"depth_temperature": [0.5, 0.7]}))
    cal = load_calibration(str(good), 2)
    assert cal.greedy == (0.5, 0.7) and cal.sampling is None  # no sampling entry: sampled keys use the raw draft
    (good / FILE).write_text(json.dumps({"depth_temperature": [0.5, 0.7], SAMPLING_KEY: [1.1, 1.2]}))
    assert load_calibration(str(good), 2).sampling == (1.1, 1.2)
    with pytest.raises(ValueError, match="3 positive floats"):
        load_calibration(str(good), 3)
    bad = tmp_path / "bad.json"
    for text in ("{", json.dumps({"x": 1}), json.dumps({"depth_temperature": [1.0, -1.0]}),
                 json.dumps({"depth_temperature": [1.0, 1.0], SAMPLING_KEY: [1.0]}),
                 json.dumps({"depth_temperature": [1.0, 1.0], SAMPLING_KEY: [1.0, "x"]})):
        bad.write_text(text)
        with pytest.raises(ValueError, match="bad.json"):
            load_calibration(str(bad), 2)
    with pytest.raises(ValueError, match="missing"):
        load_calibration(str(tmp_path / "missing"), 2)


@pytest.mark.parametrize("T0", [0.6, 1.0, 1.7])
def test_sampling_fit_recovers_the_temperature_between_draft_and_target(T0):
    """Targets whose logits are the draft's divided by T0 (plus noise the temperature cannot explain): the
    cross-entropy fit finds T0 at every depth; the greedy fit (NLL of the target's argmax) does not — the
    argmax of a tempered distribution is the same token at every temperature, so it sharpens without bound
    here, which is why sampled requests need their own calibration."""
    g = torch.Generator().manual_seed(1)
    N, L, V = 3000, 2, 30
    x = torch.randn(N, L, V, generator=g) * 2
    y = x / T0 + 0.05 * torch.randn(N, L, V, generator=g)
    fitted = fit_sampling_temperatures(x, y)
    assert all(abs(t - T0) / T0 < 0.05 for t in fitted), fitted
    y[:10, 1] = float("nan")  # positions past a request's output are left out
    assert abs(fit_sampling_temperatures(x, y)[1] - T0) / T0 < 0.05
    greedy = fit_temperature(x[:, 0], y[:, 0].argmax(-1))
    assert greedy < 0.5 * T0, greedy
    q = torch.softmax(y[:, 0], -1)
    assert cross_entropy(x[:, 0], q, T0) < min(cross_entropy(x[:, 0], q, T0 * 1.2), cross_entropy(x[:, 0], q, T0 / 1.2))


def test_sampled_reliability_scores_the_top1_by_the_target_law():
    """With target distributions the hit rate is the mass the target's law gives the drafter's top-1."""
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    q = torch.tensor([[0.25, 0.5, 0.25], [0.0, 1.0, 0.0]])
    r = reliability(logits, q)
    assert abs(r["hit_rate"] - (0.25 + 1.0) / 2) < 1e-12
    assert reliability(logits, torch.tensor([0, 0]))["hit_rate"] == 0.5
