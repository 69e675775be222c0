"""DDTree's server settings: every `SGLANG_DDTREE_*` variable declared once (name, type, default, choices, help;
SGLang's srt/environ.py is the model), parsed and checked here only, into one `Settings`.

The round's variables (ROUND_FIELDS: budget, candidates, topk, anchor, children, selector, calibration) are parsed by
`round_knobs` only, which args.resolve_round calls once in the launching process to build the server's
round_config.RoundConfig (published to the scheduler processes as one variable); the others are `Settings`,
which every process reads (`Settings.from_env`). A bad value is one line naming the variable.
docs/SERVING.md's tables are `markdown_tables()` (tests/sglang/test_sglang_settings.py checks they agree).
"""
from __future__ import annotations

import dataclasses
import os

from sglang_ddtree.attention import choose
from sglang_ddtree.ops import NATIVE_BACKENDS
from sglang_ddtree.round_config import DEFAULT_BUDGET, SELECTOR
from sglang_ddtree.sizes import MAX_CUDA_BUDGET
from sglang_ddtree.tree import ANCHORS

AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class Var:
    """One variable: `kind` is how its text is read ('budget', 'int', 'ints', 'bit', 'choice' or 'text')."""

    name: str
    field: str                 # the Settings field it fills
    kind: str
    default: object
    help: str                  # docs/SERVING.md's words for it (markdown)
    choices: tuple = ()
    values: str = ""           # how the docs write its values when they are not `choices`
    flag: str = ""             # `python -m sglang_ddtree.launch_server`'s flag that sets it
    metavar: str = ""
    alias: str = ""            # an earlier name, read when `name` is unset
    earlier: tuple = ()        # (earlier value, its value now) pairs, read as the value now

    def raw(self, environ) -> str:
        """The variable's text (its earlier name's where it is unset); both set and different is refused."""
        new = environ.get(self.name, "").strip()
        old = environ.get(self.alias, "").strip() if self.alias else ""
        if new and old and new.lower() != old.lower():
            raise ValueError(f"{self.name}={new} and {self.alias}={old} disagree ({self.alias} is its earlier name); "
                             f"set {self.name} only")
        return new or old

    def parse(self, text: str):
        """The value of `text` (empty: the default), or a ValueError naming the variable."""
        if not text:
            return self.default
        if self.kind == "text":
            return text
        if self.kind == "bit":
            if text not in ("0", "1"):
                raise ValueError(f"{self.name} must be 0 or 1, got {text!r}")
            return text == "1"
        if self.kind == "choice":
            text = dict(self.earlier).get(text.lower(), text)
            if text.lower() not in self.choices:
                raise ValueError(f"{self.name} must be one of {', '.join(self.choices)}, got {text.lower()!r}")
            return text.lower()
        if self.kind == "budget" and text.lower() == AUTO:
            return text.lower()
        if self.kind == "ints":
            try:
                values = tuple(int(x) for x in text.replace(",", " ").split())
            except ValueError:
                raise ValueError(f"{self.name} must be a list of budgets like 15,31,63, got {text!r}") from None
            if not values or min(values) < 1:
                raise ValueError(f"{self.name} must list budgets >= 1, got {text!r}")
            return values
        try:
            value = int(text)
        except ValueError:
            also = " or auto" if self.kind == "budget" else ""
            raise ValueError(f"{self.name} must be an integer{also}, got {text!r}") from None
        if value < 1:
            raise ValueError(f"{self.name} must be >= 1, got {value}")
        return value

    def docs_values(self) -> str:
        earlier = "".join(f" (`{old}`: `{new}`'s earlier name)" for old, new in self.earlier)
        return self.values or " / ".join(f"`{c}`" for c in self.choices) + earlier

    def docs_flag(self) -> str:
        """How the docs write the flag: `--flag B` or `auto`, `--flag chain` or `none`."""
        first, *others = self.choices if self.kind == "choice" else (self.metavar, AUTO) if self.kind == "budget" \
            else (self.metavar,)
        return " or ".join([f"`{self.flag} {first}`", *(f"`{o}`" for o in others)])


