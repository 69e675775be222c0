"""`--speculative-algorithm ddtree` through SGLang's real ServerArgs path, and every refusal."""
import os
import sys

import pytest


def test_ddtree_resolves(resolve):
    sa = resolve("--speculative-num-draft-tokens", "17")
    assert sa.speculative_algorithm.upper() == "DDTREE"
    assert sa.speculative_num_draft_tokens == 17           # verify width = budget + 1
    assert sa.speculative_dflash_block_size == 8            # from the drafter's config.json
    assert sa.speculative_num_steps == 1 and sa.speculative_eagle_topk == 1
    assert sa.attention_backend == "triton"
    assert sa.speculative_draft_attention_backend is not None
    assert sa.max_running_requests == 48
    assert sa.disable_overlap_schedule is False             # overlap stays on


def test_budget_from_environment(resolve, monkeypatch):
    monkeypatch.setenv("SGLANG_DDTREE_BUDGET", "20")
    assert resolve().speculative_num_draft_tokens == 21


def test_auto_budget_reserves_the_widest_candidate(resolve, monkeypatch):
    """SGLANG_DDTREE_BUDGET=auto: the server verifies (and reserves KV for) the largest candidate; the default
    candidates are the chain's budget (block − 1 = 7 for the test drafter's block 8) and 15, 31, 63."""
    from sglang_ddtree.round_config import RoundConfig
    from sglang_ddtree.sglang.args import auto_budgets

    monkeypatch.setenv("SGLANG_DDTREE_BUDGET", "auto")
    assert auto_budgets((), 8) == (7, 15, 31, 63)
    assert auto_budgets((), 16) == (15, 31, 63)
    assert resolve().speculative_num_draft_tokens == 64
    assert RoundConfig.published() == RoundConfig(budget=63, auto_budgets=(7, 15, 31, 63))
    monkeypatch.setenv("SGLANG_DDTREE_AUTO_BUDGETS", "20,10")
    assert auto_budgets((20, 10), 8) == (7, 10, 20)  # the chain's budget always among them
    assert resolve().speculative_num_draft_tokens == 21
    assert RoundConfig.published().auto_budgets == (7, 10, 20)
    assert resolve("--speculative-num-draft-tokens", "21").speculative_num_draft_tokens == 21
    with pytest.raises(ValueError, match="largest auto budget"):
        resolve("--speculative-num-draft-tokens", "17")
    monkeypatch.setenv("SGLANG_DDTREE_AUTO_BUDGETS", "3,31")
    with pytest.raises(ValueError, match="below the drafter block size"):
        resolve()
    monkeypatch.setenv("SGLANG_DDTREE_AUTO_BUDGETS", "15,lots")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_AUTO_BUDGETS"):
        resolve()
    monkeypatch.setenv("SGLANG_DDTREE_AUTO_BUDGETS", "15,2000")
    with pytest.raises(ValueError, match="at most"):
        resolve()


def test_default_budget_is_auto_where_auto_has_served(resolve, monkeypatch):
    """No budget given: on an MHA/GQA target on triton at page size 1 (where auto has served on the GPU) the
    server chooses the budget every round — the widest candidate reserved, and the choice handed to the
    scheduler processes as the published RoundConfig (auto_default: the worker may fall back to the widest); on
    flashinfer and at page sizes 16 / 64 only where
    the FlashInfer prefix serves (flashinfer not installed here: the fixed budget; the next test installs it);
    on the FULL_MASK path and MLA targets, the fixed DEFAULT_BUDGET. A budget the user gives always wins."""
    from sglang_ddtree.round_config import DEFAULT_BUDGET, RoundConfig
    ENV_BUDGET = "SGLANG_DDTREE_BUDGET"

    assert resolve().speculative_num_draft_tokens == 64  # auto: budgets 7, 15, 31, 63 for the block-8 drafter
    assert ENV_BUDGET not in os.environ  # the hook writes no budget variable: it publishes the RoundConfig
    config = RoundConfig.published()
    assert config.auto and config.auto_default and config.budget == 63
    for args in [("--attention-backend", "flashinfer"), ("--page-size", "16")]:  # an earlier server's auto-default
        assert resolve(*args).speculative_num_draft_tokens == DEFAULT_BUDGET + 1, args  # is no choice for this one
        assert RoundConfig.published() == RoundConfig(budget=DEFAULT_BUDGET)
    assert resolve(target=os.path.abspath(SHIPPED_MLA)).speculative_num_draft_tokens == DEFAULT_BUDGET + 1
    monkeypatch.setenv("SGLANG_DDTREE_VERIFY_ATTENTION", "full_mask")
    assert resolve().speculative_num_draft_tokens == DEFAULT_BUDGET + 1
    monkeypatch.delenv("SGLANG_DDTREE_VERIFY_ATTENTION")
    assert resolve("--speculative-num-draft-tokens", "9").speculative_num_draft_tokens == 9
    assert ENV_BUDGET not in os.environ
    monkeypatch.setenv(ENV_BUDGET, "16")
    assert resolve().speculative_num_draft_tokens == 17
    monkeypatch.setenv(ENV_BUDGET, "auto")
    assert resolve().speculative_num_draft_tokens == 64 and not RoundConfig.published().auto_default


