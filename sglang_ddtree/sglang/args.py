"""DDTree's server arguments: the mapping onto SGLang's fields, the DDTree settings, and the refusals.

Mapping (SGLang has no field for a tree budget, and a plugin cannot add one):
- tree budget B: `SGLANG_DDTREE_BUDGET` (what `python -m sglang_ddtree.launch_server
  --speculative-ddtree-budget B` sets), else `--speculative-num-draft-tokens` − 1, else the default (below);
  `SGLANG_DDTREE_BUDGET=auto`: a budget chosen every round among candidates (`SGLANG_DDTREE_AUTO_BUDGETS`,
  default 15, 31, 63 above the chain's; the chain's block − 1 always among them), B the largest;
- the default, when no budget is given: auto where it has served on the GPU (an MHA/GQA target on triton at
  page size 1, or on triton / flashinfer at page sizes 1/16/64 with the FlashInfer prefix; the tree kernel
  verifying), else the fixed DEFAULT_BUDGET (`default_budget_is_auto`);
- `speculative_num_draft_tokens` := n = B + 1, the verify width every attention backend reads (written and read
  back through adapters/registration.py alone: set_budget, flag_budget; the package's unit is B);
- the budget and the round's other knobs are one round_config.RoundConfig, resolved once (`resolve_round`, in
  validate_server_args, which SGLang runs before handle_server_args) and published for the scheduler processes;
- attention: with no --attention-backend, triton (the CPU: torch_native; `default_backends`);
- drafter block size: `--speculative-dflash-block-size`, else the drafter config's `block_size`, else 16.
  It is published as `speculative_dflash_block_size`, which the draft runner reads back (spec_algo.py).

Refused with the fix in the message: rejection sampling / block verification (DDTree's sampled accept is
already exact), pipeline or tensor parallelism, DP attention, page size > 1 with the FULL_MASK fallback,
compact draft windows, any attention backend that cannot apply a tree mask in TARGET_VERIFY, and for MLA
targets any backend but triton / flashmla / flashinfer (the tree kernel verifies them; there is no
fallback), and a prefix library (SGLANG_DDTREE_PREFIX) asked for where it cannot serve.
The default backend is fixed *before* SGLang picks one (its Hopper default, fa3 in causal mode, would silently drop the tree mask).
"""
from __future__ import annotations

import logging
import os

from sglang_ddtree.round_config import DEFAULT_BUDGET, RoundConfig, auto_candidates
from sglang_ddtree.sizes import MAX_CUDA_BUDGET, budget_error

from sglang_ddtree.attention import choose, prefixes
from sglang_ddtree.attention.prefixes import Shape

from . import backends
from .adapters import registration as sgl
from .adapters import releases
from .settings import AUTO, Settings, env, round_knobs

logger = logging.getLogger(__name__)

ALGORITHM = "DDTREE"
# If SGLang itself ships a DDTREE (its own DDTree work reserves the name), the plugin registers under this
# documented alternative instead (plugin.py decides once per process; `check` says which name is live).
ALTERNATIVE_ALGORITHM = "DDTREE_PLUGIN"
_active = {"name": ALGORITHM}


def active_algorithm() -> str:
    """The name `--speculative-algorithm` takes for this plugin in this process."""
    return _active["name"]


def set_active_algorithm(name: str) -> None:
    _active["name"] = name
DEFAULT_BLOCK_SIZE = 16
DEFAULT_MAX_RUNNING_REQUESTS = 48
DEFAULT_ATTENTION_BACKEND = "triton"
# page sizes auto is the default at on flashinfer, or on triton above page size 1 (with the FlashInfer prefix:
# where it served on the GPU, default_budget_is_auto)
AUTO_DEFAULT_PAGES = (1, 16, 64)


