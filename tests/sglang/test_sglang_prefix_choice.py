"""One prefix choice for the engine and the server (attention/choose.py): the engine's entry
(attention.engine_prefix, what tree_verify_attention's `auto` runs), the server binding's (TreeVerifyAttention on a
runner of the named SGLang backend) and the launch gate's (args.launch_prefix on SGLang's resolved arguments) are
called on one table of cases and checked against choose() and against the table written out below, where the
engine's `auto` differs from the server's (choose.auto_order's docstring says why)."""
import os

import pytest

import test_sglang_tree_attention as T
from sglang_ddtree.attention import Shape, choose, engine_prefix, flashinfer_graphs, prefixes
from sglang_ddtree.engine.data import MODELS_DIR
from sglang_ddtree.sglang import backends

SHIPPED_MLA = os.path.join(MODELS_DIR, "tiny-mla-target")  # latent 512 + rope 64
ALL = ("flashmla", "flashinfer", "fa3")

# layout, head dim, --attention-backend, page size, verify width n (G = 4 for MHA/GQA), libraries installed,
# then what the engine's `auto` runs and what the server's (binding and gate) runs, written by hand
CASES = [
    ("gqa", 64, "triton", 1, 3, ALL, "tree", "flashinfer"),            # n·G = 12 rows: one tile, the fused kernel
    ("gqa", 64, "triton", 16, 17, ALL, "flashinfer", "flashinfer"),    # 68 rows: the cascade on both
    ("gqa", 64, "flashinfer", 1, 17, ALL, "flashinfer", "flashinfer"),
    ("gqa", 64, "fa3", 1, 17, ALL, "flashinfer", "fa3"),               # SGLang's fa3 backend: its own library first
    ("gqa", 64, "fa3", 1, 17, ("flashinfer",), "flashinfer", "flashinfer"),
    ("gqa", 64, "triton", 1, 17, ("fa3",), "tree", "tree"),            # no FlashInfer
    ("gqa", 32, "triton", 1, 17, ALL, "tree", "tree"),                 # FlashInfer's prefill takes 64/128/256
    ("mla", 576, "flashmla", 64, 3, ALL, "flashmla", "flashmla"),
    ("mla", 576, "flashmla", 64, 3, ("flashinfer",), "flashinfer", "tree"),  # FlashInfer-MLA: the engine's only
    ("mla", 576, "triton", 1, 3, ALL, "flashinfer", "tree"),
    ("mla", 576, "flashinfer", 1, 3, ALL, "flashinfer", "tree"),
]


def _installed(monkeypatch, have):
    monkeypatch.setattr(prefixes, "installed", lambda name: name == "tree" or name in have)


def _engine(layout, d, page, n):
    dims = (d, 512) if layout == "mla" else (d, d)
    return engine_prefix(Shape(layout, *dims, page_size=page, dtype=None, rows=n * (1 if layout == "mla" else 4)))


def _server(monkeypatch, layout, d, backend, page, n, asked="auto"):
    from sglang_ddtree.sglang import tree_attention as TA

    case = prefixes.installed
    T._fake_flashinfer(monkeypatch, TA)  # FlashInfer's CPU emulations (their plans at construction)
    monkeypatch.setattr(flashinfer_graphs, "_fi_mla_wrapper_class", lambda: T.FME.Wrapper)
    monkeypatch.setattr(T.FME.Wrapper, "sms", 8)
    monkeypatch.setattr(T.FME.Wrapper, "made", [])
    monkeypatch.setattr(prefixes, "installed", case)  # the case's libraries, not the emulation's "all"
    pool = "MLATokenToKVPool" if layout == "mla" else "MHATokenToKVPool"
    cls = backends.BY_POOL[pool][backend]
    if layout == "mla":
        runner = T.make_mla_runner(cls, ctx=128, rows=2)
        runner.page_size, runner.attn_backend.num_q_heads = page, 16
        runner.model_config.num_attention_heads = 16
    else:
        runner = T._gqa_runner(cls, ctx=64, rows=2, d=d, page=page)[0]
    return TA.TreeVerifyAttention(runner, n=n, max_bs=2, prefix=asked).prefix


def _server_asked(monkeypatch, layout, d, backend, page, n, asked):
    return _server(monkeypatch, layout, d, backend, page, n, asked)


def _view(resolve, layout, d, backend, page):
    """SGLang's resolved arguments for a target of this layout and head dim (the fixtures' and the shipped ones)."""
    target = {("gqa", 64): "tiny_target", ("gqa", 32): os.path.join(MODELS_DIR, "tiny-target"),
              ("mla", 576): os.path.abspath(SHIPPED_MLA)}[(layout, d)]
    return resolve("--attention-backend", backend, "--page-size", str(page), "--speculative-num-draft-tokens", "9",
                   target=target)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}{c[1]}-{c[2]}-p{c[3]}-n{c[4]}-{'+'.join(c[5])}" for c in CASES])
def test_engine_server_and_gate_choose_through_one_policy(plugins_loaded, resolve, monkeypatch, case):
    from sglang_ddtree.sglang import args as A

    layout, d, backend, page, n, have, engine_want, server_want = case
    _installed(monkeypatch, have)
    dims = (d, 512) if layout == "mla" else (d, d)
    rows = n * (1 if layout == "mla" else 4)
    assert _engine(layout, d, page, n) == engine_want == choose.choose(
        Shape(layout, *dims, page_size=page, rows=rows), host="engine")
    assert _server(monkeypatch, layout, d, backend, page, n) == server_want == choose.choose(
        Shape(layout, *dims, page_size=page, rows=rows, backend=backend), host="server")
    if backend == "fa3" and "fa3" not in have:  # SGLang's fa3 backend itself needs FA3: the gate refuses it first
        with pytest.raises(ValueError, match="--attention-backend fa3 without sgl_kernel's FA3"):
            _view(resolve, layout, d, backend, page)
        return
    view = _view(resolve, layout, d, backend, page)
    assert A.launch_prefix(view, "auto") == server_want
    # an explicit library: the gate takes it exactly where the binding does, or refuses it naming the variable
    for lib in ALL:
        if prefixes.refusal(lib, Shape(layout, *dims, page_size=page, backend=backend)) is None:
            assert A.launch_prefix(view, lib) == lib
            assert _server_asked(monkeypatch, layout, d, backend, page, n, lib) == lib
        else:
            with pytest.raises(ValueError, match=f"SGLANG_DDTREE_PREFIX={lib} "):
                A.launch_prefix(view, lib)
            with pytest.raises(ValueError, match=f"SGLANG_DDTREE_PREFIX={lib} "):
                _server_asked(monkeypatch, layout, d, backend, page, n, lib)


def test_the_table_differs_between_hosts_only_where_auto_order_says():
    """The engine's `auto` and the server's differ in exactly the rows auto_order's table names: a short GQA verify
    (the fused kernel on the engine), SGLang's fa3 backend (the server's own library) and MLA off FlashMLA
    (FlashInfer-MLA on the engine only)."""
    differ = [(c[0], c[2], c[4]) for c in CASES if c[6] != c[7]]
    assert differ == [("gqa", "triton", 3), ("gqa", "fa3", 17), ("mla", "flashmla", 3), ("mla", "triton", 3),
                      ("mla", "flashinfer", 3)]