def test_default_budget_is_auto_with_the_flashinfer_prefix(resolve, monkeypatch):
    """Where the FlashInfer prefix serves (the fixture's head dim 64, flashinfer importable), auto is the default
    on flashinfer and at page sizes 1 / 16 / 64 on either backend, as it served on the GPU; not at another page
    size, not with SGLANG_DDTREE_PREFIX=tree (our kernel over the prefix there, not served with auto), and not
    for a head dim FlashInfer's prefill does not take."""
    from sglang_ddtree.attention import flashinfer
    from sglang_ddtree.round_config import DEFAULT_BUDGET
    from sglang_ddtree.sglang import args

    monkeypatch.setattr(flashinfer, "installed", lambda: True)
    for extra in [("--attention-backend", "flashinfer"), ("--page-size", "16"),
                  ("--attention-backend", "flashinfer", "--page-size", "64")]:
        assert resolve(*extra).speculative_num_draft_tokens == 64, extra
    assert resolve("--page-size", "32").speculative_num_draft_tokens == DEFAULT_BUDGET + 1
    monkeypatch.setenv("SGLANG_DDTREE_PREFIX", "tree")
    assert resolve("--attention-backend", "flashinfer").speculative_num_draft_tokens == DEFAULT_BUDGET + 1
    monkeypatch.delenv("SGLANG_DDTREE_PREFIX")
    monkeypatch.setattr(args, "head_dim", lambda view: 32)
    assert resolve("--page-size", "16").speculative_num_draft_tokens == DEFAULT_BUDGET + 1


def test_block_size_flag_beats_config(resolve):
    sa = resolve("--speculative-dflash-block-size", "4", "--speculative-num-draft-tokens", "9")
    assert sa.speculative_dflash_block_size == 4 and sa.speculative_num_draft_tokens == 9


def test_default_attention_backend_is_fixed_before_sglang_picks(resolve, monkeypatch):
    """The hook runs before SGLang's own default: a changed plugin default must win."""
    from sglang_ddtree.sglang import args

    monkeypatch.setattr(args, "DEFAULT_ATTENTION_BACKEND", "flashinfer")
    assert resolve().attention_backend == "flashinfer"
    assert resolve("--attention-backend", "triton").attention_backend == "triton"


def test_split_backends_judge_the_half_that_verifies(resolve, monkeypatch):
    """--prefill-attention-backend flashinfer --speculative-attention-mode decode: prefills on FlashInfer while
    SGLang's hybrid backend sends TARGET_VERIFY to the decode half, which falls back to the plugin's default
    backend, so auto stays the default budget; without the mode TARGET_VERIFY goes to the prefill half
    (flashinfer, without the FlashInfer prefix here: the fixed budget). The plugin's default fills a half not
    given, and only then."""
    from sglang_ddtree.sglang import args
    from sglang_ddtree.sglang.settings import DEFAULT_BUDGET

    sa = resolve("--prefill-attention-backend", "flashinfer", "--speculative-attention-mode", "decode",
                 "--speculative-draft-attention-backend", "triton")
    assert (sa.attention_backend, sa.prefill_attention_backend, sa.speculative_draft_attention_backend) \
        == ("triton", "flashinfer", "triton")
    assert args.verify_backend_flag(sa) == "triton" and sa.speculative_num_draft_tokens == 64
    sa = resolve("--prefill-attention-backend", "flashinfer")
    assert args.verify_backend_flag(sa) == "flashinfer"
    assert sa.speculative_num_draft_tokens == DEFAULT_BUDGET + 1
    monkeypatch.setattr(args, "DEFAULT_ATTENTION_BACKEND", "flashinfer")
    assert resolve("--prefill-attention-backend", "triton").attention_backend == "flashinfer"
    both = ("--prefill-attention-backend", "triton", "--decode-attention-backend", "triton")
    assert resolve(*both).attention_backend != "flashinfer"  # both halves given: left to SGLang