def auto_budgets(given, block: int) -> tuple:
    """The candidate budgets of SGLANG_DDTREE_BUDGET=auto (`given`: SGLANG_DDTREE_AUTO_BUDGETS' list, () the
    default ladder), ascending, the chain's (block − 1) always first: a round never verifies less than the DFlash
    chain; each within the CUDA builder's limit."""
    return tuple(check_budget(b) for b in auto_candidates(block, given, max_budget=None, name=env("auto_budgets")))


def drafter_calibration(config: RoundConfig, draft_path, depth_limit: int):
    """The drafter's per-depth calibration (sglang_ddtree/calibration.py: keys.Calibration, greedy and, where the
    file has it, sampling) the tree ranks by, or None. 'auto' uses the drafter directory's file when there is one;
    a file that is there but wrong, or an explicit path that is wrong, is refused naming the knob."""
    from sglang_ddtree.calibration import FILE, load_calibration

    choice = config.calibration
    if choice == "off":
        return None
    if choice == "auto":
        if not draft_path or not os.path.isfile(os.path.join(str(draft_path), FILE)):
            return None
        path = os.path.join(str(draft_path), FILE)
    else:
        path = choice
    try:
        return load_calibration(path, depth_limit)
    except ValueError as e:
        raise ValueError(f"{env('calibration')}={choice}: {e} (set {env('calibration')}=off to rank by the raw draft "
                         "probabilities)") from None


def is_ddtree(view) -> bool:
    algo = getattr(view, "speculative_algorithm", None)
    return isinstance(algo, str) and algo.upper() == active_algorithm()


def _hf_config(path, view, revision=None):
    return sgl.hf_config(path, trust_remote_code=bool(getattr(view, "trust_remote_code", False)), revision=revision)


def _text_config(view):
    """The target's (text) HF config, or None where it cannot be read (SGLang reports that itself, later and
    better)."""
    try:
        cfg = _hf_config(view.model_path, view, getattr(view, "revision", None))
    except Exception:
        return None
    return getattr(cfg, "text_config", None) or cfg


def mla_dims(view) -> tuple | None:
    """(latent KV rank, rope head dim) of an MLA target (DeepSeek-V2/V3, Kimi: the HF config carries a latent
    KV rank), else None."""
    text = _text_config(view)
    rank = getattr(text, "kv_lora_rank", None)
    return None if rank is None else (int(rank), int(getattr(text, "qk_rope_head_dim", 0) or 0))


def head_dim(view) -> int | None:
    """The target's attention head dim from its HF config (head_dim, else hidden / heads), or None."""
    text = _text_config(view)
    if text is None:
        return None
    d = getattr(text, "head_dim", None)
    if d is None and getattr(text, "hidden_size", None) and getattr(text, "num_attention_heads", None):
        d = text.hidden_size // text.num_attention_heads
    return None if d is None else int(d)


def launch_shape(view) -> Shape:
    """What the prefix choice (attention/choose.py) knows at launch: the layout and head dims from the target's HF
    config, the page size and the backend that will serve TARGET_VERIFY (dtype and width are not known yet)."""
    dims = mla_dims(view)
    if dims is not None:
        return Shape("mla", sum(dims), dims[0], page_size=int(getattr(view, "page_size", None) or 1),
                     backend=verify_backend_flag(view))
    d = head_dim(view)
    return Shape("gqa", d, d, page_size=int(getattr(view, "page_size", None) or 1), backend=verify_backend_flag(view))


def launch_prefix(view, asked: str) -> str:
    """The prefix the server binding will run for SGLANG_DDTREE_PREFIX=`asked` as far as the flags and the HF config
    tell (choose.choose, host 'server'); a ValueError naming the variable where `asked` cannot serve."""
    return choose.choose(launch_shape(view), asked, host="server", setting=env("prefix"))


