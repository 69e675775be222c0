"""Drafter calibration (sglang_ddtree/calibration.py): the fit recovers a known temperature, the calibration
error it reports falls when the fit is right, and calibration files are checked."""
import json

import pytest
import torch

from sglang_ddtree.calibration import FILE, fit_temperature, load_depth_temperatures, nll, reliability


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
    assert load_depth_temperatures(str(good), 2) == [0.5, 0.7]
    with pytest.raises(ValueError, match="3 positive floats"):
        load_depth_temperatures(str(good), 3)
    bad = tmp_path / "bad.json"
    for text in ("{", json.dumps({"x": 1}), json.dumps({"depth_temperature": [1.0, -1.0]})):
        bad.write_text(text)
        with pytest.raises(ValueError, match="bad.json"):
            load_depth_temperatures(str(bad), 2)
    with pytest.raises(ValueError, match="missing"):
        load_depth_temperatures(str(tmp_path / "missing"), 2)