def test_dflash_is_untouched_by_the_plugin(resolve, monkeypatch):
    from sglang_ddtree.sglang import args

    monkeypatch.setattr(args, "DEFAULT_ATTENTION_BACKEND", "flashinfer")
    sa = resolve(algorithm="DFLASH")
    assert sa.speculative_algorithm == "DFLASH" and sa.attention_backend != "flashinfer"
    assert sa.speculative_num_draft_tokens == 8


REJECTIONS = [
    (["--speculative-use-rejection-sampling"], "rejection-sampling"),
    (["--pp-size", "2"], "pipeline parallelism"),
    (["--device", "cpu", "--attention-backend", "triton"], "pass --attention-backend torch_native"),
    (["--attention-backend", "fa4"], "not wired into fa4"),
    (["--attention-backend", "flashmla"], "cannot apply a tree mask"),
    (["--decode-attention-backend", "fa4"], "decode-attention-backend"),
    (["--speculative-num-draft-tokens", "4"], "below the drafter block size"),
    (["--speculative-eagle-topk", "4"], "SGLANG_DDTREE_TOPK"),
    (["--speculative-draft-window-size", "64"], "draft-window-size"),
    (["--speculative-num-draft-tokens", "1"], "must be >= 2"),
]


@pytest.mark.parametrize("extra,needle", REJECTIONS, ids=[" ".join(e) for e, _ in REJECTIONS])
def test_rejections_name_the_fix(resolve, extra, needle):
    with pytest.raises(ValueError) as info:
        resolve(*extra)
    msg = str(info.value)
    assert needle in msg
    if "DDTREE speculative decoding does not support" in msg:
        assert "Fix:" in msg


def test_tensor_parallelism_resolves_and_says_where_it_was_proven(resolve, monkeypatch):
    """--tp-size > 1 is served (sglang/tp.py); on a GPU the log says it has been proven on the CPU server only."""
    from sglang_ddtree.sglang import args

    said = []
    monkeypatch.setattr(args.logger, "warning", lambda msg, *a: said.append(msg % a))
    assert resolve("--tp-size", "2").tp_size == 2
    assert any("proven on the CPU server only" in m for m in said), said


def test_the_cpu_device_names_what_its_install_lacks(resolve, monkeypatch):
    """--device cpu without SGLang's CPU engine and sgl_kernel's CPU ops (this test process has neither): one
    message naming both, before any model loads."""
    monkeypatch.delenv("SGLANG_USE_CPU_ENGINE", raising=False)
    with pytest.raises(ValueError) as info:
        resolve("--device", "cpu", "--attention-backend", "torch_native")
    msg = str(info.value)
    assert "SGLANG_USE_CPU_ENGINE=1" in msg and "sgl_kernel" in msg and "make serve-cpu" in msg


@pytest.mark.parametrize("page", ["16", "64"])
def test_page_size_above_one_serves_on_the_tree_kernel(resolve, page):
    assert resolve("--page-size", page).page_size == int(page)


def test_page_size_above_one_is_refused_with_the_full_mask_fallback(resolve, monkeypatch):
    for value in ("mask", "full_mask"):  # full_mask: mask's earlier name
        monkeypatch.setenv("SGLANG_DDTREE_VERIFY_ATTENTION", value)
        with pytest.raises(ValueError, match="page-size 16 with SGLANG_DDTREE_VERIFY_ATTENTION=mask"):
            resolve("--page-size", "16")


def test_rejects_missing_drafter(resolve):
    with pytest.raises(ValueError, match="speculative-draft-model-path"):
        resolve(drafter=None)


SHIPPED_DFLASH2 = os.path.join(os.path.dirname(__file__), "..", "..", "sglang_ddtree", "engine", "models",
                               "tiny-dflash2")