def _library_prefix_refusal(name: str, view, settings: Settings) -> tuple | None:
    """(what, fix) when SGLANG_DDTREE_PREFIX=`name` (a library) cannot serve this server, else None: the server
    binding's answer (choose.choose, host 'server'), given at start-up."""
    knob, unset = f"{env('prefix')}={name}", f"unset {env('prefix')}"
    if settings.verify_attention == "mask":
        return (f"{knob} with {env('verify_attention')}=mask (the prefix split is the tree kernel's; SGLang's "
                f"FULL_MASK verify has none)", "unset one of the two")
    try:
        launch_prefix(view, name)
    except ValueError as e:
        lib = prefixes.LIBRARIES[name]
        if str(e).endswith(f"without {lib.MISSING}"):
            return str(e), f"{lib.INSTALL}, or {unset}"
        if name == "flashmla":
            return str(e), f"serve the MLA target with --attention-backend flashmla --page-size 64, or {unset}"
        return str(e), unset
    return None


def draft_block_size(view) -> int:
    """--speculative-dflash-block-size, else the drafter config's block_size, else 16."""
    given = getattr(view, "speculative_dflash_block_size", None)
    if given is not None:
        if int(given) <= 1:
            raise ValueError(f"--speculative-dflash-block-size must be >= 2 for DDTREE (one draft position "
                             f"at least), got {given}")
        return int(given)
    # outside the try: a renamed SGLang helper is a loud error, not a silent fallback to the default size
    block_size_of = sgl.dflash_block_size_reader()

    try:
        cfg = _hf_config(view.speculative_draft_model_path, view,
                         getattr(view, "speculative_draft_model_revision", None))
        size = block_size_of(cfg)
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as e:  # an unreadable or odd config
        logger.warning("DDTREE: could not read block_size from the drafter config (%s); using %d",
                       e, DEFAULT_BLOCK_SIZE)
        size = None
    return int(size) if size is not None else DEFAULT_BLOCK_SIZE


def has_selector(view) -> bool:
    """Whether the drafter is a DFlash2 drafter (its config's dflash_config names a selector rank, which SGLang reads
    to build the candidate selector where a release supports one); False where the config cannot be read (SGLang
    says why later)."""
    try:
        cfg = _hf_config(view.speculative_draft_model_path, view,
                         getattr(view, "speculative_draft_model_revision", None))
    except Exception:  # noqa: BLE001 — an unreadable config is SGLang's to report
        return False
    dflash = getattr(cfg, "dflash_config", None) or {}
    return bool(dflash.get("selector_rank")) if isinstance(dflash, dict) else False


def _check_selector_drafter(view, config: RoundConfig) -> None:
    """A DFlash2 drafter: served where SGLang loads one, its lattice tree on one rank (stage 1 has no vocabulary
    merge for the lattice yet)."""
    if not has_selector(view):
        return
    if not releases.supports("selector"):
        _reject(f"a DFlash2 drafter (a candidate selector) on sglang {releases.check_version()}, which cannot load "
                f"one",
                f"serve it with sglang {' / '.join(releases.supporting('selector'))}, or use a plain DFlash drafter")
    if config.selector != "marginals" and int(getattr(view, "tp_size", 1) or 1) > 1:
        _reject(f"a DFlash2 drafter's lattice tree at --tp-size {view.tp_size}",
                f"use --tp-size 1, or set {env('selector')}=marginals (the tree over the backbone's marginals)")


def check_budget(budget: int) -> int:
    """Refuse a budget the CUDA tree builder cannot build (at start-up, not in the first decode round)."""
    if budget_error(budget, MAX_CUDA_BUDGET) is not None:
        top = sgl.draft_tokens(MAX_CUDA_BUDGET)
        _reject(f"a tree budget of {budget} (the CUDA tree builder holds at most budget + 1 = {top} nodes per "
                f"request)", f"use a budget <= {MAX_CUDA_BUDGET} (--speculative-num-draft-tokens <= {top}, or "
                f"{env('budget')} / --speculative-ddtree-budget <= {MAX_CUDA_BUDGET})")
    return budget


