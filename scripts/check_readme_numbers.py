"""Check the README's headline numbers against the committed files they come from.

    python scripts/check_readme_numbers.py          # exit 0 when every claim matches its source

One table, CLAIMS: each row is (README fragment, source file(s), reader, tolerance).
  * fragment: README text, literally (line breaks and runs of spaces count as one space), with `{}` where
    a number stands ("**{} µs** on the GPU"). It must occur in the README; its numbers are parsed
    (thousands separators allowed).
  * source: a path under the repository (or a tuple of paths); JSON is parsed, anything else read as text.
  * reader: a function of the loaded source(s) returning the value(s), one per `{}` (helpers below:
    `at` for a JSON path, `pick`/`span` over lists of rows, `grep` for a number in text, `has` for
    a sentence that must be in the source when the fragment has no number).
  * tolerance: None = the README's printed precision (half a unit of its last digit), else a relative
    tolerance (0.01 = 1%).
A number drifting from its source, a fragment no longer in the README, or a source that lost the value
fails with a line saying which. Add a row for every new headline number.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = "docs/benchmarks/"
NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"


# --- readers --------------------------------------------------------------------------------------------

def at(path: str, scale: float = 1.0):
    """JSON path 'a.b.0.c' (list indexes as integers), times scale."""
    def read(doc):
        for key in path.split("."):
            doc = doc[int(key)] if isinstance(doc, list) else doc[key]
        return doc if scale == 1.0 else doc * scale
    return read


def _rows(doc, list_path: str, where: dict):
    rows = at(list_path)(doc)
    out = [r for r in rows if all(r.get(k) in (v if isinstance(v, (tuple, list)) else (v,)) for k, v in where.items())]
    if not out:
        raise LookupError(f"no row of {list_path} matches {where}")
    return out


def _field(row, field):
    return at(field)(row) if isinstance(field, str) else field(row)


def pick(list_path: str, field, scale: float = 1.0, **where):
    """The one row of list_path matching where (values or tuples of allowed values): field (a path or a
    function of the row), times scale."""
    def read(doc):
        rows = _rows(doc, list_path, where)
        if len(rows) != 1:
            raise LookupError(f"{len(rows)} rows of {list_path} match {where}, expected one")
        return _field(rows[0], field) * scale
    return read


def span(list_path: str, field, scale: float = 1.0, **where):
    """(min, max) of field over the rows matching where."""
    def read(doc):
        values = [_field(r, field) * scale for r in _rows(doc, list_path, where)]
        return min(values), max(values)
    return read


def grep(pattern: str):
    """The number(s) captured by a regular expression in a text source."""
    def read(text):
        m = re.search(pattern, text)
        if m is None:
            raise LookupError(f"pattern {pattern!r} not found")
        values = tuple(float(g.replace(",", "")) for g in m.groups())
        return values[0] if len(values) == 1 else values
    return read


def has(sentence: str):
    """A claim without a number: the sentence must be in the text source."""
    def read(text):
        if _flat(sentence) not in _flat(text):
            raise LookupError(f"{sentence!r} not found")
        return ()
    return read


def _same_for_every_budget(doc):
    """The identical-prompt count that every DDTree server of the lossless run shares."""
    counts = {k: s["identical"] for k, s in doc["servers"].items() if k.startswith("dd")}
    if len(set(counts.values())) != 1:
        raise LookupError(f"the DDTree servers differ: {counts}")
    return next(iter(counts.values()))


def _naive_speedup(T):
    """Naive per-head time over the best other backend, MLA batch 1, N 8192, tree size T."""
    def read(doc):
        rows = _rows(doc, "rows", {"layout": "mla", "B": 1, "N": 8192, "T": T})
        naive = [r["us"] for r in rows if r["backend"] == "naive"]
        return naive[0] / min(r["us"] for r in rows if r["backend"] != "naive")
    return read


# --- the claims -----------------------------------------------------------------------------------------

GPU_TREE = BENCH + "tree-gpu-2026-12-02-v4.json"
CEILINGS = BENCH + "h200-ceilings-2026-12-02.json"
ENGINE = BENCH + "engine-h200-2026-12-02.json"
ATTN = BENCH + "attention-h200-2026-12-02-run1-eager.json"
CPU_TREE = BENCH + "tree-cpu.json"
LOSSLESS = BENCH + "sglang-h200-2026-12-03-run3-lossless.json"
AB = BENCH + "sglang-h200-2026-12-03-run3-ab.json"
LOSSLESS_RUN5 = BENCH + "sglang-h200-2026-12-03-run5-lossless.json"
ROUND = BENCH + "round-cost-h200-2026-12-03.json"
ROUND_MD = BENCH + "sglang-h200-2026-12-03-run2.md"
PREFIX = BENCH + "round-cost-h200-2026-12-03-run3-prefix.json"
ANCHOR = BENCH + "anchor-cpu-2026-12-03.json"
CALIB = BENCH + "calibration-cpu-2026-12-03.json"
MLA = BENCH + "engine-mla-cpu-2026-12-03.json"
MLA_SERVED = BENCH + "sglang-mla-h200-2026-12-04-lossless-flashmla-flashinfer.json"
MLA_SERVED_TRITON = BENCH + "sglang-mla-h200-2026-12-04-lossless-triton.json"
MLA_AB = BENCH + "sglang-mla-h200-2026-12-04-ab.json"
AB4 = BENCH + "sglang-h200-2026-12-04-ab.json"
RC4 = BENCH + "round-cost-h200-2026-12-04-fullmask.json"
KIMI_PROFILE = BENCH + "round-cost-kimi-h200-2026-12-04-cascade.json"  # one server at a time, with profiles
AUTO_AB = BENCH + "sglang-h200-2026-12-04-auto-ab.json"  # tiny pair, session 7: calls 1 and 3 joined
AUTO_RC = BENCH + "round-cost-h200-2026-12-04-auto.json"  # 8B-shaped, auto vs budgets 15 / 63 and DFLASH
AUTO_LOG7 = BENCH + "sglang-h200-2026-12-04-auto-log.txt"  # the auto servers' start-up tables and widths
KIMI_TURNS = BENCH + "round-cost-kimi-h200-2026-12-04-cascade-interleaved.json"  # servers taking turns
MLA_CASCADE = BENCH + "sglang-mla-h200-2026-12-04-lossless-cascade.json"
# the Kimi-shaped runs' server names (measured before the cascade became the default on flashmla)
CASCADE, WHOLE = "ddtree_b15_flashmla_prefix", "ddtree_b15_flashmla"
CASCADE_LOSSLESS = "dd16_flashmla_prefix"
CASCADE_KERNELS = ("flash_fwd_splitkv_mla", "flash_fwd_mla_combine", "verify_attn_kernel", "merge_two_kernel")


def _tpot(doc, server: str, input_len, conc: int) -> float:
    """Median TPOT (ms) of one ab_bench row."""
    return pick("rows", "median_tpot_ms", server=server, input_len=input_len, concurrency=conc)(doc)


def _has_no_unexplained(docs) -> tuple:
    """A claim without a number: every divergence of every server in the lossless reports is explained."""
    bad = [n for d in docs for n, v in d["servers"].items() if v["unexplained"]]
    if bad:
        raise LookupError(f"unexplained divergences on {bad}")
    return ()


def _vs_dflash(doc, server: str, conc: int) -> float:
    """A server's output tok/s over DFLASH's at one concurrency, same ab_bench run."""
    return _vs(doc, server, "dflash", conc)


def _projection(ab, rc, input_len: int, conc: int) -> float:
    """Projected DDTree-over-DFLASH speed for a real 8B pair: tiny-pair accept-length ratio (budget 16, at
    conc) times the 8B-shaped round-cost ratio (budget 15)."""
    acc = lambda name: pick("rows", "accept_length", server=name, concurrency=conc)(ab)  # noqa: E731
    return acc("ddtree_b16") / acc("dflash") * _tpot(rc, "dflash", input_len, conc) / _tpot(rc, "ddtree_b15", input_len, conc)


def _kernels_us(doc, profile: str, name: str, exact: bool = False) -> float:
    """Summed time per captured step of the kernels whose name is (or contains) `name` in one profile."""
    rows = [k for k in doc["profiles"][profile]["kernels_per_round"]
            if (k["name"] == name if exact else name in k["name"])]
    if not rows:
        raise LookupError(f"no kernel {name!r} in {profile}")
    return sum(k["us"] for k in rows)


def _per_call_us(doc, profile: str, name: str) -> float:
    """Time of one call (µs) of the kernel whose name contains `name`: its time per step over its calls per step
    (robust to what else the capture window held)."""
    rows = [k for k in doc["profiles"][profile]["kernels_per_round"] if name in k["name"]]
    if len(rows) != 1:
        raise LookupError(f"{len(rows)} kernels named like {name!r} in {profile}")
    return rows[0]["us"] / rows[0]["count"]


def _bytes_us(nbytes: int, ceilings) -> float:
    """The byte floor (µs) of moving nbytes at the H200's measured copy rate."""
    return nbytes / (ceilings["copy_TBps"] * 1e12) * 1e6