def test_a_dflash2_drafter_is_served_where_sglang_loads_one(resolve, sglang_release, monkeypatch):
    """A drafter with a candidate selector resolves where the release supports a selector (0.5.23: its lattice tree,
    the default's for greedy requests, at --tp-size 1; its marginals' tree at any size) and is refused in one line
    where it does not (0.5.17, which cannot load one), naming the releases that can."""
    from sglang_ddtree.sglang.adapters import releases

    assert releases.supporting("selector") == ("0.5.23",)
    if not releases.supports("selector"):
        with pytest.raises(ValueError, match=rf"DFlash2 drafter .*on sglang {sglang_release}.*Fix: serve it with "
                                             rf"sglang 0.5.23"):
            resolve(drafter=SHIPPED_DFLASH2)
        return
    assert resolve(drafter=SHIPPED_DFLASH2).speculative_dflash_block_size == 8
    with pytest.raises(ValueError, match=r"lattice tree at --tp-size 2.*SGLANG_DDTREE_SELECTOR=marginals"):
        resolve("--tp-size", "2", drafter=SHIPPED_DFLASH2)
    monkeypatch.setenv("SGLANG_DDTREE_SELECTOR", "marginals")
    assert resolve("--tp-size", "2", drafter=SHIPPED_DFLASH2).tp_size == 2


SHIPPED_MLA = os.path.join(os.path.dirname(__file__), "..", "..", "sglang_ddtree", "engine", "models", "tiny-mla-target")


def test_mla_target_serves_on_the_tree_kernel_backends(resolve, monkeypatch):
    """An MLA target of DeepSeek-V3 shapes (latent 512 + rope 64: the shipped tiny pair's) resolves with the
    default backend (triton) and with flashmla / flashinfer; any other backend, SGLang's FULL_MASK verify and
    other latent shapes are refused naming the fix (the tree kernel is the only MLA tree verify)."""
    target = os.path.abspath(SHIPPED_MLA)
    assert resolve(target=target).attention_backend == "triton"
    for backend in ("flashmla", "flashinfer"):
        assert resolve("--attention-backend", backend, target=target).attention_backend == backend
    with pytest.raises(ValueError, match="MLA target.*Fix: pass --attention-backend triton"):
        resolve("--attention-backend", "fa3", target=target)
    with pytest.raises(ValueError, match="latent rank 64 and rope dim 16"):
        resolve(target="tiny_mla_target")  # the small fixture's shapes
    monkeypatch.setenv("SGLANG_DDTREE_VERIFY_ATTENTION", "full_mask")
    with pytest.raises(ValueError, match="VERIFY_ATTENTION=mask for an MLA target"):
        resolve(target=target)


@pytest.mark.parametrize("name", ["SGLANG_DDTREE_PREFIX", "SGLANG_DDTREE_MLA_PREFIX"])
def test_flashmla_prefix_needs_an_mla_target_on_flashmla(resolve, monkeypatch, name):
    """SGLANG_DDTREE_PREFIX=flashmla (or by its earlier name SGLANG_DDTREE_MLA_PREFIX) reads the prefix through
    FlashMLA's page tables: an MLA target on --attention-backend flashmla; elsewhere it is refused at start-up
    naming the fix."""
    from sglang_ddtree.attention import flashmla

    monkeypatch.setenv(name, "flashmla")
    monkeypatch.setattr(flashmla, "installed", lambda: True)
    target = os.path.abspath(SHIPPED_MLA)
    assert resolve("--attention-backend", "flashmla", "--page-size", "64", target=target).attention_backend == "flashmla"
    fix = "Fix: serve the MLA target with --attention-backend flashmla --page-size 64, or unset SGLANG_DDTREE_PREFIX"
    for args, kw, why in ((("--attention-backend", "triton"), {"target": target},
                           "on --attention-backend triton \\(FlashMLA reads the prefix through the page tables of "
                           "--attention-backend flashmla\\)"),
                          ((), {}, "for an MHA/GQA target \\(the FlashMLA prefix is wired for MLA targets\\)")):
        with pytest.raises(ValueError, match=f"SGLANG_DDTREE_PREFIX=flashmla {why}.*{fix}"):
            resolve(*args, **kw)
    monkeypatch.setattr(flashmla, "installed", lambda: False)
    with pytest.raises(ValueError, match="PREFIX=flashmla without sgl_kernel's FlashMLA.*Fix: install sglang-kernel"):
        resolve("--attention-backend", "flashmla", "--page-size", "64", target=target)