def verify_backend_flag(view) -> str:
    """The backend name, from the flags, that will serve TARGET_VERIFY (tree_attention.verify_backend_name reads
    the live instance later): with --prefill-attention-backend / --decode-attention-backend SGLang's hybrid backend
    routes it to the decode one under --speculative-attention-mode decode, else to the prefill one; either falls
    back to --attention-backend."""
    mode = "decode" if getattr(view, "speculative_attention_mode", None) == "decode" else "prefill"
    return (getattr(view, f"{mode}_attention_backend", None) or getattr(view, "attention_backend", None)
            or DEFAULT_ATTENTION_BACKEND)


def default_budget_is_auto(view, settings: Settings) -> str | None:
    """None when a server given no budget should choose it every round; else why it keeps DEFAULT_BUDGET.
    Auto never verifies less than the chain and follows the batch (one fixed budget cannot be right at every
    batch size: docs/benchmarks/sglang-h200-2026-12-04-auto.md), but it is the default only where it has served
    on the GPU: MHA/GQA targets on triton (page size 1) and, through the FlashInfer prefix cascade, on triton and
    flashinfer at page sizes 1/16/64 (docs/benchmarks/h200-2026-12-04-requests-and-cascade.md,
    round-cost-h200-2026-12-04-long-context.md); elsewhere its multi-width verify is CPU-tested only."""
    backend = verify_backend_flag(view)
    page = int(getattr(view, "page_size", None) or 1)
    if settings.verify_attention == "mask":
        return f"{env('verify_attention')}=mask"
    if backend not in backends.MHA:
        return f"--attention-backend {backend}"
    if backend == "fa3":
        return "--attention-backend fa3 (its verify through the FA3 prefix has not yet been served on the GPU)"
    if mla_dims(view) is not None:
        return "an MLA target"
    if backend == "triton" and page == 1:
        return None
    # elsewhere it has served only with the FlashInfer prefix cascade
    if page not in AUTO_DEFAULT_PAGES:
        return f"--page-size {page}"
    if settings.prefix == "tree":
        return f"{env('prefix')}=tree"
    refusal = _library_prefix_refusal("flashinfer", view, settings)
    return None if refusal is None else f"--attention-backend {backend} --page-size {page} without the FlashInfer " \
                                        f"prefix ({refusal[0]})"


def resolve_round(view, settings: Settings, block: int) -> RoundConfig:
    """The server's RoundConfig, from the round's variables (settings.round_knobs, read here only: once per server,
    in the launching process) and --speculative-num-draft-tokens (= B + 1: registration.flag_budget). The budget:
    SGLANG_DDTREE_BUDGET, or with =auto the largest candidate, else --speculative-num-draft-tokens − 1, else the
    default's (auto where default_budget_is_auto says it has served, else DEFAULT_BUDGET). Every bad value is one line
    naming it."""
    knobs = round_knobs()
    given, flag = knobs["budget"], sgl.flag_budget(view)
    rest = {k: knobs[k] for k in ("topk", "anchor", "children", "selector", "calibration")}
    if given is None and flag is None:
        why_not = default_budget_is_auto(view, settings)
        logger.info("DDTREE: no budget given: %s", "auto, chosen every round" if why_not is None else
                    f"the fixed budget {DEFAULT_BUDGET} (auto is the default for MHA/GQA targets on triton, "
                    f"and with the FlashInfer prefix on flashinfer and at page sizes "
                    f"{' / '.join(map(str, AUTO_DEFAULT_PAGES))}, not with {why_not}; {env('budget')}=auto asks "
                    f"for it)")
        if why_not is not None:
            return RoundConfig(budget=DEFAULT_BUDGET, **rest)
        cands = auto_budgets(knobs["auto_budgets"], block)
        return RoundConfig(budget=cands[-1], auto_budgets=cands, auto_default=True, **rest)
    if given == AUTO:
        cands = auto_budgets(knobs["auto_budgets"], block)
        if flag is not None and flag != cands[-1]:
            raise ValueError(f"DDTREE: --speculative-num-draft-tokens ({sgl.draft_tokens(flag)}) must equal the "
                             f"largest auto budget + 1 = {sgl.draft_tokens(cands[-1])} ({env('budget')}=auto); drop "
                             f"it, or set {env('auto_budgets')}")
        return RoundConfig(budget=cands[-1], auto_budgets=cands, **rest)
    if given is not None:
        if flag is not None and flag != given:
            raise ValueError(f"DDTREE: --speculative-num-draft-tokens ({sgl.draft_tokens(flag)}) must equal budget "
                             f"+ 1 = {sgl.draft_tokens(given)} ({env('budget')}={given}); drop one of the two")
        return RoundConfig(budget=check_budget(given), **rest)
    if flag < 1:
        raise ValueError(f"DDTREE: --speculative-num-draft-tokens is the tree verify width budget + 1 and "
                         f"must be >= 2, got {sgl.draft_tokens(flag)}")
    return RoundConfig(budget=check_budget(flag), **rest)


