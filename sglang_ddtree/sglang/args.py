"""DDTree's server arguments: the mapping onto SGLang's fields, the DDTree knobs, and the refusals.

Mapping (SGLang has no field for a tree budget, and a plugin cannot add one):
- tree budget B: `SGLANG_DDTREE_BUDGET` (what `python -m sglang_ddtree.launch_server
  --speculative-ddtree-budget B` sets), else `--speculative-num-draft-tokens` − 1, else the default (below);
  `SGLANG_DDTREE_BUDGET=auto`: a budget chosen every round among candidates (`SGLANG_DDTREE_AUTO_BUDGETS`,
  default 15, 31, 63 above the chain's; the chain's block − 1 always among them), B the largest;
- the default, when no budget is given: auto where it has served on the GPU (an MHA/GQA target on triton at
  page size 1, the tree kernel verifying), else the fixed DEFAULT_BUDGET (`default_budget_is_auto`);
- `speculative_num_draft_tokens` := n = B + 1, the verify width every attention backend reads;
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

import dataclasses
import logging
import os

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
DEFAULT_BUDGET = 32
# The CUDA tree builder holds n = budget + 1 <= 1024 nodes per request (kMaxTreeSlots in
# kernels/tree_kernels.cuh: one mask word per lane, 10-bit node indices in the frontier metadata).
MAX_BUDGET = 1023
DEFAULT_BLOCK_SIZE = 16
DEFAULT_MAX_RUNNING_REQUESTS = 48
# Backends whose TARGET_VERIFY applies an arbitrary FULL_MASK tree mask, eagerly and under CUDA graphs
# (with hooks.py's mask policy), and where the tree kernel takes TARGET_VERIFY over: what this release serves.
TREE_MASK_BACKENDS = ("triton", "flashinfer")
# MLA targets (DeepSeek-V2/V3, Kimi): only through the tree kernel (tree_attention.py), on these backends
MLA_BACKENDS = ("triton", "flashmla", "flashinfer")
DEFAULT_ATTENTION_BACKEND = "triton"

ENV_BUDGET = "SGLANG_DDTREE_BUDGET"
# what the argument hook writes into ENV_BUDGET when no budget was given and auto is the default: auto, except
# that where the tree kernel turns out not to serve (known only in the scheduler) the server keeps its widest
# budget instead of refusing, as it refuses an explicit auto (decode_round.choose_verify_attention)
AUTO_DEFAULT = "auto-default"
ENV_AUTO_BUDGETS = "SGLANG_DDTREE_AUTO_BUDGETS"
AUTO_WIDTHS = (16, 32, 64)  # the default auto ladder: these verify widths above the drafter's block, and the chain's
ENV_TOPK = "SGLANG_DDTREE_TOPK"
ENV_OPS_BACKEND = "SGLANG_DDTREE_OPS_BACKEND"
ENV_GRAPH_HEAD = "SGLANG_DDTREE_DRAFT_GRAPH_HEAD"
ENV_VERIFY_ATTENTION = "SGLANG_DDTREE_VERIFY_ATTENTION"
VERIFY_ATTENTION = ("auto", "tree", "full_mask")
ENV_PREFIX = "SGLANG_DDTREE_PREFIX"
ENV_MLA_PREFIX = "SGLANG_DDTREE_MLA_PREFIX"  # its earlier name, still read when ENV_PREFIX is unset
# the verify's prefix attention (tree_attention.py): auto (FlashMLA for an MLA target on flashmla; MHA/GQA:
# tree_attention.AUTO_GQA_PREFIX), our kernel over prefix and tree, or a library's over the prefix and ours
# over the tree, merged by LSE
PREFIX = ("auto", "tree", "flashmla", "flashinfer")
# MLA targets' accepted-KV move: SGLang's own, a layer at a time (default), or every layer in one launch
ENV_MLA_KV_MOVE = "SGLANG_DDTREE_MLA_KV_MOVE"
MLA_KV_MOVE = ("layers", "one_launch")
ENV_CALIBRATION = "SGLANG_DDTREE_CALIBRATION"
ENV_ANCHOR = "SGLANG_DDTREE_ANCHOR"
ANCHORS = {"chain": "chain", "none": None}  # served default: chain (held-out tau higher at every budget)


def _env_int(name: str, minimum: int) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


@dataclasses.dataclass(frozen=True)
class Knobs:
    """DDTree settings that travel by environment (spawned scheduler processes inherit them)."""

    budget: int | None      # None: from --speculative-num-draft-tokens
    topk: int | None        # per-depth candidate cap k; None: k = min(budget, vocab), as in the paper
    ops_backend: str        # 'auto' | 'cuda' | 'cpu' for sglang_ddtree's build/accept ops
    draft_graph_head: bool  # fold lm_head + top-k + tree build into the draft CUDA graph
    verify_attention: str   # 'auto' (the tree kernel where it applies) | 'tree' (required) | 'full_mask'
    anchor: str | None = "chain"  # 'chain': the drafter's greedy chain always in the tree; None: the paper's
    calibration: str = "auto"     # 'auto' (the drafter directory's ddtree_calibration.json if any) | 'off' | path
    auto: bool = False            # SGLANG_DDTREE_BUDGET=auto: the budget is chosen every round (budget is None)
    auto_default: bool = False    # ... because no budget was given (AUTO_DEFAULT), not asked for
    auto_budgets: tuple = ()      # its candidates (SGLANG_DDTREE_AUTO_BUDGETS); () = the default ladder
    prefix: str = "auto"          # SGLANG_DDTREE_PREFIX (PREFIX above)
    mla_kv_move: str = "layers"   # SGLANG_DDTREE_MLA_KV_MOVE: one_launch = every layer at once (not yet GPU-run)

    @property
    def mla_prefix(self) -> str:
        """The prefix knob by its earlier name (callers written before it took MHA/GQA targets too)."""
        return self.prefix

    @classmethod
    def from_env(cls) -> "Knobs":
        backend = os.environ.get(ENV_OPS_BACKEND, "auto").strip() or "auto"
        if backend not in ("auto", "cuda", "cpu"):
            raise ValueError(f"{ENV_OPS_BACKEND} must be auto, cuda or cpu, got {backend!r}")
        head = os.environ.get(ENV_GRAPH_HEAD, "1").strip()
        if head not in ("0", "1"):
            raise ValueError(f"{ENV_GRAPH_HEAD} must be 0 or 1, got {head!r}")
        verify = _env_choice(ENV_VERIFY_ATTENTION, VERIFY_ATTENTION)
        anchor = _env_choice(ENV_ANCHOR, tuple(ANCHORS))
        calibration = os.environ.get(ENV_CALIBRATION, "auto").strip() or "auto"
        prefix = _env_prefix()
        mla_kv_move = _env_choice(ENV_MLA_KV_MOVE, MLA_KV_MOVE)
        raw = os.environ.get(ENV_BUDGET, "").strip().lower()
        auto = raw in ("auto", AUTO_DEFAULT)
        return cls(budget=None if auto else _env_int(ENV_BUDGET, 1), topk=_env_int(ENV_TOPK, 1),
                   ops_backend=backend, draft_graph_head=head == "1", verify_attention=verify,
                   anchor=ANCHORS[anchor], calibration=calibration, auto=auto, auto_default=raw == AUTO_DEFAULT,
                   auto_budgets=_env_int_list(ENV_AUTO_BUDGETS), prefix=prefix, mla_kv_move=mla_kv_move)


def _env_choice(name: str, choices: tuple) -> str:
    """One of `choices` (any case) from the environment; unset or empty: the first, the default."""
    value = os.environ.get(name, "").strip().lower() or choices[0]
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _env_prefix() -> str:
    """SGLANG_DDTREE_PREFIX, else its earlier name SGLANG_DDTREE_MLA_PREFIX; both set and different is refused."""
    new, old = (os.environ.get(n, "").strip().lower() for n in (ENV_PREFIX, ENV_MLA_PREFIX))
    if new and old and new != old:
        raise ValueError(f"{ENV_PREFIX}={new} and {ENV_MLA_PREFIX}={old} disagree ({ENV_MLA_PREFIX} is its earlier "
                         f"name); set {ENV_PREFIX} only")
    return _env_choice(ENV_PREFIX if new or not old else ENV_MLA_PREFIX, PREFIX)


def _env_int_list(name: str) -> tuple:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return ()
    try:
        values = tuple(int(x) for x in raw.replace(",", " ").split())
    except ValueError:
        raise ValueError(f"{name} must be a list of budgets like 15,31,63, got {raw!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{name} must list budgets >= 1, got {raw!r}")
    return values


def auto_budgets(knobs: Knobs, block: int) -> tuple:
    """The candidate budgets of SGLANG_DDTREE_BUDGET=auto, ascending, the chain's (block − 1) always first:
    a round never verifies less than the DFlash chain."""
    chain = int(block) - 1
    ladder = [w - 1 for w in AUTO_WIDTHS if w > int(block)]
    cands = set(knobs.auto_budgets or ladder) | {chain}
    low = [b for b in cands if b < chain]
    if low:
        raise ValueError(f"{ENV_AUTO_BUDGETS}: budgets {sorted(low)} are below the drafter block size − 1 = {chain} "
                         f"(the chain alone needs {chain} nodes); list budgets >= {chain}")
    return tuple(sorted(check_budget(b) for b in cands))


def depth_temperatures(knobs: Knobs, draft_path, depth_limit: int) -> list[float] | None:
    """The drafter's per-depth calibration (sglang_ddtree/calibration.py) the tree ranks by, or None.
    'auto' uses the drafter directory's file when there is one; a file that is there but wrong, or an
    explicit path that is wrong, is refused naming the knob."""
    from sglang_ddtree.calibration import FILE, load_depth_temperatures

    choice = knobs.calibration
    if choice == "off":
        return None
    if choice == "auto":
        if not draft_path or not os.path.isfile(os.path.join(str(draft_path), FILE)):
            return None
        path = os.path.join(str(draft_path), FILE)
    else:
        path = choice
    try:
        return load_depth_temperatures(path, depth_limit)
    except ValueError as e:
        raise ValueError(f"{ENV_CALIBRATION}={choice}: {e} (set {ENV_CALIBRATION}=off to rank by the raw draft "
                         "probabilities)") from None


def is_ddtree(view) -> bool:
    algo = getattr(view, "speculative_algorithm", None)
    return isinstance(algo, str) and algo.upper() == active_algorithm()


def _hf_config(path, view, revision=None):
    from sglang.srt.utils.hf_transformers_utils import get_config

    return get_config(path, trust_remote_code=bool(getattr(view, "trust_remote_code", False)), revision=revision)


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


def _flashinfer_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("flashinfer") is not None


def _flashinfer_prefix_refusal(view, mla: bool, knobs: "Knobs") -> tuple | None:
    """(what, fix) when SGLANG_DDTREE_PREFIX=flashinfer cannot serve this server, else None."""
    from sglang_ddtree.attention.libraries import FI_HEAD_DIMS

    unset = f"unset {ENV_PREFIX} (our kernel reads the prefix)"
    if mla:
        return (f"{ENV_PREFIX}=flashinfer for an MLA target (its FlashInfer-MLA prefix is not wired)",
                f"{unset}, or {ENV_PREFIX}=flashmla with --attention-backend flashmla --page-size 64")
    if knobs.verify_attention == "full_mask":
        return (f"{ENV_PREFIX}=flashinfer with {ENV_VERIFY_ATTENTION}=full_mask (the prefix split is the tree "
                f"kernel's; SGLang's FULL_MASK verify has none)", "unset one of the two")
    d = head_dim(view)
    if d is not None and d not in FI_HEAD_DIMS:
        return (f"{ENV_PREFIX}=flashinfer for a target of head dim {d} (FlashInfer's paged prefill takes head dims "
                f"{', '.join(map(str, FI_HEAD_DIMS))})", unset)
    if not _flashinfer_installed():
        return f"{ENV_PREFIX}=flashinfer without flashinfer installed", f"pip install flashinfer-python, or {unset}"
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
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

    try:
        cfg = _hf_config(view.speculative_draft_model_path, view,
                         getattr(view, "speculative_draft_model_revision", None))
        size = parse_dflash_draft_config(draft_hf_config=cfg).resolve_block_size(default=None)
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as e:  # an unreadable or odd config
        logger.warning("DDTREE: could not read block_size from the drafter config (%s); using %d",
                       e, DEFAULT_BLOCK_SIZE)
        size = None
    return int(size) if size is not None else DEFAULT_BLOCK_SIZE


def check_budget(budget: int) -> int:
    """Refuse a budget the CUDA tree builder cannot build (at start-up, not in the first decode round)."""
    if budget > MAX_BUDGET:
        _reject(f"a tree budget of {budget} (the CUDA tree builder holds at most budget + 1 = {MAX_BUDGET + 1} "
                "nodes per request)", f"use a budget <= {MAX_BUDGET} (--speculative-num-draft-tokens <= "
                f"{MAX_BUDGET + 1}, or {ENV_BUDGET} / --speculative-ddtree-budget <= {MAX_BUDGET})")
    return budget


def budget_given(view, knobs: Knobs) -> bool:
    """Whether the user chose the budget (the knob, auto, or --speculative-num-draft-tokens); an auto-default
    left in this process's environment by an earlier server's arguments is not a choice."""
    return ((knobs.auto and not knobs.auto_default) or knobs.budget is not None
            or getattr(view, "speculative_num_draft_tokens", None) is not None)


def default_budget_is_auto(view, knobs: Knobs) -> str | None:
    """None when a server given no budget should choose it every round; else why it keeps DEFAULT_BUDGET.
    Auto never verifies less than the chain and follows the batch (a fixed budget 63's round graphs cost 3.1×
    budget 15's at batch 32 on the 8B-shaped pair, docs/benchmarks/sglang-h200-2026-12-04-auto.md), but it is
    the default only where it has served on the GPU: elsewhere its multi-width verify is CPU-tested only."""
    backend = getattr(view, "attention_backend", None) or DEFAULT_ATTENTION_BACKEND
    page = int(getattr(view, "page_size", None) or 1)
    if knobs.verify_attention == "full_mask":
        return f"{ENV_VERIFY_ATTENTION}=full_mask"
    if backend != "triton":
        return f"--attention-backend {backend}"
    if page != 1:
        return f"--page-size {page}"
    if mla_dims(view) is not None:
        return "an MLA target"
    return None


def resolve_budget(view, knobs: Knobs, block: int) -> int:
    """Tree budget B from the environment knob or --speculative-num-draft-tokens (= B + 1); with
    SGLANG_DDTREE_BUDGET=auto the largest candidate; with none of them, the default's."""
    ndt = getattr(view, "speculative_num_draft_tokens", None)
    if not budget_given(view, knobs) and default_budget_is_auto(view, knobs) is None:
        return auto_budgets(knobs, block)[-1]
    if knobs.auto:
        top = auto_budgets(knobs, block)[-1]
        if ndt is not None and int(ndt) != top + 1:
            raise ValueError(f"DDTREE: --speculative-num-draft-tokens ({ndt}) must equal the largest auto budget + 1 "
                             f"= {top + 1} ({ENV_BUDGET}=auto); drop it, or set {ENV_AUTO_BUDGETS}")
        return top
    if knobs.budget is not None:
        if ndt is not None and int(ndt) != knobs.budget + 1:
            raise ValueError(
                f"DDTREE: --speculative-num-draft-tokens ({ndt}) must equal budget + 1 = {knobs.budget + 1} "
                f"({ENV_BUDGET}={knobs.budget}); drop one of the two")
        return check_budget(knobs.budget)
    if ndt is not None:
        if int(ndt) < 2:
            raise ValueError(f"DDTREE: --speculative-num-draft-tokens is the tree verify width budget + 1 and "
                             f"must be >= 2, got {ndt}")
        return check_budget(int(ndt) - 1)
    return DEFAULT_BUDGET


def choose_attention_backend(view) -> str | None:
    """The default attention backend for a DDTREE server when the user gave none (else None)."""
    if not is_ddtree(view):
        return None
    if any(getattr(view, f, None) for f in ("attention_backend", "prefill_attention_backend",
                                            "decode_attention_backend")):
        return None
    return DEFAULT_ATTENTION_BACKEND  # MLA targets too: the tree kernel verifies, triton runs the other modes


def _reject(what: str, fix: str) -> None:
    raise ValueError(f"DDTREE speculative decoding does not support {what}. Fix: {fix}")


def validate_server_args(server_args) -> None:
    """SGLang's validate_server_args hook (runs after the attention backend and page size are settled)."""
    from . import compat

    view = compat.read_view(server_args)
    knobs = Knobs.from_env()
    device = str(getattr(view, "device", None) or "cuda")
    if not device.startswith("cuda"):
        _reject(f"device {device!r}", "run on an NVIDIA GPU (--device cuda)")
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
    if int(getattr(view, "tp_size", 1) or 1) != 1:
        _reject(f"tensor parallelism (--tp-size {view.tp_size}) in this release",
                "use --tp-size 1 (one GPU per server; scale out with --dp-size)")
    if getattr(view, "enable_dp_attention", False):
        _reject("DP attention", "drop --enable-dp-attention")
    if getattr(view, "speculative_draft_window_size", None) is not None:
        _reject("--speculative-draft-window-size (compact draft KV)", "drop the flag")
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
        if mla:
            if backend is not None and backend not in MLA_BACKENDS:
                _reject(f"{flag} {backend} for an MLA target (the tree kernel verifies MLA trees inside "
                        f"{', '.join(MLA_BACKENDS)} only)", f"pass {flag} triton (or flashmla / flashinfer)")
            continue
        if backend is None or backend in TREE_MASK_BACKENDS:
            continue
        why = ("fa3 verifies a tree only in cascade mode (topk > 1), which this release does not enable"
               if backend in ("fa3", "fa4") else f"{backend} cannot apply a tree mask in TARGET_VERIFY")
        _reject(f"{flag} {backend} ({why})", f"pass {flag} triton (or flashinfer)")
    if mla and knobs.verify_attention == "full_mask":
        _reject(f"{ENV_VERIFY_ATTENTION}=full_mask for an MLA target (SGLang's MLA backends cannot apply a tree mask)",
                f"leave {ENV_VERIFY_ATTENTION} unset: the tree kernel verifies MLA trees")
    if knobs.prefix == "flashmla" and not (mla and getattr(view, "attention_backend", None) == "flashmla"):
        _reject(f"{ENV_PREFIX}=flashmla without an MLA target on --attention-backend flashmla (FlashMLA reads "
                f"the prefix from SGLang's FlashMLA page tables, page size 64)",
                f"serve the MLA target with --attention-backend flashmla --page-size 64, or unset {ENV_PREFIX}")
    if knobs.prefix == "flashinfer":
        refusal = _flashinfer_prefix_refusal(view, mla, knobs)
        if refusal is not None:
            _reject(*refusal)
    page = getattr(view, "page_size", None)
    if page is not None and int(page) != 1 and knobs.verify_attention == "full_mask":
        # the tree kernel reads token-level slots (any page size); SGLang's FULL_MASK verify assumes page 1
        _reject(f"--page-size {page} with {ENV_VERIFY_ATTENTION}=full_mask",
                f"use --page-size 1, or leave {ENV_VERIFY_ATTENTION} unset (the tree kernel serves any page size)")
    block = draft_block_size(view)
    budget = resolve_budget(view, knobs, block)
    if budget + 1 < block:
        _reject(f"a tree budget {budget} below the drafter block size − 1 = {block - 1} (SGLang reserves "
                f"2 × (budget + 1) KV slots per request and round; the drafter writes {block})",
                f"use a budget >= {block - 1} (--speculative-num-draft-tokens >= {block})")
    topk = getattr(view, "speculative_eagle_topk", None)
    if topk is not None and int(topk) != 1:
        _reject(f"--speculative-eagle-topk {topk}",
                f"drop it; cap DDTree's per-depth candidates with {ENV_TOPK} instead")
    depth_temperatures(knobs, view.speculative_draft_model_path, block - 1)  # a bad file fails here, not later


def apply_ddtree_defaults(server_args) -> None:
    """SGLang's handle_server_args hook: write the DDTree mapping onto the (stand-in) record."""
    from sglang.srt.arg_groups.speculative_hook import _resolve_dflash_draft_attention_backend

    from . import compat

    view = compat.read_view(server_args)
    knobs = Knobs.from_env()
    block = draft_block_size(view)
    if not budget_given(view, knobs):
        why_not = default_budget_is_auto(view, knobs)
        if why_not is None:  # the scheduler processes read the knobs from the environment they inherit
            os.environ[ENV_BUDGET] = AUTO_DEFAULT
        elif knobs.auto_default:
            del os.environ[ENV_BUDGET]
        knobs = Knobs.from_env()
        logger.info("DDTREE: no budget given: %s", "auto, chosen every round" if why_not is None else
                    f"the fixed budget {DEFAULT_BUDGET} (auto is the default for MHA/GQA targets on triton at "
                    f"page size 1 only, not with {why_not}; {ENV_BUDGET}=auto asks for it)")
    budget = resolve_budget(view, knobs, block)
    steps = getattr(view, "speculative_num_steps", None)
    if steps is not None and int(steps) != 1:
        logger.warning("DDTREE: --speculative-num-steps %s overridden to 1 (one drafter pass proposes the whole "
                       "block; the tree's size is the budget, %d)", steps, budget)
    server_args.speculative_num_steps = 1
    server_args.speculative_eagle_topk = 1
    server_args.speculative_num_draft_tokens = budget + 1
    server_args.speculative_dflash_block_size = block
    _resolve_dflash_draft_attention_backend(server_args)
    if getattr(view, "max_running_requests", None) is None:
        server_args.max_running_requests = DEFAULT_MAX_RUNNING_REQUESTS
    if getattr(view, "enable_mixed_chunk", False):
        logger.warning("DDTREE: --enable-mixed-chunk overridden to off (SGLang's speculative decoding runs "
                       "without mixed chunked prefill)")
        server_args.enable_mixed_chunk = False
    logger.info("DDTREE: budget=%s (verify width %d), drafter block=%d, topk=%s",
                f"auto {list(auto_budgets(knobs, block))}" if knobs.auto else budget, budget + 1, block,
                knobs.topk or "min(budget, vocab)")
