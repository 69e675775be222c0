"""Every SGLang symbol the plugin's worker touches exists on the installed release, with the parameters
the worker passes (compat.WORKER_SYMBOLS / WORKER_SIGNATURES: one list to update per release)."""
import importlib
import inspect

import pytest

from sglang_ddtree.sglang import compat


def _symbols(release):
    return compat.WORKER_SYMBOLS["common"] + compat.WORKER_SYMBOLS[release]


def _resolve(module, qualname):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def test_symbols_import(sglang_release):
    missing = []
    for module, name in _symbols(sglang_release):
        try:
            _resolve(module, name)
        except (ImportError, AttributeError) as e:
            missing.append(f"{module}.{name}: {e}")
    assert missing == []


def test_signatures(sglang_release):
    table = {**compat.WORKER_SIGNATURES["common"], **compat.WORKER_SIGNATURES[sglang_release]}
    bad = []
    for (module, qualname), names in table.items():
        params = list(inspect.signature(_resolve(module, qualname)).parameters)
        if [p for p in names if p not in params]:
            bad.append(f"{module}.{qualname}{params} lacks {[p for p in names if p not in params]}")
    assert bad == []


def test_worker_methods_exist_on_dflash_worker(sglang_release):
    """The DFlashWorkerV2 members the DDTree worker calls or overrides."""
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    from sglang_ddtree.sglang.worker import DFLASH_MEMBERS_USED

    missing = [m for m in DFLASH_MEMBERS_USED if not hasattr(DFlashWorkerV2, m)]
    assert missing == []


def test_worker_instance_attributes_are_set_by_dflash_init(sglang_release):
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    from sglang_ddtree.sglang.worker import DFLASH_INSTANCE_ATTRS

    source = inspect.getsource(DFlashWorkerV2.__init__)
    missing = [a for a in DFLASH_INSTANCE_ATTRS if f"self.{a} =" not in source and f"self.{a}:" not in source]
    assert missing == []


def test_draft_input_has_the_kv_length_fields_compat_reads(sglang_release):
    """compat.draft_kv_lens reads one of DRAFT_KV_LEN_FIELDS; this release's DFlashDraftInputV2 declares one
    pair whole, and the helper returns it from a real instance."""
    import dataclasses

    import torch
    from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2

    from sglang_ddtree.sglang import compat

    names = {f.name for f in dataclasses.fields(DFlashDraftInputV2)}
    pairs = [p for p in compat.DRAFT_KV_LEN_FIELDS if set(p) <= names]
    assert len(pairs) == 1, (names, compat.DRAFT_KV_LEN_FIELDS)
    inst = DFlashDraftInputV2.create_idle_input(device=torch.device("cpu"))
    setattr(inst, pairs[0][0], torch.tensor([3, 4]))
    setattr(inst, pairs[0][1], 7)
    cpu, total = compat.draft_kv_lens(inst)
    assert cpu.tolist() == [3, 4] and total == 7


def test_worker_module_imports_against_this_release(sglang_release):
    from sglang_ddtree.sglang import worker

    assert issubclass(worker.DDTreeWorkerV2, importlib.import_module(
        "sglang.srt.speculative.dflash_worker_v2").DFlashWorkerV2)
    sig = inspect.signature(worker.DDTreeWorkerV2.forward_batch_generation)
    assert {"batch", "on_publish", "grammar_barrier", "pp_proxy_tensors"} <= set(sig.parameters)


def test_unknown_release_has_no_table():
    with pytest.raises(KeyError):
        compat.WORKER_SYMBOLS["0.5.20"]