TABLE = (
    Var("SGLANG_DDTREE_BUDGET", "budget", "budget", None, flag="--speculative-ddtree-budget", metavar="B",
        help=f"tree nodes verified per round, 1..{MAX_CUDA_BUDGET} (verify width B + 1), or `auto`: chosen every "
             "round; unset: auto for an MHA/GQA target on triton, or on flashinfer / at page sizes 16 and 64 where "
             "the prefix goes through FlashInfer, else "
             f"{DEFAULT_BUDGET}"),
    Var("SGLANG_DDTREE_TOPK", "topk", "int", None, flag="--speculative-ddtree-topk", metavar="K",
        help="candidates per depth (default min(B, vocab))"),
    Var("SGLANG_DDTREE_ANCHOR", "anchor", "choice", "chain", choices=tuple(ANCHORS),
        flag="--speculative-ddtree-anchor",
        help="`chain` (default): the drafter's greedy chain is popped first, so the tree always holds the DFlash "
             "chain and, greedy, never accepts less than it; `none`: the paper's tree"),
    Var("SGLANG_DDTREE_CHILDREN", "children", "choice", "drawn", choices=("drawn", "top"),
        flag="--speculative-ddtree-children",
        help="a sampled request's tree tokens: `drawn` (default): each node's children drawn from the request's "
             "keys without replacement and verified by recursive rejection sampling, so a node needs the target's "
             "agreement in law, not in token; `top`: each depth's most likely candidates, verified by the target's "
             "own draw (the paper's). Greedy requests take the most likely candidates either way"),
    Var("SGLANG_DDTREE_SELECTOR", "selector", "choice", "auto", choices=SELECTOR,
        flag="--speculative-ddtree-selector",
        help="a DFlash2 drafter's tree (one with a candidate selector, SGLang 0.5.23). `auto` (default): a greedy "
             "request's tree over the selector's lattice (each node's key its path's probability under the "
             "selector's transitions, so a child's rank depends on its parent's token), a sampled request's over the "
             "backbone's per-depth marginals, as for a plain DFlash drafter (its children drawn: "
             "`SGLANG_DDTREE_CHILDREN`); `lattice`: every request's over the lattice, at its temperature, with the "
             "lattice's most likely candidates as children; `marginals`: every request's over the marginals"),
    Var("SGLANG_DDTREE_OPS_BACKEND", "ops_backend", "choice", "auto", choices=NATIVE_BACKENDS,
        help="where the tree stage runs"),
    Var("SGLANG_DDTREE_DRAFT_GRAPH_HEAD", "draft_graph_head", "bit", True, values="`0` / `1`",
        help="build the tree inside the draft CUDA graph"),
    Var("SGLANG_DDTREE_VERIFY_ATTENTION", "verify_attention", "choice", "auto", choices=choose.VERIFY,
        earlier=(("full_mask", choose.VERIFY_ALIASES["full_mask"]),),
        help="our tree-verify kernel inside the target's attention backend (`tree`), or SGLang's dense-mask path "
             "(`mask`) as a fallback; `auto`: `tree` wherever it can serve"),
    Var("SGLANG_DDTREE_PREFIX", "prefix", "choice", "auto", choices=choose.PREFIXES, alias="SGLANG_DDTREE_MLA_PREFIX",
        help="who attends each tree query's committed prefix; our kernel always attends the tree, and the two are "
             "merged by LSE. `auto` (default): FlashInfer's paged prefill for MHA/GQA targets with head dim "
             "64/128/256 (any page size, triton or flashinfer backend), FA3's paged attention on "
             "`--attention-backend fa3` (else FlashInfer's), FlashMLA for MLA targets on "
             "`--attention-backend flashmla --page-size 64`, else our kernel over prefix and tree (`tree`). "
             "`flashinfer` on an MLA target is FlashInfer-MLA over the latent prefix, on any MLA backend (opt-in "
             "until it has run on the GPU). An explicit `flashinfer` / `flashmla` / `fa3` that cannot serve is "
             "refused at start-up. The old name "
             "`SGLANG_DDTREE_MLA_PREFIX` is still read"),
    Var("SGLANG_DDTREE_DRAFT_ATTENTION", "draft_attention", "choice", "sglang", choices=("sglang", "ddtree", "auto"),
        help="the drafter's attention over its context: `sglang` (default): the draft backend's own kernel (on "
             "triton its extend kernel, whose time grows with the context); `ddtree`: the verify's cascade with "
             "every block query seeing the whole block (the `SGLANG_DDTREE_PREFIX=auto` library over the context, "
             "our kernel over the block, merged by LSE), for drafters whose layers all attend bidirectionally, "
             "refused at start-up elsewhere; `auto`: `ddtree` where it can serve, else `sglang`. Opt-in until it "
             "has run at short context"),
    Var("SGLANG_DDTREE_MLA_KV_MOVE", "mla_kv_move", "choice", "layers", choices=("layers", "one_launch"),
        help="how an MLA target's accepted KV moves: SGLang's per-layer move (default), or every layer in one "
             "launch per 256 rows (opt-in until it has run on the GPU)"),
    Var("SGLANG_DDTREE_AUTO_BUDGETS", "auto_budgets", "ints", (), values="comma list",
        help="the auto budget's candidates"),
    Var("SGLANG_DDTREE_CALIBRATION", "calibration", "text", "auto", values="`auto` / `off` / path",
        help="the drafter's per-depth temperatures"),
    Var("SGLANG_DDTREE_TP_CHECK", "tp_check", "bit", False, values="`0` / `1`",
        help="with --tp-size > 1: every round, all-gather a hash of each rank's tree and commit plan and stop the "
             "server at the first round where two ranks disagree (a debugging aid: one device read a round)"),
    Var("SGLANG_DDTREE_STAGE_TIMES", "stage_times", "int", None, values="rounds N",
        help="log, every N decode rounds, the device time a round spends in each stage (draft, verify, sample, "
             "accept, commit, and between rounds) from CUDA events, one event wait a log, and the host's time "
             "launching a round (the first round after a prefill apart); unset: off"),
)
VARS = {v.field: v for v in TABLE}


