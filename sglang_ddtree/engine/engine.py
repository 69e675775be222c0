"""The standalone decode loop: DDTree, the DFlash chain and plain autoregressive decoding, one loop.

Every round is round.Round.run, the round the SGLang worker runs, with a batch of requests of ragged lengths
as its host (`_EngineBatch`, round.RoundHost): its draft is the drafter over [root, MASK x L] at positions
seq_len .. seq_len+L and build_tree on its logits (chain: budget L, topk 1; AR: budget 0, the root alone);
its verify one target forward over the n tree nodes at positions seq_len + depth, prefix + ancestor mask;
the commit plan's KV moves and drafter context land at slots seq_len .. seq_len+len-1, the bonus is the next
root. Nothing is read on the host inside a round, except by the auto budget's first round (its own
prediction). The three methods differ only in the tree's shape, so they are compared under identical
conditions. Stage "loop" is the per-round `all done?` check (a device->host read) and the Python between
rounds.
"""
from __future__ import annotations

import math
import numbers
import os
import time
from collections.abc import Iterable

import torch

from .. import _checks as C
from ..calibration import FILE as CALIBRATION_FILE
from ..keys import Calibration, DraftKeys
from ..attention import Shape, choose, engine_prefix
from ..round import Round, RoundOps
from ..round_config import CHILDREN, DEFAULT_BUDGET, KEYS, RoundConfig, auto_candidates
from ..sizes import MAX_BUDGET, check_budget
from ..tree import build_tree, chain_pops
from .batch import SELECTOR_METHODS, GenerationResult, _EngineBatch
from .checkpoint import load_drafter, load_target
from .data import MODELS_DIR, PAIRS
from .dflash import DFlashDraftModel
from .model import CausalLM, prefix_tree_mask
from .tokenizer import ByteTokenizer

METHODS = ("ddtree", "chain", "ar", "lattice", "walk")
# generate()'s default for the tree's arguments: what the server serves for the method (RoundConfig's defaults)
SERVED = "served"
SERVED_TREE = RoundConfig()  # the served tree's anchor, children, keys and calibration ('auto': the drafter's file)
# paper=True's defaults instead: the paper's tree (no anchor, each depth's top candidates, the raw draft's keys)
PAPER_TREE = dict(anchor=None, children="top", keys="draft", draft_temperature=None, sampling_temperature=None,
                  drawn_shape=None)