def default_backends(view) -> dict | None:
    """The attention fields a DDTREE server gets when the user gave no --attention-backend (else None), as
    {ServerArgs field: value}: the CPU's torch_native (SGLang's one CPU backend; DDTree verifies trees inside it),
    else triton (MLA targets too: the tree kernel verifies, triton runs the other modes). With both halves of a
    split given it is left to SGLang; a half given alone gets the default for the other."""
    if not is_ddtree(view) or getattr(view, "attention_backend", None):
        return None
    if getattr(view, "prefill_attention_backend", None) and getattr(view, "decode_attention_backend", None):
        return None
    if str(getattr(view, "device", None) or "") == "cpu":
        return {"attention_backend": CPU_ATTENTION_BACKEND}
    return {"attention_backend": DEFAULT_ATTENTION_BACKEND}


def _reject(what: str, fix: str) -> None:
    raise ValueError(f"DDTREE speculative decoding does not support {what}. Fix: {fix}")


CPU_ATTENTION_BACKEND = "torch_native"  # SGLang's one attention backend on the CPU; DDTree verifies trees inside it


def _check_cpu_serving(view, settings: Settings) -> None:
    """--device cpu: SGLang's CPU engine with its torch_native backend, the tree verified by the project's torch path
    (no CUDA kernel), and what this SGLang install lacks for speculative decoding on the CPU, named with the fix
    before any model loads (adapters/registration.cpu_serving_gaps)."""
    for field in ("attention_backend", "prefill_attention_backend", "decode_attention_backend"):
        backend = getattr(view, field, None)
        if backend not in (None, CPU_ATTENTION_BACKEND):
            flag = f"--{field.replace('_', '-')}"
            _reject(f"{flag} {backend} on the CPU", f"pass {flag} {CPU_ATTENTION_BACKEND} (or leave it unset)")
    if mla_dims(view) is not None:
        _reject("an MLA target on the CPU (its tree verify runs in the CUDA kernel only)", "serve it with --device cuda")
    if settings.prefix not in ("auto", "tree"):
        _reject(f"{env('prefix')}={settings.prefix} on the CPU (the prefix libraries are CUDA kernels)",
                f"unset {env('prefix')}")
    check_cpu_install()


def check_cpu_install() -> None:
    """What this SGLang install lacks for speculative decoding on the CPU, named with the fix. The launcher asks
    first: SGLang's own argument resolution imports sgl_kernel's CPU ops before this module's hook runs."""
    gaps = sgl.cpu_serving_gaps()
    if gaps:
        _reject("--device cpu here, which lacks " + "; ".join(gaps),
                "start with SGLANG_USE_CPU_ENGINE=1 and this repository's CPU site first on PYTHONPATH (`make "
                "sglang-deps` builds it as .deps/cpu-site: sgl_kernel's CPU ops in torch), as `make serve-cpu` does")