def _layer_us(doc, server: str, *kernels: str) -> float:
    """One layer's verify attention (µs) in a Kimi-shaped profile at 16 requests: the named kernels, per call."""
    return sum(_per_call_us(doc, f"{server}_c16", k) for k in kernels)


CONCS = (1, 4, 16, 32)
FIXED = ("ddtree_b15", "ddtree_b31", "ddtree_b63", "ddtree_b63_twin")  # the fixed budgets of the auto A/B


def _vs(doc, server: str, other: str, conc: int) -> float:
    """One server's output tok/s over another's at one concurrency, same report."""
    tput = lambda name: pick("rows", "output_throughput", server=name, concurrency=conc)(doc)  # noqa: E731
    return tput(server) / tput(other)


def _fixed_at(doc, conc: int) -> list:
    return [r["server"] for r in doc["rows"] if r["concurrency"] == conc and r["server"] in FIXED]


def _vs_best_fixed(doc, conc: int) -> float:
    """Auto's output tok/s over the fastest fixed budget's at one concurrency."""
    return min(_vs(doc, "ddtree_auto", s, conc) for s in _fixed_at(doc, conc))


def _span_of(doc, field, servers=None) -> tuple:
    """(min, max) of a field (a key or a function of the row) over the rows of the named servers (all: None)."""
    values = [_field(r, field) for r in doc["rows"] if servers is None or r["server"] in servers]
    return min(values), max(values)