def env(field: str) -> str:
    """The variable that sets a Settings field (for messages that tell the user what to change)."""
    return VARS[field].name


# the round's variables: parsed by round_knobs alone, into the server's RoundConfig (args.resolve_round)
ROUND_FIELDS = ("budget", "topk", "anchor", "children", "selector", "auto_budgets", "calibration")


@dataclasses.dataclass(frozen=True)
class Settings:
    """The server's DDTree settings outside the round's configuration (TABLE says what each one is)."""

    ops_backend: str = "auto"
    draft_graph_head: bool = True
    verify_attention: str = "auto"
    prefix: str = "auto"
    draft_attention: str = "sglang"  # the drafter's context attention: SGLang's backend, or DDTree's cascade
    mla_kv_move: str = "layers"
    tp_check: bool = False        # all-gather a hash of each round's tree and plan across TP ranks
    stage_times: int | None = None  # log per-stage round times every N rounds; None: off

    @property
    def mla_prefix(self) -> str:
        """The prefix setting by its earlier name (callers written before it took MHA/GQA targets too)."""
        return self.prefix

    @classmethod
    def from_env(cls, environ=None) -> "Settings":
        environ = os.environ if environ is None else environ
        return cls(**{v.field: v.parse(v.raw(environ)) for v in TABLE if v.field not in ROUND_FIELDS})


def round_knobs(environ=None) -> dict:
    """The round's variables as given: budget (None, an int or 'auto'), auto_budgets (() = the default ladder),
    topk, anchor (tree.ANCHORS' value), children, selector, calibration. Called once per server, by args.resolve_round."""
    environ = os.environ if environ is None else environ
    values = {f: VARS[f].parse(VARS[f].raw(environ)) for f in ROUND_FIELDS}
    return {**values, "anchor": ANCHORS[values["anchor"]]}


def markdown_tables() -> tuple[str, str]:
    """docs/SERVING.md's two tables: the launcher's flags, and the other variables."""
    flags = ["| flag (`python -m sglang_ddtree.launch_server`) | environment | meaning |", "|---|---|---|"]
    flags += [f"| {v.docs_flag()} | `{v.name}` | {v.help} |" for v in TABLE if v.flag]
    rest = ["| environment variable | values | what |", "|---|---|---|"]
    rest += [f"| `{v.name}` | {v.docs_values()} | {v.help} |" for v in TABLE if not v.flag]
    return "\n".join(flags), "\n".join(rest)