def validate_server_args(server_args) -> None:
    """SGLang's validate_server_args hook (runs after the attention backend and page size are settled)."""
    view = sgl.read_view(server_args)
    settings = Settings.from_env()
    device = str(getattr(view, "device", None) or "cuda")
    if device == "cpu":
        _check_cpu_serving(view, settings)
    elif not device.startswith("cuda"):
        _reject(f"device {device!r}", "run on an NVIDIA GPU (--device cuda), or on the CPU (--device cpu)")
    if getattr(view, "speculative_draft_model_path", None) is None:
        _reject("running without a drafter", "pass --speculative-draft-model-path <a DFlash drafter>, "
                "e.g. z-lab/Qwen3-8B-DFlash-b16 for Qwen/Qwen3-8B")
    if getattr(view, "speculative_use_rejection_sampling", False):
        _reject("--speculative-use-rejection-sampling",
                "drop the flag: DDTree's sampled accept (per-node Gumbel-max + tree walk) is already exact")
    if getattr(view, "speculative_use_block_verification", False):
        _reject("--speculative-use-block-verification", "drop the flag (it is a DFLASH chain verifier)")
    if int(getattr(view, "pp_size", 1) or 1) != 1:
        _reject(f"pipeline parallelism (--pp-size {view.pp_size})", "use --pp-size 1")
    if int(getattr(view, "tp_size", 1) or 1) > 1 and device != "cpu":
        logger.warning("DDTREE: --tp-size %s: tensor parallelism has been proven on the CPU server only (tests/served, "
                       "gloo); the multi-GPU run is pending (docs/SERVING.md)", view.tp_size)
    if getattr(view, "enable_dp_attention", False):
        _reject("DP attention", "drop --enable-dp-attention")
    if getattr(view, "speculative_draft_window_size", None) is not None:
        _reject(f"--speculative-draft-window-size {view.speculative_draft_window_size} (DFLASH's compact draft KV: "
                "its drafter attends a recent window; DDTree's drafter shares the target's KV slots and attends "
                "its whole context through the FlashInfer cascade, which reads a long context in a few µs a layer)",
                "drop the flag")
    from sglang_ddtree.attention.native import MLA_LATENT, MLA_ROPE

    dims = mla_dims(view)
    mla = dims is not None
    if mla and dims != (MLA_LATENT, MLA_ROPE):
        _reject(f"an MLA target with latent rank {dims[0]} and rope dim {dims[1]} (the tree kernel verifies "
                f"MLA with latent {MLA_LATENT} + rope {MLA_ROPE}: DeepSeek-V3 / Kimi-K2 shapes)",
                "serve a target of those shapes, or an MHA/GQA target")
    for field in ("attention_backend", "prefill_attention_backend", "decode_attention_backend"):
        backend = getattr(view, field, None)
        flag = f"--{field.replace('_', '-')}"
        if device == "cpu":
            continue  # _check_cpu_serving: torch_native only
        if mla:
            if backend is not None and backend not in backends.MLA:
                _reject(f"{flag} {backend} for an MLA target (the tree kernel verifies MLA trees inside "
                        f"{', '.join(backends.MLA)} only)", f"pass {flag} triton (or flashmla / flashinfer)")
            continue
        if backend == "fa3" and not prefixes.installed("fa3"):
            _reject(f"{flag} fa3 without sgl_kernel's FA3 library (flash_ops) installed",
                    f"install sglang-kernel with it, or pass {flag} triton (or flashinfer)")
        if backend == "fa3" and settings.verify_attention == "mask":
            _reject(f"{flag} fa3 with {env('verify_attention')}=mask (SGLang's fa3 backend applies a tree mask "
                    f"only in its topk > 1 cascade mode, which DDTree does not enable)",
                    f"unset {env('verify_attention')} (the tree kernel verifies on fa3), or pass {flag} triton "
                    f"(or flashinfer)")
        if backend is None or backend in backends.MHA:
            continue
        why = (f"the tree kernel is not wired into {backend}'s TARGET_VERIFY" if backend == "fa4"
               else f"{backend} cannot apply a tree mask in TARGET_VERIFY")
        _reject(f"{flag} {backend} ({why})", f"pass {flag} triton (or flashinfer, fa3)")
    if mla and settings.verify_attention == "mask":
        _reject(f"{env('verify_attention')}=mask for an MLA target (SGLang's MLA backends cannot apply a "
                "tree mask)",
                f"leave {env('verify_attention')} unset: the tree kernel verifies MLA trees")
    refusal = _library_prefix_refusal(settings.prefix, view, settings) \
        if device != "cpu" and settings.prefix not in ("auto", "tree") else None
    if refusal is not None:
        _reject(*refusal)
    page = getattr(view, "page_size", None)
    if page is not None and int(page) != 1 and settings.verify_attention == "mask":
        # the tree kernel reads token-level slots (any page size); SGLang's FULL_MASK verify assumes page 1
        _reject(f"--page-size {page} with {env('verify_attention')}=mask",
                f"use --page-size 1, or leave {env('verify_attention')} unset (the tree kernel serves any page size)")
    block = draft_block_size(view)
    config = resolve_round(view, settings, block)
    budget = config.budget
    if budget < block - 1:
        _reject(f"a tree budget {budget} below the drafter block size − 1 = {block - 1} (SGLang reserves "
                f"2 × (budget + 1) KV slots per request and round; the drafter writes {block})",
                f"use a budget >= {block - 1} (--speculative-num-draft-tokens >= {block})")
    topk = getattr(view, "speculative_eagle_topk", None)
    if topk is not None and int(topk) != 1:
        _reject(f"--speculative-eagle-topk {topk}",
                f"drop it; cap DDTree's per-depth candidates with {env('topk')} instead")
    _check_selector_drafter(view, config)
    drafter_calibration(config, view.speculative_draft_model_path, block - 1)  # a bad file fails here
    config.publish()  # for apply_ddtree_defaults, next in this process, and the scheduler processes it spawns