class Engine:
    """Decode with a Qwen3 or DeepSeek-V3 (MLA) target and a DFlash drafter. `Engine.from_pretrained()`: the
    shipped tiny Qwen3 pair; `Engine.from_pretrained(pair="mla")`: the MLA one."""

    def __init__(self, target: CausalLM, drafter: DFlashDraftModel | None, tokenizer=None,
                 attention: str = "auto", prefix: str = "auto"):
        """attention: verify attention — 'tree' (the project's tree_verify_attention: for a Qwen3 target its
        CUDA kernel, bf16, head_dim 128; for an MLA target its absorbed MLA form on any device, the torch path
        on the CPU), 'mask' (torch SDPA over the cache with a dense mask), 'auto' (tree where it applies); the
        earlier 'op' / 'sdpa' are read as tree / mask (attention/choose.py). prefix: who attends the prefix under
        the tree attention, as SGLANG_DDTREE_PREFIX says it — 'auto' (choose.choose for the engine), 'tree' or a
        library ('flashmla', 'flashinfer', 'fa3'), refused here where it cannot serve."""
        self.target, self.drafter = target, drafter
        self.draft_dir = None  # from_pretrained's drafter directory (its calibration file, if any)
        self.tokenizer = tokenizer or ByteTokenizer()
        p = next(target.parameters())
        self.device, self.dtype = p.device, p.dtype
        asked = choose.canonical(attention, choose.VERIFY, choose.VERIFY_ALIASES, "attention")
        self.prefix = choose.canonical(prefix, choose.PREFIXES, choose.PREFIX_ALIASES, "prefix")
        why = None if target.op_attention_fits(self.device, self.dtype) else \
            "this target (it needs a CUDA bf16 target with head_dim 128, or an MLA target)"
        tree = choose.verify(asked, why, f"attention={attention!r}")
        self.attention = "tree" if tree else "mask"
        if tree and self.prefix != "auto":  # a library that cannot serve this target is refused here, not mid-decode
            mla = hasattr(target.config, "kv_lora_rank")
            engine_prefix(Shape("mla" if mla else "gqa", device=self.device.type, dtype=self.dtype), self.prefix,
                          setting="prefix")
            if self.device.type != "cuda":  # `tree` on the CPU: the torch path, as the server's
                self.prefix = "auto"
        self.ops = RoundOps(self.device)
        if drafter is not None:
            d = drafter.config
            if d.hidden_size != target.config.hidden_size or max(d.target_layer_ids) >= target.config.num_hidden_layers:
                raise ValueError("drafter does not match the target (hidden size / target_layer_ids)")
            self.block_size, self.mask_token_id = d.block_size, d.mask_token_id
            self.capture = tuple(d.target_layer_ids)
        else:
            self.block_size, self.mask_token_id, self.capture = 1, 0, ()

    @classmethod
    def from_pretrained(cls, target_dir: str | None = None, draft_dir: str | None = None, device=None,
                        dtype=torch.float32, attention: str = "auto", pair: str = "qwen3",
                        prefix: str = "auto") -> "Engine":
        """pair: which shipped tiny pair (data.PAIRS) when target_dir is None."""
        if target_dir is None:
            if pair not in PAIRS:
                raise ValueError(f"pair must be one of {sorted(PAIRS)}, got {pair!r}")
            target_dir = os.path.join(MODELS_DIR, PAIRS[pair][0])
            draft_dir = draft_dir or os.path.join(MODELS_DIR, PAIRS[pair][1])
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        target = load_target(target_dir, dtype, device)
        drafter = load_drafter(draft_dir, dtype, device) if draft_dir else None
        tok = ByteTokenizer.from_dir(target_dir) if os.path.exists(os.path.join(target_dir, "tokenizer.json")) \
            else None
        eng = cls(target, drafter, tok, attention, prefix)
        eng.draft_dir = draft_dir
        return eng

    # ------------------------------------------------------------------------------------------------
    def generate(self, prompts, max_new_tokens: int = 64, method: str = "ddtree", budget: int | None = None,
                 temperature=0.0, seed=0, stop_token_ids=None, batch_size: int | None = None,
                 on_round=None, anchor=SERVED, draft_temperature=SERVED, auto_budgets=None,
                 round_cost=None, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, keys: str = SERVED,
                 sampling_temperature=SERVED, children: str = SERVED, drawn_shape=SERVED,
                 paper: bool = False) -> list[GenerationResult]:
        """prompts: strings or token-id lists. method: 'ddtree' | 'chain' | 'ar', and with a DFlash2 drafter
        (pair='dflash2') 'lattice' (DDTree over its selector's lattice) | 'walk' (the selector's own walk, verified
        as SGLang's DFLASH verifies it: greedy, or by rejection sampling). budget: DDTree's node budget (default
        round_config.DEFAULT_BUDGET, the server's; 'lattice' too), or 'auto': each round uses the budget of
        `auto_budgets` (default: the server's, round_config.auto_candidates for this drafter's block) that the
        previous round's tree (the first round: its own) predicts commits the most tokens per unit of `round_cost`
        (one time per candidate, for this batch; default: measured here at start; sglang_ddtree/budget.py).
        anchor: DDTree's tree ('ddtree', 'lattice'), None (the paper's) or 'chain' (the greedy chain always in the
        tree: tree.build_tree_from_topk; the lattice's is the selector's greedy walk). draft_temperature: None, L
        positive floats (depth d's draft logits divided by the d-th before the tree is built) or 'drafter' (the
        drafter directory's calibration file, sglang_ddtree/calibration.py); the output is lossless either way.
        seed: int (request i uses seed + i) or one int per prompt.
        temperature (a float, or one per prompt: 0 is greedy), top_k (<= 0: off), top_p, min_p: each request's
        law, as a plain server's sampling parameters (sampling.py). keys: how DDTree ranks a sampled request's
        tree — 'draft' (the draft over draft_temperature, whatever the law: the paper's keys) or 'law' (the draft
        under the request's own law, over sampling_temperature: None, L floats, or 'drafter' for the calibration
        file's sampling entry, raw without one; keys.py); greedy requests rank by the draft either way.
        children: a sampled request's tree tokens ('ddtree') — 'top' (each depth's most likely candidates, verified
        by the target's own draw at each node: the paper's) or 'drawn' (each node's children drawn from the keys'
        law, verified by recursive rejection sampling: rejection.py); greedy requests take the top ones either way.
        drawn_shape (children 'drawn', keys 'law'): what a sampled request's drawn tree is shaped by — None (its law
        keys) or 'drafter' (the calibration file's shape table, the law keys without one) or a keys.ShapeTable: the
        shape keys w · lp + (1 − w) · log α (keys.DraftKeys.shape_keys); the children are drawn from the law keys.
        stop_token_ids: default [eos]. batch_size: requests decoded together (default: all).
        on_round(draft_logits, budget, node_tokens): called after each round, outside the stage clock.
        The tree's arguments (anchor, children, keys, draft_temperature, sampling_temperature, drawn_shape) default to
        'served': the tree the SGLang plugin serves for this method (round_config.RoundConfig's defaults: the chain
        anchor ('ddtree', 'lattice'); for 'ddtree' keys 'law', children 'drawn' and the drafter directory's
        calibration file where it has one, its greedy temperatures and shape table as the server keeps them; the
        other methods take no anchor, top children, the raw draft). The budget's default is the server's fixed
        DEFAULT_BUDGET (budget='auto' asks for the auto budget). paper=True makes the paper's tree the default
        instead (no anchor, top children, the draft's keys, the raw draft: PAPER_TREE); an argument given
        explicitly applies either way."""
        anchor, children, keys, draft_temperature, sampling_temperature, drawn_shape = self._tree_defaults(
            method, paper, anchor=anchor, children=children, keys=keys, draft_temperature=draft_temperature,
            sampling_temperature=sampling_temperature, drawn_shape=drawn_shape)
        ids, seeds, stops, temps, law, config, costs, calibration = self._checked_args(
            prompts, max_new_tokens, method, budget, temperature, seed, stop_token_ids, batch_size, on_round, anchor,
            draft_temperature, auto_budgets, round_cost, top_k, top_p, min_p, keys, sampling_temperature, children,
            drawn_shape)
        draft_keys = DraftKeys(self.block_size - 1, calibration, self.device) if method == "ddtree" else None
        bs = batch_size or len(ids)
        out = []
        for i in range(0, len(ids), bs):
            out += self._decode(ids[i:i + bs], seeds[i:i + bs], max_new_tokens, method, config, draft_keys, costs,
                                temps[i:i + bs], law, stops, on_round)
        return out

    def _tree_defaults(self, method: str, paper: bool, **given) -> tuple:
        """(anchor, children, keys, draft_temperature, sampling_temperature, drawn_shape) with each 'served' default
        resolved for `method` (generate's docstring), or the paper's tree's with paper=True."""
        if not isinstance(paper, bool):
            raise TypeError(f"paper must be a bool, got {type(paper).__name__}")
        if paper:
            return tuple(PAPER_TREE[k] if _served(v) else v for k, v in given.items())
        served = dict(PAPER_TREE)  # what a method the server has no tree arguments for takes
        if method in ("ddtree", "lattice"):
            served["anchor"] = SERVED_TREE.anchor
        if method == "ddtree":
            children = SERVED_TREE.children if _served(given["children"]) else given["children"]
            served.update(children=SERVED_TREE.children, keys=SERVED_TREE.keys)
            if SERVED_TREE.calibration == "auto" and self.draft_dir is not None and \
                    os.path.isfile(os.path.join(self.draft_dir, CALIBRATION_FILE)):
                # as the server keeps the file's entries: drawn children rank by the raw law (its sampling
                # temperatures dropped) and are shaped by its shape table; top children the other way round
                served.update(draft_temperature="drafter", **({"drawn_shape": "drafter"} if children == "drawn"
                                                               else {"sampling_temperature": "drafter"}))
        return tuple(served[k] if _served(v) else v for k, v in given.items())

    def round_config(self, method: str, budget: int, auto_budgets=(), anchor=SERVED_TREE.anchor,
                     keys: str = SERVED_TREE.keys, children: str = SERVED_TREE.children) -> RoundConfig:
        """The round of `method` (arguments already checked; the tree's defaults the served one's, as generate's):
        DDTree's and the lattice's from the arguments; the chain's tree is the drafter's block (budget L, one
        candidate a depth), AR's the root alone, the walk's L nodes of the selector's walk."""
        L = self.block_size - 1
        fixed = dict(calibration=None, children="top")  # the engine's calibration: _checked_args' Calibration
        if method == "ddtree":
            return RoundConfig(budget=budget, auto_budgets=auto_budgets, anchor=anchor, keys=keys, children=children,
                               calibration=None)
        if method == "lattice":
            return RoundConfig(budget=budget, anchor=anchor, **fixed)
        return RoundConfig(budget={"chain": L, "ar": 0, "walk": L}[method], topk=None if method == "walk" else 1,
                           anchor=None, **fixed)

    def _checked_args(self, prompts, max_new_tokens, method, budget, temperature, seed, stop_token_ids, batch_size,
                      on_round, anchor, draft_temperature, auto_budgets, round_cost, top_k=0, top_p=1.0, min_p=0.0,
                      keys="draft", sampling_temperature=None, children="top", drawn_shape=None):
        """generate's arguments checked, every one, before any work (a bad one raises ValueError / TypeError in
        one line naming it), and normalised: (token ids per prompt, seed per prompt, stop ids, temperature per
        prompt, the filters (top_k, top_p, min_p) as floats, the method's RoundConfig, the auto budget's round
        costs or None, keys.Calibration)."""
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if method != "ar" and self.drafter is None:
            raise ValueError(f"method {method!r} needs a drafter (draft_dir)")
        if method in SELECTOR_METHODS and not hasattr(self.drafter, "candidate_selector"):
            raise ValueError(f"method {method!r} needs a DFlash2 drafter (a candidate selector; pair='dflash2')")
        max_new_tokens = _int("max_new_tokens", max_new_tokens, 1)
        if batch_size is not None:
            _int("batch_size", batch_size, 1)
        if on_round is not None and not callable(on_round):
            raise TypeError(f"on_round must be callable or None, got {type(on_round).__name__}")
        V, L = self.target.config.vocab_size, self.block_size - 1
        ids = _token_ids(prompts, self.tokenizer, V)
        temps = _temperatures(temperature, len(ids))
        law = _filters(top_k, top_p, min_p)
        context, longest = self.target.config.max_position_embeddings, max(map(len, ids))
        if longest + max_new_tokens > context:
            raise ValueError(f"max_new_tokens must be <= {context - longest} (the target's {context} positions less "
                             f"the longest prompt's {longest}), got {max_new_tokens}")
        if isinstance(seed, numbers.Integral):
            seeds = [_int("seed", seed, C.INT64_MIN, C.INT64_MAX - len(ids) + 1) + i for i in range(len(ids))]
        elif isinstance(seed, (str, bytes)) or not isinstance(seed, Iterable):
            raise TypeError(f"seed must be an int or one int per prompt, got {type(seed).__name__}")
        else:
            seeds = [_int("seed", s, C.INT64_MIN, C.INT64_MAX) for s in seed]
            if len(seeds) != len(ids):
                raise ValueError(f"seed must be an int or one int per prompt, got {len(seeds)} for {len(ids)}")
        stops = [self.tokenizer.eos_token_id] if stop_token_ids is None else \
            _id_list("stop_token_ids", stop_token_ids, V)
        cands, costs = (), None
        if budget == "auto":
            if method == "lattice":
                raise ValueError("budget='auto' applies to method 'ddtree' only, got method 'lattice'")
            if auto_budgets is None:  # the server's candidates for this drafter's block
                cands = auto_candidates(self.block_size, max_budget=MAX_BUDGET) if method == "ddtree" else ()
            elif isinstance(auto_budgets, (str, bytes)) or not isinstance(auto_budgets, Iterable) or not auto_budgets:
                raise ValueError(f"auto_budgets must be positive ints, got {auto_budgets!r}")
            else:
                cands = tuple(sorted({_budget("auto_budgets", b) for b in auto_budgets}))
            if round_cost is not None and cands:
                costs = _reals("round_cost", round_cost)
                if len(costs) != len(cands) or not all(math.isfinite(c) and c > 0 for c in costs):
                    raise ValueError(f"round_cost must hold one positive time per auto budget {cands}, got "
                                     f"{round_cost!r}")
            budget = cands[-1] if cands else None  # other methods than DDTree ignore the budget
        elif budget is not None:
            if isinstance(budget, str):
                raise ValueError(f"budget must be a positive int or 'auto', got {budget!r}")
            budget = _budget("budget", budget)
        budget = DEFAULT_BUDGET if budget is None else budget
        chain_pops(anchor, L)
        if anchor is not None and method not in ("ddtree", "lattice"):
            raise ValueError(f"anchor applies to methods 'ddtree' and 'lattice' only, got method {method!r}")
        if not isinstance(keys, str) or keys not in KEYS:
            raise ValueError(f"keys must be one of {KEYS}, got {keys!r}")
        if keys == "law" and method != "ddtree":
            raise ValueError(f"keys='law' applies to method 'ddtree' only, got method {method!r}")
        if not isinstance(children, str) or children not in CHILDREN:
            raise ValueError(f"children must be one of {CHILDREN}, got {children!r}")
        if children == "drawn" and method != "ddtree":
            raise ValueError(f"children='drawn' applies to method 'ddtree' only, got method {method!r}")
        calibration = Calibration(self._depth_temperatures("draft_temperature", draft_temperature, method, L),
                                  self._depth_temperatures("sampling_temperature", sampling_temperature, method, L),
                                  self._drawn_shape(drawn_shape, children, L))
        config = self.round_config(method, budget, cands if method == "ddtree" else (), anchor, keys, children)
        return ids, seeds, stops, temps, law, config, costs, calibration

    def _drawn_shape(self, value, children: str, L: int):
        """drawn_shape as a keys.ShapeTable or None (children 'top': a tree of top children keeps its keys' shape)."""
        from ..keys import ShapeTable, shape_log_alpha

        if value is None:
            return None
        if value == "drafter":
            if self.draft_dir is None:
                raise ValueError("drawn_shape='drafter' needs an engine from from_pretrained with a drafter directory "
                                 "(this engine has none)")
            from ..calibration import load_calibration

            value = load_calibration(self.draft_dir, L).shape
        elif isinstance(value, ShapeTable):
            try:
                shape_log_alpha(value, L)
            except ValueError as e:
                raise ValueError(f"drawn_shape: {e}") from None
        else:
            raise ValueError(f"drawn_shape must be None, 'drafter' or a keys.ShapeTable, got {value!r}")
        return value if children == "drawn" else None

    def _depth_temperatures(self, name: str, value, method: str, L: int):
        """A calibration argument (draft_temperature, sampling_temperature) as L floats or None: 'drafter' reads
        the drafter directory's file (its sampling entry may be absent: None, the raw draft)."""
        if value is None:
            return None
        if isinstance(value, str):
            if value != "drafter":
                raise ValueError(f"{name} must be None, 'drafter' or one positive float per draft depth, got "
                                 f"{value!r}")
            if self.draft_dir is None:
                raise ValueError(f"{name}='drafter' needs an engine from from_pretrained with a drafter directory "
                                 "(this engine has none)")
            from ..calibration import load_calibration

            cal = load_calibration(self.draft_dir, L)
            value = cal.greedy if name == "draft_temperature" else cal.sampling
            if value is None:
                return None
        temps = _reals(name, value)
        if method != "ddtree" or len(temps) != L or not all(math.isfinite(t) and t > 0 for t in temps):
            raise ValueError(f"{name} must be {L} positive finite floats (one per draft depth) with method 'ddtree', "
                             f"got {value!r} with method {method!r}")
        return tuple(temps)

    # ------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def _decode(self, ids, seeds, max_new, method, config, draft_keys, costs, temperatures, law, stops,
                on_round=None):
        batch = _EngineBatch(self, ids, seeds, max_new, method, config, draft_keys, costs, temperatures, law, stops,
                             on_round)
        rounds = Round(self.ops, batch.widest, auto=batch.auto, drawn=config.children == "drawn")
        while True:
            batch.clock.mark("loop")
            if bool(batch.done.all()):  # the loop's one host sync per round
                break
            rounds.run(batch)
        return batch.results(rounds.count)

    def _round_costs(self, cands, B, seq_lens, tcache, cap, fixed, reps: int = 3) -> list[float]:
        """Seconds of one round at each candidate budget for this batch: the part every candidate pays
        (`fixed`: the draft forward, top-k and largest build) plus one verify forward at that width on a full
        tree of that budget (medians of `reps` after a warm-up). Their K/V land in the scratch slots past every
        context, which the first round rewrites, so the caches are unharmed."""
        V = self.target.config.vocab_size
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)

        def median_time(fn):
            times = []
            for _ in range(reps + 1):
                sync()
                t0 = time.perf_counter()
                fn()
                sync()
                times.append(time.perf_counter() - t0)
            return sorted(times[1:])[reps // 2]

        base = median_time(fixed)
        out = []
        for b in cands:
            tree = build_tree(torch.zeros(B, self.block_size - 1, V, device=self.device), b,
                              root_tokens=0, seq_lens=seq_lens)
            slots = seq_lens[:, None] + torch.arange(tree.n, device=self.device)
            if self.attention == "tree":
                vmask, attn_fn = None, self._op_attention(seq_lens, tree, cap)
            else:
                vmask, attn_fn = prefix_tree_mask(seq_lens, tree.tree_mask, cap), None
            out.append(base + median_time(
                lambda: self.target(tree.tokens, tree.positions, vmask, tcache, slots, self.capture, attn_fn=attn_fn)))
        return out

    def _op_attention(self, seq_lens, tree, cap):
        """The target's verify attention through the project's op (its `op_attention`), for this tree."""
        return self.target.op_attention(seq_lens, tree.mask_bits, cap, prefix_choice=self.prefix)


def _int(name: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    """An int argument (numpy integers too, bools not) within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return C.integer(name, int(value), minimum=minimum, maximum=maximum)


def _served(value) -> bool:
    """A tree argument left at generate()'s 'served' default."""
    return isinstance(value, str) and value == SERVED


def _budget(name: str, value) -> int:
    """A tree budget argument (numpy integers too): sizes.check_budget's range, 1 .. every builder's MAX_BUDGET."""
    return check_budget(_int(name, value), minimum=1, name=name)


def _temperatures(temperature, count: int) -> list[float]:
    """The temperature of each of `count` prompts: one real for all, or one per prompt; each finite and >= 0
    (0: greedy)."""
    if isinstance(temperature, torch.Tensor) and temperature.dim() == 0:
        temperature = temperature.item()
    if isinstance(temperature, numbers.Real) and not isinstance(temperature, bool):
        return [C.finite_nonnegative("temperature", temperature)] * count
    if isinstance(temperature, (str, bytes, bool)) or not isinstance(temperature, Iterable):
        raise TypeError(f"temperature must be a float or one float per prompt, got {type(temperature).__name__}")
    temps = [C.finite_nonnegative("temperature", t) for t in
             (temperature.tolist() if isinstance(temperature, torch.Tensor) else temperature)]
    if len(temps) != count:
        raise ValueError(f"temperature must be a float >= 0 or one per prompt, got {len(temps)} for {count} prompts")
    return temps


def _filters(top_k, top_p, min_p) -> tuple[float, float, float]:
    """The requests' top_k (an int, <= 0: off), top_p in (0, 1] and min_p in [0, 1], as a plain server takes them
    (sampling.py), as floats."""
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral):
        raise ValueError(f"top_k must be an int (<= 0: off), got {top_k!r}")
    if isinstance(top_p, bool) or not (isinstance(top_p, numbers.Real) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    if isinstance(min_p, bool) or not (isinstance(min_p, numbers.Real) and 0 <= min_p <= 1):
        raise ValueError(f"min_p must be in [0, 1], got {min_p!r}")
    return float(top_k), float(top_p), float(min_p)


def _reals(name: str, values) -> list[float]:
    """A sequence of real numbers as floats (checked one by one, so a string or a scalar is named, not iterated)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence of floats, got {type(values).__name__}")
    values = values.tolist() if isinstance(values, torch.Tensor) else list(values)
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values):
        raise TypeError(f"{name} must be a sequence of floats, got {values!r}")
    return [float(v) for v in values]


def _id_list(name: str, ids, vocab: int) -> list[int]:
    """Token ids (a sequence or a 1-D integer tensor) of a vocabulary of `vocab`."""
    if isinstance(ids, torch.Tensor):
        if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise TypeError(f"{name} must be a 1-D integer tensor or a sequence of ints, got {ids.dtype} of shape "
                            f"{tuple(ids.shape)}")
        ids = ids.tolist()  # an argument read once per call, not per round
    elif isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise TypeError(f"{name} must be a sequence of token ids, got {type(ids).__name__}")
    out = [_int(name, t, 0) for t in ids]
    if out and max(out) >= vocab:
        raise ValueError(f"{name} must be token ids in [0, {vocab}) (the target's vocabulary), got {max(out)}")
    return out


def _token_ids(prompts, tokenizer, vocab: int) -> list[list[int]]:
    """Each prompt's token ids: strings through the tokenizer, id sequences checked against the vocabulary."""
    if isinstance(prompts, (str, bytes, torch.Tensor)) or not isinstance(prompts, Iterable):
        raise TypeError(f"prompts must be a non-empty list of strings or token-id lists, got {type(prompts).__name__}")
    ids = [_id_list("prompts", tokenizer.encode(p) if isinstance(p, str) else p, vocab) for p in prompts]
    if not ids:
        raise TypeError("prompts must be a non-empty list of strings or token-id lists, got an empty one")
    if any(len(x) == 0 for x in ids):
        raise ValueError("prompts: every prompt must have at least one token")
    return ids


def summarize(results: list[GenerationResult]) -> dict:
    """tau = tokens committed per target forward (the prefill's first token not counted), rounds, tokens."""
    committed = sum(sum(r.accept_lengths) for r in results)
    rounds = sum(r.rounds for r in results)
    return {"tau": committed / max(1, rounds), "rounds": rounds,
            "tokens": sum(len(r.token_ids) for r in results)}