def _same_accept(doc) -> tuple:
    """A claim without a number: auto's accept length equals budget 63's (to 0.01) at every concurrency."""
    for c in CONCS:
        a, b = (pick("rows", "accept_length", server=s, concurrency=c)(doc) for s in ("ddtree_auto", "ddtree_b63"))
        if abs(a - b) >= 0.01:
            raise LookupError(f"at c={c} auto accepted {a:.3f}, budget 63 {b:.3f}")
    return ()


def _log_of(text: str, run: str) -> str:
    """The lines of one run ('call1', 'call3', 'round_cost') in the session-7 auto log."""
    return "\n".join(ln.split(" ", 1)[1] for ln in text.splitlines() if ln.startswith(run + " "))


def _widths_run(text: str, run: str) -> dict:
    """{width: rounds} over every bucket of a run's last logged auto summary."""
    out = {}
    for per_width in _auto_summary(_log_of(text, run)).values():
        for w, v in per_width.items():
            out[w] = out.get(w, 0) + v["rounds"]
    return out


def _width_share(text: str, run: str, width: int) -> float:
    rounds = _widths_run(text, run)
    return rounds.get(width, 0) / sum(rounds.values())


def _only_width(text: str, run: str, width: int) -> tuple:
    """A claim without a number: every logged round of the run verified this width."""
    if set(_widths_run(text, run)) != {width}:
        raise LookupError(f"{run} ran widths {_widths_run(text, run)}")
    return ()


def _start_table(text: str, run: str) -> dict:
    """The start-up graph cost table (ms) {bucket: {width: ms}} of one run's auto server."""
    import ast

    line = [ln for ln in _log_of(text, run).splitlines() if "start-up round cost (ms) " in ln][0]
    return ast.literal_eval(line.split("start-up round cost (ms) ", 1)[1])


def _best_fixed(doc, want: dict) -> tuple:
    """A claim without a number: at each concurrency the named fixed budget is the fastest fixed one."""
    for c, server in want.items():
        best = max(_fixed_at(doc, c), key=lambda s: _vs_dflash(doc, s, c))
        if best != server:
            raise LookupError(f"at c={c} the fastest fixed budget is {best}, not {server}")
    return ()


def _auto_summary(text: str) -> dict:
    """The last 'auto budget after N rounds' table of an auto-budget server's log: {bucket: {width: {...}}}."""
    import ast

    lines = [ln for ln in text.splitlines() if "auto budget after" in ln]
    return ast.literal_eval(lines[-1].split("{bucket: {width: rounds, cost ms}} ", 1)[1])


