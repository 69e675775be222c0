"""scripts/sglang_lossless.py's rule for an explained greedy divergence: the server's and the reference's tokens
are the reference's top two in either order, within the tie tolerance; anything else stays unexplained."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("sglang_lossless", ROOT / "scripts" / "sglang_lossless.py")
sl = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sl)


def test_second_choice_within_tolerance_is_explained():
    ref = {"ids": [1, 2, 3], "top2": [[(-0.1, 1), (-5, 9)], [(-2.31, 2), (-2.32, 4)], [(-0.1, 3), (-5, 9)]]}
    d = sl.explain(ref, {"ids": [1, 4, 3]}, 0.05)
    assert d["position"] == 1 and d["explained"] and d["got_is_second"]


def test_exact_tie_listed_in_the_other_order_is_explained():
    """The 2026-12-04 MLA run: the reference emitted 105 while its top-2 listed 116 first at the same log-prob."""
    ref = {"ids": [5, 105], "top2": [[(-0.1, 5), (-4, 9)], [(-2.1425, 116), (-2.1425, 105)]]}
    d = sl.explain(ref, {"ids": [5, 116]}, 0.05)
    assert d["explained"] and not d["got_is_second"] and d["gap_nats"] == 0


def test_gap_over_tolerance_or_a_third_token_is_unexplained():
    ref = {"ids": [2], "top2": [[(-0.5, 2), (-0.7, 4)]]}
    assert not sl.explain(ref, {"ids": [4]}, 0.05)["explained"]       # gap 0.2 nats
    assert not sl.explain(ref, {"ids": [8]}, 0.05)["explained"]       # not among the top two
    assert not sl.explain({"ids": [2], "top2": []}, {"ids": [8]}, 0.05)["explained"]  # no log-probs


def test_reexplain_rejudges_a_stored_report(tmp_path):
    div = {"position": 2, "ref_token": 105, "got_token": 116, "top1": [116, -2.14], "top2": [105, -2.14],
           "gap_nats": 0.0, "got_is_second": False, "explained": False}
    report = {"prompts": 1, "max_new_tokens": 4, "reference": "base", "tie_tol_nats": 0.05,
              "servers": {"dd": {"identical": 0, "of": 1, "explained": 0, "unexplained": 1, "wall_s": 1.0,
                                 "accept_len": 5.0, "divergences": {"0": div}}}}
    p = tmp_path / "r.json"
    p.write_text(json.dumps(report))
    assert sl.reexplain(str(p))
    got = json.loads(p.read_text())["servers"]["dd"]
    assert got["explained"] == 1 and got["unexplained"] == 0 and got["divergences"]["0"]["top1"] == [116, -2.14]