def test_flashinfer_prefix_is_refused_where_it_cannot_serve(resolve, monkeypatch):
    """SGLANG_DDTREE_PREFIX=flashinfer (FlashInfer's paged prefill over an MHA/GQA prefix, FlashInfer-MLA over an
    MLA one): served on triton and flashinfer at any page size for head dims 64/128/256 with flashinfer installed,
    and for the shipped MLA target on each MLA backend; the FULL_MASK path, another head dim (the shipped tiny
    pair's 32) or no flashinfer are refused at start-up naming the fix. The two names of the knob must agree."""
    from sglang_ddtree.attention import flashinfer
    from sglang_ddtree.engine.data import MODELS_DIR
    from sglang_ddtree.sglang.settings import Settings

    monkeypatch.setattr(flashinfer, "installed", lambda: True)
    monkeypatch.setenv("SGLANG_DDTREE_PREFIX", "flashinfer")
    assert Settings.from_env().prefix == Settings.from_env().mla_prefix == "flashinfer"
    for extra in ((), ("--attention-backend", "flashinfer"), ("--page-size", "16"), ("--page-size", "64")):
        resolve(*extra)  # the fixture target: head dim 64
    for extra in ((), ("--attention-backend", "flashinfer"), ("--attention-backend", "flashmla", "--page-size", "64")):
        resolve(*extra, target=os.path.abspath(SHIPPED_MLA))
    with pytest.raises(ValueError, match="head dim 32 .*takes head dims 64, 128, 256.*Fix: unset SGLANG_DDTREE_PREFIX"):
        resolve(target=os.path.join(MODELS_DIR, "tiny-target"))
    monkeypatch.setenv("SGLANG_DDTREE_VERIFY_ATTENTION", "full_mask")
    with pytest.raises(ValueError, match="flashinfer with SGLANG_DDTREE_VERIFY_ATTENTION=mask"):
        resolve()
    monkeypatch.delenv("SGLANG_DDTREE_VERIFY_ATTENTION")
    monkeypatch.setattr(flashinfer, "installed", lambda: False)
    with pytest.raises(ValueError, match="without flashinfer installed.*Fix: pip install flashinfer-python"):
        resolve()
    monkeypatch.setenv("SGLANG_DDTREE_MLA_PREFIX", "flashmla")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_PREFIX=flashinfer and SGLANG_DDTREE_MLA_PREFIX=flashmla disagree"):
        Settings.from_env()


def test_fa3_backend_serves_where_sgl_kernel_has_fa3(resolve, monkeypatch):
    """--attention-backend fa3 (SGLang's default on Hopper): served through the tree kernel where sgl_kernel's FA3
    library is installed, with a fixed default budget (auto has not run there on the GPU); refused at start-up
    naming the fix without FA3, with the FULL_MASK path (SGLang's fa3 verify applies no tree mask at topk 1), and
    as SGLANG_DDTREE_PREFIX=fa3 for an MLA target, another head dim or without FA3."""
    from sglang_ddtree.attention import fa3
    from sglang_ddtree.engine.data import MODELS_DIR
    from sglang_ddtree.sglang import args as A
    from sglang_ddtree.sglang.adapters import registration

    monkeypatch.setattr(fa3, "installed", lambda: False)
    with pytest.raises(ValueError, match="fa3 without sgl_kernel's FA3 library.*Fix: install sglang-kernel"):
        resolve("--attention-backend", "fa3")
    monkeypatch.setattr(fa3, "installed", lambda: True)
    sa = resolve("--attention-backend", "fa3")
    assert sa.attention_backend == "fa3" and registration.served_budget(sa) == A.DEFAULT_BUDGET
    monkeypatch.setenv("SGLANG_DDTREE_PREFIX", "fa3")
    for extra in ((), ("--attention-backend", "fa3"), ("--page-size", "16")):
        resolve(*extra)  # the fixture target: head dim 64, FA3's prefix on any MHA backend
    with pytest.raises(ValueError, match="fa3 for an MLA target.*Fix: unset SGLANG_DDTREE_PREFIX"):
        resolve(target=os.path.abspath(SHIPPED_MLA))
    with pytest.raises(ValueError, match="head dim 32 .*FA3 takes head dims 64, 96, 128"):
        resolve(target=os.path.join(MODELS_DIR, "tiny-target"))
    monkeypatch.delenv("SGLANG_DDTREE_PREFIX")
    monkeypatch.setenv("SGLANG_DDTREE_VERIFY_ATTENTION", "full_mask")
    with pytest.raises(ValueError, match="fa3 with SGLANG_DDTREE_VERIFY_ATTENTION=mask.*Fix: unset"):
        resolve("--attention-backend", "fa3")
    monkeypatch.delenv("SGLANG_DDTREE_VERIFY_ATTENTION")
    monkeypatch.setenv("SGLANG_DDTREE_PREFIX", "fa3")
    monkeypatch.setattr(fa3, "installed", lambda: False)
    with pytest.raises(ValueError, match="PREFIX=fa3 without sgl_kernel's FA3 library"):
        resolve()


