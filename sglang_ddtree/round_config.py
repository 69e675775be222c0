"""RoundConfig: the round's knobs (budget fixed or auto and its candidates, the per-depth candidate cap, anchor,
children, keys, calibration), resolved once and then only read.

Why one owner: the server used to parse the budget from its environment in the argument hooks and again in
every scheduler process, and to convert budget B and verify width B + 1 back and forth; the engine kept its own
default budget and auto ladder. Now the server resolves a RoundConfig once, in the process that resolves its
arguments (sglang/args.py, from the flags and `SGLANG_DDTREE_*` variables), and hands it to the scheduler
processes SGLang spawns as one serialized variable (`publish` / `published`); the engine builds one from
`Engine.generate`'s arguments. Both take their defaults from here. Below sglang/ and engine/ in the import graph.
"""
from __future__ import annotations

import dataclasses
import json
import os

from .sizes import MAX_CUDA_BUDGET, budget_error, budget_of, verify_width

DEFAULT_BUDGET = 32  # a fixed budget where none is given and auto is not the default
# the auto budget's default candidates, with the drafter chain's budget (block - 1) always among them
AUTO_LADDER = (15, 31, 63)
ANCHOR_CHOICES = ("chain", None)   # tree.ANCHORS' values: the greedy chain always in the tree, or the paper's tree
CHILDREN = ("drawn", "top")        # a sampled request's tree tokens: drawn (rejection.py) or the top candidates
KEYS = ("draft", "law")            # a sampled request's tree ranked by the draft (the paper's), or under its law
# a DFlash2 drafter's tree: auto (greedy requests over its selector's lattice, sampled ones over its backbone's
# marginals, their children drawn), or one of the two for every request
SELECTOR = ("auto", "lattice", "marginals")
# the resolved config, for the scheduler processes (they inherit the launcher's environment); not a user knob
PUBLISHED = "SGLANG_DDTREE_ROUND_CONFIG"


def auto_candidates(block: int, given=(), max_budget: int | None = MAX_CUDA_BUDGET, name: str = "auto_budgets") -> tuple:
    """The auto budget's candidates, ascending, the chain's (block - 1) always among them, so a round never verifies
    less than the DFlash chain: `given`, else AUTO_LADDER's budgets wider than the block. One line naming `name`
    for a candidate below the chain's or above `max_budget` (None: the caller checks the limit)."""
    chain = budget_of(block)
    ladder = [b for b in AUTO_LADDER if verify_width(b) > int(block)]
    cands = sorted(set(given or ladder) | {chain})
    if cands[0] < chain:
        low = [b for b in cands if b < chain]
        raise ValueError(f"{name}: budgets {low} are below the drafter block size − 1 = {chain} (the chain alone "
                         f"needs {chain} nodes); list budgets >= {chain}")
    if budget_error(cands[-1], max_budget) is not None:
        raise ValueError(f"{name}: budget {cands[-1]} is above the tree builder's limit; use budgets <= {max_budget}")
    return tuple(cands)


@dataclasses.dataclass(frozen=True)
class RoundConfig:
    """One server's (or one Engine.generate call's) round. `budget` is the widest tree's: with auto it is the
    largest candidate, the width the server reserves KV and captures graphs for."""

    budget: int = DEFAULT_BUDGET  # tree nodes B (verify width B + 1); 0: the root alone (the engine's AR)
    auto_budgets: tuple = ()      # auto: the candidates, ascending (budget is the last); (): a fixed budget
    auto_default: bool = False    # auto only because no budget was given (the server may fall back to `budget`)
    topk: int | None = None       # per-depth candidate cap k; None: k = min(budget, vocab), as in the paper
    anchor: str | None = "chain"  # ANCHOR_CHOICES
    children: str = "drawn"       # CHILDREN
    keys: str = "law"             # KEYS (the server's draft head always ranks under each request's law; the engine
                                  # reads this field)
    selector: str = "auto"        # SELECTOR (read only where the drafter has a candidate selector)
    # the drafter's per-depth temperatures: 'auto' (its directory's file) | 'off' | a path; None: the caller holds
    # them itself (Engine.generate's draft_temperature / sampling_temperature)
    calibration: str | None = "auto"

    def __post_init__(self):
        """Every field checked, one line naming it (the callers check their users' arguments first, by their
        own names; this catches a config built wrong)."""
        if not isinstance(self.budget, int) or isinstance(self.budget, bool) or self.budget < 0:
            raise ValueError(f"RoundConfig.budget must be an int >= 0, got {self.budget!r}")
        cands = tuple(self.auto_budgets)
        if cands and (list(cands) != sorted(set(cands)) or cands[0] < 1 or cands[-1] != self.budget):
            raise ValueError(f"RoundConfig.auto_budgets must be distinct budgets >= 1, ascending, ending at the budget "
                             f"{self.budget}, got {cands!r}")
        object.__setattr__(self, "auto_budgets", cands)
        if self.auto_default and not cands:
            raise ValueError("RoundConfig.auto_default needs auto_budgets")
        if self.topk is not None and (not isinstance(self.topk, int) or self.topk < 1):
            raise ValueError(f"RoundConfig.topk must be None or an int >= 1, got {self.topk!r}")
        for field, choices in (("anchor", ANCHOR_CHOICES), ("children", CHILDREN), ("keys", KEYS),
                               ("selector", SELECTOR)):
            if getattr(self, field) not in choices:
                raise ValueError(f"RoundConfig.{field} must be one of {choices}, got {getattr(self, field)!r}")

    @property
    def auto(self) -> bool:
        """The budget is chosen every round among auto_budgets."""
        return bool(self.auto_budgets)

    @property
    def verify_width(self) -> int:
        """The widest tree's slots per request (SGLang's speculative_num_draft_tokens)."""
        return verify_width(self.budget)

    @property
    def widths(self) -> tuple:
        """The verify widths of the auto candidates (the fixed budget's alone without auto)."""
        return tuple(verify_width(b) for b in self.auto_budgets or (self.budget,))

    def fixed(self) -> "RoundConfig":
        """The same round at its widest budget every round (auto given up)."""
        return dataclasses.replace(self, auto_budgets=(), auto_default=False)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RoundConfig":
        values = json.loads(text)
        values["auto_budgets"] = tuple(values["auto_budgets"])
        return cls(**values)

    def publish(self, environ=None) -> None:
        """Hand the config to the processes this one spawns (SGLang's schedulers inherit its environment)."""
        (os.environ if environ is None else environ)[PUBLISHED] = self.to_json()

    @classmethod
    def published(cls, environ=None) -> "RoundConfig":
        """The config the argument hook published (no budget variable is parsed again)."""
        text = (os.environ if environ is None else environ).get(PUBLISHED)
        if not text:
            raise RuntimeError(f"DDTREE: no round configuration in {PUBLISHED} (the plugin's argument hook did not "
                               "run in the launching process)")
        return cls.from_json(text)