per_request = lambda key: (lambda r: r[key[0]][key[1]] / r["batch"])

CLAIMS = [
    # tree stage on the H200
    ("**{} µs** on the GPU (exact top-k+LSE {} µs + float64 build {} µs) vs {} ms for the ported path", GPU_TREE,
     lambda d: (at("stage.gpu_stage_us")(d), at("stage.gpu_topk_us")(d), at("stage.gpu_build_us")(d),
                at("stage.ported_total_ms")(d)), None),
    ("the same run: **×{}** (build alone ×{})", GPU_TREE,
     lambda d: (at("stage.speedup_stage_vs_ported_total")(d), at("stage.speedup_build_vs_host_build")(d)), None),
    ("**{}%** with our ops vs {}% for the ported CPU path", ENGINE,
     lambda d: (pick("timing", "tree_share_ours", 100, batch=32, budget=64)(d),
                pick("timing", "tree_share_heapq", 100, batch=32, budget=64)(d)), None),
    # SGLang server, 2026-12-03 (chain-anchored tree served by default)
    ("identical to the non-speculative server on **{}/{}** prompts at budgets 16 and 64", LOSSLESS,
     lambda d: (_same_for_every_budget(d), d["prompts"]), None),
    ("CUDA graphs off (with and without overlap); accept length **{}** (budget 16) and **{}** (64) vs stock DFLASH's {} on the same prompts", LOSSLESS,
     lambda d: (d["servers"]["dd16"]["accept_len"], d["servers"]["dd64"]["accept_len"],
                d["servers"]["dflash"]["accept_len"]), None),
    # the auto budget served, 2026-12-04 (session 7): the tiny pair interleaved, with an A/A twin; the 8B-shaped pair
    ("the auto budget (`--speculative-ddtree-budget auto`) **{}× / {}× / {}× / {}×** DFLASH's output tok/s at "
     "concurrency 1 / 4 / 16 / 32, accept length {}–{} against DFLASH's {}–{}.", AUTO_AB,
     lambda d: tuple(_vs_dflash(d, "ddtree_auto", c) for c in CONCS)
     + _span_of(d, "accept_length", ("ddtree_auto",)) + _span_of(d, "accept_length", ("dflash",)), None),
    ("Against the best fixed budget (15, 31 or either budget-63 server) {}× / {}× / {}× / {}×", AUTO_AB,
     lambda d: tuple(_vs_best_fixed(d, c) for c in CONCS), None),
    ("two identical budget-63 servers differed by **{}×** at c=16", AUTO_AB,
     lambda d: _vs(d, "ddtree_b63_twin", "ddtree_b63", 16), None),
    ("and passes spread {}–{}%", AUTO_AB,
     lambda d: _span_of(d, lambda r: 100 * (max(r["passes_output_throughput"]) - min(r["passes_output_throughput"]))
                        / r["output_throughput"]), 0.03),
    ("Auto verified budget 63's width in {}–{}% of rounds, with budget 63's accept length at every concurrency",
     (AUTO_LOG7, AUTO_AB),
     lambda t, d: tuple(100 * _width_share(t, run, 64) for run in ("call1", "call3")) + _same_accept(d), 0.01),
    ("auto **{}× / {}× / {}× / {}×** DFLASH's output tok/s at c = 1 / 4 / 16 / 32 and **{}× / {}× / {}× / {}×** the "
     "best fixed budget (15); it chose width 16 in every round logged", (AUTO_RC, AUTO_LOG7),
     lambda d, t: tuple(_vs_dflash(d, "ddtree_auto", c) for c in CONCS)
     + tuple(_vs(d, "ddtree_auto", "ddtree_b15", c) for c in CONCS) + _only_width(t, "round_cost", 16), None),
    ("a width-64 round's CUDA graphs cost {}× a width-16 round's at batch 1 and {}× at batch 32", AUTO_LOG7,
     lambda t: tuple(_start_table(t, "round_cost")[b][64] / _start_table(t, "round_cost")[b][16] for b in (1, 32)),
     None),
    ("round graphs cost {}× budget 15's at batch 32", AUTO_LOG7,
     lambda t: _start_table(t, "round_cost")[32][64] / _start_table(t, "round_cost")[32][16], None),
    ("on the 8B-shaped pair auto was {}–{}× DFLASH's output tok/s at every concurrency and within {}% of the best "
     "fixed budget", AUTO_RC,
     lambda d: (min(_vs_dflash(d, "ddtree_auto", c) for c in CONCS), max(_vs_dflash(d, "ddtree_auto", c) for c in CONCS),
                100 * max(abs(_vs(d, "ddtree_auto", "ddtree_b15", c) - 1) for c in CONCS)), None),
    ("differed by {}× at c=16 (`sglang-h200-2026-12-04-auto.md`)", AUTO_AB,
     lambda d: _vs(d, "ddtree_b63_twin", "ddtree_b63", 16), None),
    ("On the tiny pair the medians put it at {} / {} / {} / {}× the best fixed budget", AUTO_AB,
     lambda d: tuple(_vs_best_fixed(d, c) for c in CONCS), None),
    ("is the budget with the best median at c = 1, 4 and 16", AUTO_AB,
     lambda d: _best_fixed(d, {1: "ddtree_b63", 4: "ddtree_b63", 16: "ddtree_b63"}), None),
    ("the auto budget **{}/{}** with and without CUDA graphs (run 5, accept length {})", LOSSLESS_RUN5,
     lambda d: (min(d["servers"][k]["identical"] for k in ("ddauto", "ddauto_nograph")), d["prompts"],
                d["servers"]["ddauto"]["accept_len"]), None),
    ("its accept length was {} at c=1 against {} for the paper's tree, which fell below DFLASH's {}", AB4,
     lambda d: tuple(pick("rows", "accept_length", server=s, concurrency=1)(d)
                     for s in ("ddtree_b16", "ddtree_b16_paper", "dflash")), None),
    ("DDTree's round grows {} ms from a 1k to a 32k prefix (DFLASH's {} ms)", PREFIX,
     lambda d: tuple(_tpot(d, s, 32768, 1) - _tpot(d, s, 1024, 1) for s in ("ddtree_b15", "dflash")), None),
    ("DDTree budget 15 round **{} ms** vs DFLASH's {} ms at 1k context, c=1", RC4,
     lambda d: (_tpot(d, "ddtree_b15", 1024, 1), _tpot(d, "dflash", 1024, 1)), None),
    ("**{} ms vs {} ms** at c=16 and **{} ms vs {} ms** at c=32 (**{}× / {}×**)", RC4,
     lambda d: tuple(_tpot(d, s, 1024, c) for c in (16, 32) for s in ("ddtree_b15", "dflash"))
     + tuple(_tpot(d, "ddtree_b15", 1024, c) / _tpot(d, "dflash", 1024, c) for c in (16, 32)), None),
    ("TTFT P99 at c=32 was {} ms against DFLASH's {} ms", RC4,
     lambda d: tuple(pick("rows", "p99_ttft_ms", server=s, input_len=1024, concurrency=32)(d)
                     for s in ("ddtree_b15", "dflash")), None),
    ("SGLang's FULL_MASK verify in the same build {} / {} / {} ms", RC4,
     lambda d: tuple(_tpot(d, "ddtree_b15_fullmask", 1024, c) for c in (1, 16, 32)), None),
    ("At 8k **{} ms vs {} ms**", ROUND, lambda d: (_tpot(d, "ddtree_b15", 8192, 1), _tpot(d, "dflash", 8192, 1)), None),
    ("at 32k **{} ms vs {} ms** (c=1, 2026-12-03)", PREFIX,
     lambda d: (_tpot(d, "ddtree_b15", 32768, 1), _tpot(d, "dflash", 32768, 1)), None),
    ("verify attention {} ms a round through FULL_MASK's masked triton kernel at c=1, {} ms through our tree kernel",
     RC4, lambda d: ((_kernels_us(d, "ddtree_b15_fullmask_c1", "_fwd_kernel", exact=True)
                      - _kernels_us(d, "ddtree_b15_c1", "_fwd_kernel", exact=True)) / 1e3,
                     (_kernels_us(d, "ddtree_b15_c1", "verify_attn_kernel")
                      + _kernels_us(d, "ddtree_b15_c1", "combine_kernel")) / 1e3), None),
    ("**{}× / {}× / {}×** at 1k context, c = 1 / 16 / 32; {}× at 8k and {}× at 32k (c=1)", (AB, PREFIX, RC4),
     lambda ab, rc3, rc4: tuple(_projection(ab, rc, n, c) for rc, n, c in
                                ((rc4, 1024, 1), (rc4, 1024, 16), (rc4, 1024, 32), (rc3, 8192, 1), (rc3, 32768, 1))),
     None),
    # the Kimi-K2-shaped MLA pair on FlashMLA, 2026-12-04 (after the draft-head fix)
    ("with FlashMLA over the prefix (the default there) **{} ms** a round vs DFLASH's {} ms at 1k context, c=16 (our "
     "kernel over the whole prefix: {} ms); **{} ms vs {} ms** at c=1 (whole-prefix kernel {} ms)", KIMI_TURNS,
     lambda d: tuple(_tpot(d, s, 1024, c) for c in (16, 1) for s in (CASCADE, "dflash_flashmla", WHOLE)), None),
    ("FlashMLA prefix + our tree tail + merge **{} µs**, our kernel over the whole prefix {} µs, DFLASH's chain "
     "through FlashMLA {} µs", KIMI_PROFILE,
     lambda d: (_layer_us(d, CASCADE, *CASCADE_KERNELS), _layer_us(d, WHOLE, "verify_attn_kernel", "combine_kernel"),
                _layer_us(d, "dflash_flashmla", "flash_fwd_splitkv_mla", "flash_fwd_mla_combine")), None),
    ("DDTree's round is still **{}× DFLASH's at c=16 and {}× at c=1**", KIMI_TURNS,
     lambda d: tuple(_tpot(d, CASCADE, 1024, c) / _tpot(d, "dflash_flashmla", 1024, c) for c in (16, 1)), None),
    ("the cascade's verify attention takes {} µs a layer against FlashMLA's {} µs for the chain: our tree tail "
     "({} µs, {}× its byte floor: latency-bound over 16 tree keys a request) and the separate merge ({} µs, at its "
     "floor",
     (KIMI_PROFILE, CEILINGS),  # the tail's bytes: 16 x 16 queries x 64 heads, 576 read and 512 written, bf16
     lambda d, ceil: (_layer_us(d, CASCADE, *CASCADE_KERNELS),
                _layer_us(d, "dflash_flashmla", "flash_fwd_splitkv_mla", "flash_fwd_mla_combine"),
                _layer_us(d, CASCADE, "verify_attn_kernel"),
                _layer_us(d, CASCADE, "verify_attn_kernel") / _bytes_us(16 * 16 * 64 * (576 + 512) * 2, ceil),
                _layer_us(d, CASCADE, "merge_two_kernel")), None),
    ("**{}/{}** identical with CUDA graphs, {} near-ties", MLA_CASCADE,
     lambda d: (at(f"servers.{CASCADE_LOSSLESS}.identical")(d), at(f"servers.{CASCADE_LOSSLESS}.of")(d),
                at(f"servers.{CASCADE_LOSSLESS}.explained")(d)), None),
    ("(weight-read floor ≈ {} ms)", ROUND_MD, grep(r"TB/s\s*\(`h200-ceilings-2026-12-02.json`\) ≈ ([0-9.]+) ms"), None),
    # chain-anchored tree on the CPU engine
    ("τ **{}** vs {} for the paper's tree at budget 16 ({} vs {} at 64); the DFlash chain {}; all {}/{} identical",
     ANCHOR, lambda d: tuple(at(f"lossless.float32.runs.{k}.tau")(d) for k in
                             ("ddtree16_anchored", "ddtree16", "ddtree64_anchored", "ddtree64", "chain"))
     + (min(r["identical_to_ar"] for r in at("lossless.float32.runs")(d).values()),
        at("lossless.float32.prompts")(d)), None),
    # the MLA pair on the CPU engine
    ("all {}/{} identical to AR for the chain and every tree; τ **{}** for the anchored tree at budget 64 ({} at 32) "
     "vs the chain's {} and the paper's tree's {}", MLA,
     lambda d: (min(r["identical_to_ar"] for r in at("lossless.float32.runs")(d).values()),
                at("lossless.float32.prompts")(d))
     + tuple(at(f"lossless.float32.runs.{k}.tau")(d) for k in ("ddtree64_anchored", "ddtree32_anchored", "chain",
                                                               "ddtree64")), None),
    # the MLA pair served by SGLang 0.5.17, 2026-12-04
    ("**FlashInfer-MLA**: **{}/{}** identical to the non-speculative server on FlashMLA and FlashInfer, {}/{} on "
     "triton (with and without CUDA graphs) as stock DFLASH", (MLA_SERVED, MLA_SERVED_TRITON),
     lambda f, t: (min(v["identical"] for v in f["servers"].values()), f["prompts"],
                   min(v["identical"] for v in t["servers"].values()), t["prompts"]), None),
    ("every divergence a near-tie", (MLA_SERVED, MLA_SERVED_TRITON),
     lambda *docs: _has_no_unexplained(docs), None),
    ("accept length **{}** vs DFLASH's {} at c=1; output tok/s {} vs {} (c=1), {} vs {} (c=16)", MLA_AB,
     lambda d: (pick("rows", "accept_length", server="ddtree_b16", concurrency=1)(d),
                pick("rows", "accept_length", server="dflash", concurrency=1)(d))
     + tuple(pick("rows", "output_throughput", server=s, concurrency=c)(d)
             for c in (1, 16) for s in ("ddtree_b16", "dflash")), None),
    ("within this host-bound pair's pass-to-pass spread (up to {}%)", MLA_AB,
     lambda d: 100 * max((max(r["passes_output_throughput"]) - min(r["passes_output_throughput"]))
                         / min(r["passes_output_throughput"]) for r in d["rows"]), 0.03),
    # drafter calibration on the CPU engine (held-out test prompts)
    ("calibration error **{}–{} → {}–{}** per depth; anchored τ {} → **{}** at budget 64 ({} → {} at 32)", CALIB,
     lambda d: (min(r["raw"]["ece"] for r in d["reliability_test"]), max(r["raw"]["ece"] for r in d["reliability_test"]),
                min(r["calibrated"]["ece"] for r in d["reliability_test"]),
                max(r["calibrated"]["ece"] for r in d["reliability_test"]),
                d["tau_test"]["b64_anchored_raw"]["tau"], d["tau_test"]["b64_anchored_calibrated"]["tau"],
                d["tau_test"]["b32_anchored_raw"]["tau"], d["tau_test"]["b32_anchored_calibrated"]["tau"]), None),
    # verify attention
    ("LSE merge at **{}–{}% of the bf16 MMA rate**", ATTN,
     span("rows", "pct_mma", layout="mla", backend="flashmla", B=32, N=(8192, 32768)), None),
    ("the best path is {}–{}× faster than the naive per-head design", ATTN,
     lambda d: (_naive_speedup(9)(d), _naive_speedup(65)(d)), None),
    # correctness statements of the GPU run
    ("CUDA builder == oracle bit for bit on {} random requests", BENCH + "tree-gpu-2026-12-02-v4.md",
     grep(r"builder == oracle bit for bit on ([0-9,]+) random requests"), None),
    ("compute-sanitizer memcheck / racecheck / synccheck clean", BENCH + "tree-gpu-2026-12-02-v4.md",
     has("memcheck 0 errors, racecheck 0 hazards, synccheck 0 errors"), None),
    # CPU tree stage
    ("budget-64 tree in {} µs per request against {} µs for the ports'", CPU_TREE,
     lambda d: (pick("rows", per_request(("ours_s", "build")), 1e6, batch=64, budget=64)(d),
                pick("rows", per_request(("ported_s", "host_build")), 1e6, batch=64, budget=64)(d)), None),
    ("(**×{}** at batch 64, ×{} at batch 256)", CPU_TREE,
     lambda d: (pick("rows", "build_speedup_per_request", batch=64, budget=64)(d),
                pick("rows", "build_speedup_per_request", batch=256, budget=64)(d)), None),
    ("(×{}–{} across the grid, {}–{} at budget 64)", CPU_TREE,
     lambda d: span("rows", "stage_speedup")(d) + span("rows", "stage_speedup", budget=64)(d), None),
    ("takes ×{} the ports' `torch.topk` at batch 64 × budget 64", CPU_TREE,
     pick("rows", lambda r: r["ours_s"]["topk"] / r["ported_s"]["topk"], batch=64, budget=64), None),
    # limits
    ("the build runs {}–{} µs per pop at budgets 8 and 64", GPU_TREE,
     span("build", "us_per_pop", budget=(8, 64)), None),
    ("top-k+LSE reaches {}% of copy bandwidth at batch 64", (GPU_TREE, CEILINGS),
     lambda d, c: pick("topk", "GBps", B=64)(d) / (c["copy_TBps"] * 1e3) * 100, None),
    ("and {} µs at batch 1 (target 3)", GPU_TREE, pick("topk", "us", B=1), None),
    ("accept {}–{} µs (batch 1–512,", GPU_TREE, span("accept", "us"), None),
    ("fused MLA kernel reaches {}–{}% of MMA at batch 32", ATTN,
     span("rows", "pct_mma", layout="mla", backend="native", B=32), None),
    ("GQA verify reaches {}% of bandwidth at best", ATTN,
     lambda d: span("rows", "pct_bw", layout="gqa")(d)[1], None),
    # the tiny models and the demo
    ("On a shared 2-core VM it took {} s, and {} s on the first run", BENCH + "engine-cpu.md",
     lambda t: (grep(r"later runs \(kernels cached\) \| ([0-9.]+) s")(t),
                grep(r"first run \(fresh `TORCH_EXTENSIONS_DIR`.*?\| ([0-9.]+) s")(t)), None),
    ("DFlash drafter (trained here, {} MB)", BENCH + "engine-cpu.md",
     grep(r"sglang_ddtree/engine/models/`, ([0-9.]+) MB"), None),
    ("(deterministic, ≈ {} min on 2 cores)", BENCH + "engine-cpu.md",
     grep(r"in\s+~([0-9]+) min on 2 idle cores"), None),
]