def apply_ddtree_defaults(server_args) -> None:
    """SGLang's handle_server_args hook: write the DDTree mapping onto the (stand-in) record."""
    view = sgl.read_view(server_args)
    config = RoundConfig.published()  # validate_server_args, which SGLang runs first, resolved and published it
    block = draft_block_size(view)
    budget = config.budget
    steps = getattr(view, "speculative_num_steps", None)
    if steps is not None and int(steps) != 1:
        logger.warning("DDTREE: --speculative-num-steps %s overridden to 1 (one drafter pass proposes the whole "
                       "block; the tree's size is the budget, %d)", steps, budget)
    sgl.write_args(server_args, speculative_num_steps=1, speculative_eagle_topk=1,
                   speculative_dflash_block_size=block)
    sgl.set_budget(server_args, budget)
    sgl.resolve_draft_attention_backend(server_args)
    later = {}
    if str(getattr(view, "device", None) or "") == "cpu":  # SGLang's DFlash picks a CUDA backend for the drafter
        later["speculative_draft_attention_backend"] = CPU_ATTENTION_BACKEND
        if not sgl.cpu_overlap_supported() and not getattr(view, "disable_overlap_schedule", False):
            logger.warning("DDTREE: the overlap scheduler is off on the CPU with this SGLang (its overlap path records "
                           "CUDA streams)")
            later["disable_overlap_schedule"] = True
    if getattr(view, "max_running_requests", None) is None:
        later["max_running_requests"] = DEFAULT_MAX_RUNNING_REQUESTS
    if getattr(view, "enable_mixed_chunk", False):
        logger.warning("DDTREE: --enable-mixed-chunk overridden to off (SGLang's speculative decoding runs "
                       "without mixed chunked prefill)")
        later["enable_mixed_chunk"] = False
    sgl.write_args(server_args, **later)
    logger.info("DDTREE: budget=%s (verify width %d), drafter block=%d, topk=%s",
                f"auto {list(config.auto_budgets)}" if config.auto else budget, sgl.draft_tokens(budget), block,
                config.topk or "min(budget, vocab)")
