"""Registration through SGLang's own plugin loader, the version gate, and the spec-class contract."""
import importlib.metadata
import inspect
import logging

import pytest


def test_entry_point_is_declared():
    eps = [ep for ep in importlib.metadata.entry_points(group="sglang.srt.plugins") if ep.name == "ddtree"]
    assert len(eps) == 1, "install the package (pip install -e .) so SGLang can discover the entry point"
    assert eps[0].value == "sglang_ddtree.sglang.plugin:register"


def test_sglangs_loader_registers_ddtree(plugins_loaded):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import get_spec

    from sglang_ddtree.sglang.spec_algo import DDTreeSpecAlgo

    for spelling in ("ddtree", "DDTREE", "DDTree"):
        algo = SpeculativeAlgorithm.from_string(spelling)
        assert isinstance(algo, DDTreeSpecAlgo)
        assert algo is get_spec("DDTREE")
    assert algo.supports_overlap is True
    assert algo.validate_server_args is not None


def test_register_is_idempotent(plugins_loaded):
    from sglang.srt.plugins import load_plugins
    from sglang.srt.speculative.spec_registry import get_spec

    from sglang_ddtree.sglang import plugin

    before = get_spec("DDTREE")
    plugin.register()
    load_plugins()
    assert get_spec("DDTREE") is before


def test_unknown_name_still_refused(plugins_loaded):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    with pytest.raises(ValueError, match="Unknown speculative algorithm"):
        SpeculativeAlgorithm.from_string("DDTREE_TYPO")


def _interface(cls_or_enum, prefixes):
    return {n for n in vars(cls_or_enum) if n.startswith(prefixes) and callable(getattr(cls_or_enum, n))}


def test_predicates_match_speculative_algorithm(plugins_loaded):
    """Every predicate SpeculativeAlgorithm dispatches on exists on the spec class (and nothing extra)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_ddtree.sglang.spec_algo import DDTreeSpecAlgo

    enum_preds = _interface(SpeculativeAlgorithm, ("is_", "supports_"))
    ours = {n for n in dir(DDTreeSpecAlgo) if n.startswith(("is_", "supports_"))}
    assert enum_preds <= ours, sorted(enum_preds - ours)
    # predicates newer releases added (0.5.23); defining them on 0.5.17 is harmless
    newer = {"supports_mixed_chunk", "supports_prefill_shared_read_done"}
    assert ours - enum_preds <= newer, sorted(ours - enum_preds - newer)


def test_every_public_method_of_the_enum_exists(plugins_loaded):
    """The scheduler calls SpeculativeAlgorithm methods without isinstance checks (upstream gap: patches/)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_ddtree.sglang.spec_algo import SPEC_METHOD_NAMES, DDTreeSpecAlgo

    skip = {"from_string", "register"}
    public = {n for n, v in vars(SpeculativeAlgorithm).items()
              if not n.startswith("_") and n not in skip and inspect.isfunction(v)}
    missing = sorted(n for n in public if not hasattr(DDTreeSpecAlgo, n))
    assert missing == []
    for name in SPEC_METHOD_NAMES:  # the upstream gaps are closed by the class itself, not inherited
        assert name in vars(DDTreeSpecAlgo), name


def test_predicate_answers(plugins_loaded):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    algo = SpeculativeAlgorithm.from_string("ddtree")
    assert algo.is_dflash_family() and not algo.is_dflash() and not algo.is_eagle()
    assert algo.supports_target_verify_for_draft()
    assert algo.is_speculative() and algo.is_some() and not algo.is_none()
    assert algo.carries_draft_hidden_states() is False
    assert algo.need_topk() is False
    assert algo.get_platform_worker_cls() is None
    assert algo.get_num_tokens_per_req_for_target_verify(33, False) == 33