# --- checking -------------------------------------------------------------------------------------------

def _flat(text: str) -> str:
    return " ".join(text.split())


def _load(rel: str):
    text = (ROOT / rel).read_text()
    return json.loads(text) if rel.endswith(".json") else text


def _close(printed: str, value: float, tolerance) -> bool:
    got = float(printed.replace(",", ""))
    if tolerance is None:
        decimals = len(printed.split(".")[1]) if "." in printed else 0
        return abs(got - value) <= 0.5 * 10 ** -decimals + 1e-9 * abs(value)
    return abs(got - value) <= tolerance * abs(value)


def check(readme: str | None = None, claims=CLAIMS) -> list[str]:
    """The failures (empty when the README matches every source)."""
    readme = _flat((ROOT / "README.md").read_text() if readme is None else readme)
    failures = []
    for fragment, source, reader, tolerance in claims:
        pattern = NUMBER.join(re.escape(part) for part in _flat(fragment).split("{}"))
        m = re.search(pattern, readme)
        if m is None:
            failures.append(f"README no longer says: {fragment!r}")
            continue
        sources = source if isinstance(source, tuple) else (source,)
        try:
            value = reader(*(_load(s) for s in sources))
        except (LookupError, KeyError, IndexError, TypeError, ValueError, OSError) as e:
            failures.append(f"{', '.join(sources)}: cannot read the value for {fragment!r}: {e}")
            continue
        values = value if isinstance(value, tuple) else (value,)
        if value is None or len(values) != len(m.groups()):
            failures.append(f"{fragment!r}: {len(m.groups())} numbers in the README, the source gives {value!r}")
            continue
        for printed, v in zip(m.groups(), values):
            if not _close(printed, float(v), tolerance):
                failures.append(f"README says {printed} in {fragment!r}; {', '.join(sources)} says {v:.6g}")
    return failures


