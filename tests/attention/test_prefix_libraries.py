"""The prefix-library registry (attention/prefixes.py): what each library declares it serves, its install check
(without importing it), and the reasons it gives, against values written out here from the libraries' own limits
(FlashInfer's fa2 prefill: head dims 64/128/256; sgl_kernel's FA3: 64/96/128/192/256; FlashMLA: MLA at page 64
through SGLang's FlashMLA page tables)."""
import sys

import pytest
import torch

from sglang_ddtree.attention import Shape, choose, install, prefixes
from sglang_ddtree.attention.prefix_attention import PrefixAttention

GQA = lambda d, **kw: Shape("gqa", d, d, **kw)  # noqa: E731
MLA = lambda **kw: Shape("mla", 576, 512, **kw)  # noqa: E731


@pytest.fixture
def everything_installed(monkeypatch):
    monkeypatch.setattr(prefixes, "installed", lambda name: True)


def test_the_registry_holds_one_module_per_prefix_and_the_vocabulary_is_it():
    assert tuple(prefixes.LIBRARIES) == ("tree", "flashmla", "flashinfer", "fa3")
    assert choose.PREFIXES == ("auto", "tree", "flashmla", "flashinfer", "fa3")
    assert choose.VERIFY == ("auto", "tree", "mask")
    for name, lib in prefixes.LIBRARIES.items():
        assert lib.NAME == name and set(lib.LAYOUTS) <= {"gqa", "mla"} and callable(lib.installed)
        assert issubclass(lib.PREFIX, PrefixAttention) and lib.PREFIX.name  # the one object, its name for the logs
        assert name == "tree" or (callable(lib.PREFIX.plan_host) and callable(lib.PREFIX.run_host))


@pytest.mark.parametrize("name,shape,why", [
    ("flashinfer", GQA(128), None),
    ("flashinfer", GQA(32), "for a target of head dim 32 (FlashInfer's paged prefill takes head dims 64, 128, 256)"),
    ("flashinfer", GQA(96), "for a target of head dim 96 (FlashInfer's paged prefill takes head dims 64, 128, 256)"),
    ("flashinfer", MLA(page_size=1, backend="triton"), None),
    ("fa3", GQA(96, page_size=16), None),
    ("fa3", Shape("gqa", 128, 64), "for head dims 128/64 (FA3 takes equal key and value head dims in 64, 96, 128, "
                                   "192, 256)"),
    ("fa3", MLA(), "for an MLA target (the FA3 prefix is wired for MHA/GQA targets)"),
    ("flashmla", MLA(page_size=64), None),
    ("flashmla", MLA(page_size=64, backend="flashmla"), None),
    ("flashmla", MLA(page_size=1), "at page size 1 (FlashMLA reads pages of 64)"),
    ("flashmla", MLA(page_size=64, backend="triton"), "on --attention-backend triton (FlashMLA reads the prefix "
                                                      "through the page tables of --attention-backend flashmla)"),
    ("flashmla", GQA(128, page_size=64), "for an MHA/GQA target (the FlashMLA prefix is wired for MLA targets)"),
    ("flashmla", Shape("mla", 192, 128, page_size=64), "for an MLA target of head dims 192/128 (FlashMLA takes latent "
                                                       "512 + rope 64)"),
    ("flashinfer", GQA(128, dtype=torch.float32), "for torch.float32 (the CUDA kernels take bf16 / fp16)"),
    ("flashinfer", GQA(128, device="cpu"), "on the CPU (the prefix libraries are CUDA kernels)"),
    ("tree", GQA(96, device="cpu", dtype=torch.float64), None),  # the torch path: any shape
    ("tree", GQA(96), "for a target of head dim 96 (the tree kernel takes head dims 32, 64, 128, 256)"),
])
def test_each_library_refuses_what_it_does_not_serve_naming_why(everything_installed, name, shape, why):
    assert prefixes.refusal(name, shape) == why


def test_a_library_not_installed_is_refused_with_what_is_missing(monkeypatch):
    monkeypatch.setattr(prefixes, "installed", lambda name: name != "flashinfer")
    assert prefixes.refusal("flashinfer", GQA(128)) == "without flashinfer installed"
    with pytest.raises(ValueError, match="^prefix=flashinfer without flashinfer installed$"):
        choose.choose(GQA(128), "flashinfer", host="server")
    assert choose.choose(GQA(128, rows=128), host="engine") == "tree"


def test_sgl_kernel_libraries_are_found_by_their_files_without_importing_them(tmp_path, monkeypatch):
    """sgl_kernel's FA3 (flash_ops) and FlashMLA (flashmla_ops) count as installed only with their library in the
    package (a copy moved aside, *.so.off, does not count); flashinfer by its package; nothing is imported."""
    from sglang_ddtree.attention import fa3, flashinfer, flashmla

    pkg = tmp_path / "sgl_kernel"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (tmp_path / "flashinfer").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("sgl_kernel", "flashinfer"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert not fa3.installed() and not flashmla.installed()
    (pkg / "flash_ops.abi3.so.off").write_bytes(b"")
    (pkg / "flashmla_ops.abi3.so.off").write_bytes(b"")
    assert not fa3.installed() and not flashmla.installed()
    (pkg / "flash_ops.abi3.so").write_bytes(b"")
    assert fa3.installed() and not flashmla.installed()
    (pkg / "flashmla_ops.abi3.so").write_bytes(b"")
    assert fa3.installed() and flashmla.installed()
    (tmp_path / "flashinfer" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    assert flashinfer.installed() and install.has_module("flashinfer")
    assert "sgl_kernel" not in sys.modules and "flashinfer" not in sys.modules


def test_the_gpu_engine_test_runs_the_servers_choice(everything_installed, monkeypatch):
    """tests/engine/test_engine_gpu.py's `server_prefix` (which prefix its engine runs to match a server) on the CPU:
    the tiny bf16 target (head dim 128, G = 2) at the verify width 25 on triton is FlashInfer's cascade where
    flashinfer is installed, else the tree kernel, while the engine's own `auto` keeps the fused kernel (50 rows)."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1] / "engine"))
    try:
        from test_engine_gpu import server_prefix
    finally:
        sys.path.pop(0)
    from sglang_ddtree.engine.model import Qwen3Config

    c = Qwen3Config(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=128)
    assert server_prefix(c, 25) == "flashinfer"
    assert choose.choose(GQA(128, rows=50), host="engine") == "tree"
    monkeypatch.setattr(prefixes, "installed", lambda name: name != "flashinfer")
    assert server_prefix(c, 25) == "tree"
    assert server_prefix(c, 25, backend="fa3") == "fa3"