def test_create_future_map(plugins_loaded):
    import torch
    from sglang.srt.managers.overlap_utils import FutureMap
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    algo = SpeculativeAlgorithm.from_string("ddtree")
    sig = inspect.signature(SpeculativeAlgorithm.create_future_map)
    assert list(inspect.signature(algo.create_future_map).parameters) == list(sig.parameters)[1:]

    class Pool:  # FutureMap only reads the pool's size and device at construction
        size = 4
        req_to_token = torch.zeros(4, 8, dtype=torch.int32)
        device = "cpu"

    try:
        fm = algo.create_future_map(torch.device("cpu"), Pool())
    except (AttributeError, TypeError) as e:  # constructor internals differ; the class reached is what counts
        pytest.skip(f"FutureMap needs a real pool here: {e}")
    assert isinstance(fm, FutureMap)


def test_version_gate():
    from sglang_ddtree.sglang.adapters import releases as compat

    assert compat.check_version("0.5.23") == "0.5.23"
    assert compat.check_version("0.5.17.post1") == "0.5.17"
    for bad in ("0.5.20", "0.6.0", "0.4.9"):
        with pytest.raises(compat.UnsupportedSGLangVersion, match="supports sglang 0.5.17, 0.5.23"):
            compat.check_version(bad)


def test_register_failure_is_loud(monkeypatch, caplog):
    from sglang_ddtree.sglang import plugin
    from sglang_ddtree.sglang.adapters import releases as compat

    monkeypatch.setattr(plugin, "_state", {"registered": False, "error": None})

    def refuse(version=None):
        raise compat.UnsupportedSGLangVersion("found sglang 9.9.9")

    monkeypatch.setattr(compat, "check_version", refuse)
    with caplog.at_level(logging.ERROR, logger="sglang_ddtree"):
        with pytest.raises(compat.UnsupportedSGLangVersion):
            plugin.register()
    assert "FAILED" in caplog.text and "sglang_ddtree.check" in caplog.text
    assert "9.9.9" in plugin.last_error()


def test_check_command_reports_ok(plugins_loaded, capsys):
    from sglang_ddtree.sglang import check

    assert check.main([]) == 0
    out = capsys.readouterr().out
    assert "OK: SGLang resolves --speculative-algorithm ddtree" in out


def test_check_command_reports_unsupported_version(monkeypatch, capsys):
    from sglang_ddtree.sglang import check
    from sglang_ddtree.sglang.adapters import releases as compat

    monkeypatch.setattr(compat, "installed_version", lambda: "0.5.20")
    assert check.main([]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_reserved_name_registers_under_the_alternative(plugins_loaded, monkeypatch):
    """If SGLang itself defines DDTREE (its own DDTree work, merged upstream), the plugin must not shadow it
    or fail: it registers as DDTREE_PLUGIN, says so, and resolves its server arguments under that name."""
    from sglang.srt.speculative import spec_registry
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo, get_spec

    from sglang_ddtree.sglang import args, check, plugin
    from sglang_ddtree.sglang.spec_algo import DDTreeSpecAlgo

    registry = spec_registry._REGISTRY
    monkeypatch.setitem(registry, "DDTREE", CustomSpecAlgo("DDTREE", lambda sa: None))  # SGLang's own
    monkeypatch.setitem(plugin._state, "registered", False)
    monkeypatch.setattr(args, "_active", {"name": args.ALGORITHM})
    try:
        plugin.register()
        assert args.active_algorithm() == "DDTREE_PLUGIN"
        assert not isinstance(get_spec("DDTREE"), DDTreeSpecAlgo)        # upstream's entry untouched
        assert isinstance(SpeculativeAlgorithm.from_string("ddtree_plugin"), DDTreeSpecAlgo)
        assert args.is_ddtree(type("V", (), {"speculative_algorithm": "ddtree_plugin"})())
        assert not args.is_ddtree(type("V", (), {"speculative_algorithm": "ddtree"})())
        ok, lines = check.diagnose()
        assert ok and any("registered as --speculative-algorithm ddtree_plugin" in ln for ln in lines)
    finally:
        registry.pop("DDTREE_PLUGIN", None)


def test_reserved_builtin_name_is_detected():
    from sglang_ddtree.sglang.adapters.registration import name_is_reserved

    class Algorithms:
        __members__ = {"DFLASH": 1, "DDTREE": 2}

    assert name_is_reserved("DDTREE", object, Algorithms, lambda name: None)
    assert not name_is_reserved("DDTREE", object, type("A", (), {"__members__": {"DFLASH": 1}}), lambda name: None)