MEASURED = r"(?:×{n}|{n}×|{n}\s*(?:µs|ms|%|tok/s|MB|min\b)|{n}/[0-9]+)".format(n=r"[0-9][0-9,.]*")


def unchecked(readme: str | None = None, claims=CLAIMS) -> list[str]:
    """Measured-looking numbers (×N, N×, N with a unit: µs, ms, %, tok/s, MB, min, or a count N/M) in the README's
    "Results at a glance" table that no claim covers."""
    readme = _flat((ROOT / "README.md").read_text() if readme is None else readme)
    covered = []
    for fragment, *_ in claims:
        m = re.search(NUMBER.join(re.escape(part) for part in _flat(fragment).split("{}")), readme)
        if m:
            covered.append(m.span())
    start = readme.index("## Results at a glance")
    end = readme.index("## ", start + 3)
    out = []
    for m in re.finditer(MEASURED, readme[start:end]):
        a, b = m.start() + start, m.end() + start
        if not any(c0 <= a and b <= c1 for c0, c1 in covered):
            out.append(m.group(0))
    return out


def main() -> int:
    failures = check() + [f"no claim covers {n!r} in the results table" for n in unchecked()]
    for line in failures:
        print("MISMATCH:", line)
    print(f"{len(failures)} mismatch(es) in {len(CLAIMS)} README claims" if failures else
          f"all {len(CLAIMS)} README claims match their sources")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