def test_budget_env_and_flag_must_agree(resolve, monkeypatch):
    monkeypatch.setenv("SGLANG_DDTREE_BUDGET", "20")
    with pytest.raises(ValueError, match="budget \\+ 1 = 21"):
        resolve("--speculative-num-draft-tokens", "17")


@pytest.mark.parametrize("name,value,needle", [
    ("SGLANG_DDTREE_BUDGET", "abc", "integer"), ("SGLANG_DDTREE_TOPK", "0", ">= 1"),
    ("SGLANG_DDTREE_OPS_BACKEND", "gpu", "auto, cuda, cpu"), ("SGLANG_DDTREE_DRAFT_GRAPH_HEAD", "yes", "0 or 1"),
    ("SGLANG_DDTREE_ANCHOR", "spine", "chain, none"), ("SGLANG_DDTREE_PREFIX", "fa2", "tree, flashmla, flashinfer, fa3"),
    ("SGLANG_DDTREE_MLA_PREFIX", "flashattn", "tree, flashmla, flashinfer, fa3"),
    ("SGLANG_DDTREE_MLA_KV_MOVE", "fast", "layers, one_launch")])
def test_bad_knobs(resolve, monkeypatch, name, value, needle):
    """Each bad value refused through SGLang's real argument resolution, in one line naming the variable."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=needle) as info:
        resolve()
    named = name.replace("MLA_PREFIX", "PREFIX")  # an earlier name's value is refused under the current name
    assert named in str(info.value) and "\n" not in str(info.value)


def test_anchor_knob_defaults_to_the_chain(resolve, monkeypatch):
    from sglang_ddtree.round_config import RoundConfig

    monkeypatch.delenv("SGLANG_DDTREE_ANCHOR", raising=False)
    resolve()
    assert RoundConfig.published().anchor == "chain"
    monkeypatch.setenv("SGLANG_DDTREE_ANCHOR", "none")
    resolve()
    assert RoundConfig.published().anchor is None


def test_calibration_knob(monkeypatch, tmp_path):
    from sglang_ddtree.engine.data import MODELS_DIR
    from sglang_ddtree.round_config import RoundConfig
    from sglang_ddtree.sglang.args import drafter_calibration
    from sglang_ddtree.sglang.settings import round_knobs

    def knob():
        return RoundConfig(calibration=round_knobs()["calibration"])

    shipped = os.path.join(MODELS_DIR, "tiny-dflash")
    monkeypatch.delenv("SGLANG_DDTREE_CALIBRATION", raising=False)
    cal = drafter_calibration(knob(), shipped, 7)         # auto: the drafter directory's file
    assert len(cal.greedy) == 7 and all(0 < t < 1 for t in cal.greedy)
    assert len(cal.sampling) == 7 and all(t > 0 for t in cal.sampling)  # the shipped file fits sampling too
    assert drafter_calibration(knob(), str(tmp_path), 7) is None   # no file: raw probabilities
    assert drafter_calibration(knob(), "z-lab/Qwen3-8B-DFlash-b16", 15) is None  # a hub id
    with pytest.raises(ValueError, match="SGLANG_DDTREE_CALIBRATION=auto"):
        drafter_calibration(knob(), shipped, 15)             # fitted for another block size
    monkeypatch.setenv("SGLANG_DDTREE_CALIBRATION", "off")
    assert drafter_calibration(knob(), shipped, 7) is None
    monkeypatch.setenv("SGLANG_DDTREE_CALIBRATION", str(tmp_path / "nope.json"))
    with pytest.raises(ValueError, match="nope.json"):
        drafter_calibration(knob(), shipped, 7)


def test_launch_wrapper_splits_its_flags():
    from sglang_ddtree.sglang.launch_server import split_args

    ours, rest = split_args(["--model-path", "m", "--speculative-ddtree-budget", "48", "--port", "1"])
    assert ours.speculative_ddtree_budget == 48
    assert rest == ["--speculative-algorithm", "DDTREE", "--model-path", "m", "--port", "1"]
    ours, rest = split_args(["--speculative-algorithm", "ddtree", "--speculative-ddtree-topk=4"])
    assert ours.speculative_ddtree_topk == 4 and rest == ["--speculative-algorithm", "ddtree"]
    ours, _ = split_args(["--speculative-ddtree-anchor", "none"])
    assert ours.speculative_ddtree_anchor == "none"
    ours, _ = split_args(["--speculative-ddtree-budget", "Auto"])
    assert ours.speculative_ddtree_budget == "auto"
    with pytest.raises(SystemExit):
        split_args(["--speculative-ddtree-budget", "0"])
    with pytest.raises(SystemExit):
        split_args(["--speculative-ddtree-anchor", "spine"])


@pytest.mark.parametrize("backend", ["trtllm_mha", "trtllm_mla", "cutedsl_mla", "flashinfer_mla", "torch_native"])
def test_validate_rejects_backends_sglang_refuses_first_on_cpu(backend):
    """Backends SGLang itself refuses on a CPU box (SM checks) still hit our refusal on a GPU."""
    from types import SimpleNamespace

    from sglang_ddtree.sglang.args import validate_server_args

    view = SimpleNamespace(device="cuda", speculative_draft_model_path="d", attention_backend=backend,
                           model_path="/nonexistent", pp_size=1, tp_size=1, page_size=1)
    with pytest.raises(ValueError, match="cannot apply a tree mask"):
        validate_server_args(view)


def test_budget_limit_is_the_cuda_builders():
    """MAX_BUDGET is n = budget + 1 <= kMaxTreeSlots of kernels/tree_constants.h."""
    import re
    from pathlib import Path

    from sglang_ddtree.sizes import MAX_CUDA_BUDGET as MAX_BUDGET

    header = (Path(__file__).resolve().parents[2] / "kernels" / "tree_constants.h").read_text()
    slots = int(re.search(r"constexpr int kMaxTreeSlots = (\d+);", header).group(1))
    assert MAX_BUDGET == slots - 1


@pytest.mark.parametrize("how", ["flag", "env"])
def test_budget_above_the_cuda_builder_is_refused_at_start_up(resolve, monkeypatch, how):
    from sglang_ddtree.sizes import MAX_CUDA_BUDGET as MAX_BUDGET

    for budget in (MAX_BUDGET + 1, 10**9):
        extra = ("--speculative-num-draft-tokens", str(budget + 1)) if how == "flag" else ()
        if how == "env":
            monkeypatch.setenv("SGLANG_DDTREE_BUDGET", str(budget))
        with pytest.raises(ValueError, match=f"budget <= {MAX_BUDGET}") as info:
            resolve(*extra)
        assert "Fix:" in str(info.value) and str(budget) in str(info.value)
    monkeypatch.delenv("SGLANG_DDTREE_BUDGET", raising=False)
    assert resolve("--speculative-num-draft-tokens", str(MAX_BUDGET + 1)).speculative_num_draft_tokens == MAX_BUDGET + 1


@pytest.fixture
def arg_warnings():
    """Warnings of sglang_ddtree.sglang.args, through a handler of its own (SGLang reconfigures the root
    logger at import, which pytest's caplog relies on)."""
    import logging

    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())
    log = logging.getLogger("sglang_ddtree.sglang.args")
    log.addHandler(handler)
    yield records
    log.removeHandler(handler)


@pytest.mark.parametrize("extra,needle,field,value", [
    (("--speculative-num-steps", "3"), "--speculative-num-steps 3 overridden to 1", "speculative_num_steps", 1),
    (("--enable-mixed-chunk",), "--enable-mixed-chunk overridden to off", "enable_mixed_chunk", False),
])
def test_overridden_flags_are_logged(resolve, arg_warnings, extra, needle, field, value):
    sa = resolve(*extra)
    assert getattr(sa, field) == value
    assert any(needle in m for m in arg_warnings), arg_warnings


def test_default_flags_log_no_override(resolve, arg_warnings):
    resolve()
    assert not [m for m in arg_warnings if "overridden" in m]


