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
import statistics
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


# --- the claims -----------------------------------------------------------------------------------------

GPU_TREE = BENCH + "tree-gpu-2026-12-02-v4.json"
CEILINGS = BENCH + "h200-ceilings-2026-12-02.json"
LOSSLESS = BENCH + "sglang-h200-2026-12-03-run3-lossless.json"
LOSSLESS_RUN5 = BENCH + "sglang-h200-2026-12-03-run5-lossless.json"
AUTO_AB = BENCH + "sglang-h200-2026-12-04-auto-ab.json"  # tiny pair: calls 1 and 3 joined, with an A/A twin
KIMI_TURNS = BENCH + "round-cost-kimi-h200-2026-12-04-cascade-interleaved.json"  # servers taking turns
DEMO = BENCH + "demo-cpu-2026-12-04.json"  # `make demo`, kernels already built
DEMO_NOW = BENCH + "demo-cpu-2026-12-05-dflash2.json"  # `make demo` with its DFlash2 line, kernels already built
ROBUST = BENCH + "robust-h200-2026-12-06.json"  # every request feature against the plain server (the newest H200 run)
CASCADE_LOSSLESS = BENCH + "sglang-cascade-h200-2026-12-04-lossless.json"  # the FlashInfer cascade served
LONG = BENCH + "round-cost-h200-2026-12-04-long-context.json"  # 8k / 32k against DFLASH on flashinfer
PROFILED_8K = BENCH + "round-cost-h200-2026-12-05-8k-profile.json"  # 8k, c=1/4, the three servers in one call
INFLATED = BENCH + "ab-inflated-h200-2026-12-05.json"  # the 8B-cost pair with real acceptance, both DFLASH backends
DRAFT_8K = BENCH + "round-cost-h200-2026-12-05-draft-cascade.json"  # 8k, the drafter through the cascade
SERVED_CPU = BENCH + "served-accept-flushed-cpu-2026-12-05.json"  # accept length on the CPU servers, bench_serving
SERVED_DFLASH2 = BENCH + "served-dflash2-cpu-2026-12-05.json"  # the tiny DFlash2 drafter on the CPU servers
SAMPLED = BENCH + "sampled-powered-cpu-2026-12-06.json"  # sampled traffic on the CPU engine (issue 40), 131 prompts × 10 seeds
SAMPLED_H100 = BENCH + "sglang-h100-2026-12-05-sampled-t1.json"  # T = 1 served on the H100, the fused ops
# the 8B-cost pair sampled, both DFLASH backends, 2 passes: T = 0.6 top-p 0.95 at c = 1 / 4 / 16 / 32; T = 1 at
# c = 1 / 32
INFLATED_T06 = BENCH + "ab-inflated-sampled-h200-2026-12-06-t06.json"
INFLATED_T1 = BENCH + "ab-inflated-sampled-h200-2026-12-06-t1.json"
# the sort-free sampled tail on the H100: before / after on one machine, DFLASH on triton, flashinfer and fa3, greedy
# and T = 0.6 top-p 0.95 (rows carry their traffic) at c = 1 / 4, 2 passes
SAMPLED_ROUND = BENCH + "sampled-round-h100-2026-12-06.json"
SAMPLED_ROUND_V2 = BENCH + "sampled-round-h100-2026-12-06-v2.json"  # after the second kernel change, another H100
DFLASH_CPU = BENCH + "dflash-cpu-sampling-2026-12-05.json"  # stock DFLASH on the CPU at T = 1: greedy outputs
DEMO_COLD = BENCH + "demo-cpu-2026-12-04-cold.json"  # the same, on a first run (native kernels built)
# every committed run of the default demo: the two above and three on a busier machine (cold, warm, a second checkout)
DEMO_RUNS = (DEMO, DEMO_COLD, *(BENCH + f"demo-cpu-2026-12-05-{k}.json" for k in ("cold", "warm", "second-checkout")))
# the Kimi-shaped run's server names (measured before the cascade became the default on flashmla)
CASCADE = "ddtree_b15_flashmla_prefix"
CONCS = (1, 4, 16, 32)


def _tpot(doc, server: str, input_len, conc: int) -> float:
    """Median TPOT (ms) of one `bench ab` row."""
    return pick("rows", "median_tpot_ms", server=server, input_len=input_len, concurrency=conc)(doc)


def _tput(doc, server: str, conc: int, **where) -> float:
    """One server's output tok/s at one concurrency (and input length, ...)."""
    return pick("rows", "output_throughput", server=server, concurrency=conc, **where)(doc)


def _vs(doc, server: str, other: str, conc: int, **where) -> float:
    """One server's output tok/s over another's at one concurrency (and input length, ...), same report."""
    return _tput(doc, server, conc, **where) / _tput(doc, other, conc, **where)


DFLASH_BACKENDS = ("dflash", "dflash_flashinfer")  # DFLASH on triton and on flashinfer


def _fastest(doc, conc: int, **where) -> str:
    """The DFLASH server with the most output tok/s at that point: the baseline."""
    return max(DFLASH_BACKENDS, key=lambda name: _tput(doc, name, conc, **where))


def _vs_best(doc, server: str, conc: int, backends=DFLASH_BACKENDS, **where) -> float:
    """One server's output tok/s over the fastest DFLASH's (of `backends`) at that point, same report."""
    best = max(backends, key=lambda name: _tput(doc, name, conc, **where))
    return _vs(doc, server, best, conc, **where)


ALL_DFLASH = (*DFLASH_BACKENDS, "dflash_fa3")  # the three Hopper backends


def _span_of(doc, field, servers=None) -> tuple:
    """(min, max) of a field over the rows of the named servers (all: None)."""
    values = [_field(r, field) for r in doc["rows"] if servers is None or r["server"] in servers]
    return min(values), max(values)



def _demo_tau(doc, method: str, temperature: float, budget=None) -> float:
    """τ of one row of the demo's JSON."""
    (row,) = [r for r in doc["rows"] if r["method"] == method and r["temperature"] == temperature
              and (budget is None or r["budget"] == budget)]
    return row["tau"]


def _demo_speed(doc, method: str, temperature: float) -> float:
    """tok/s of one method of the demo's JSON (the paper's tree: its fastest budget)."""
    return max(r["tokens_per_s"] for r in doc["rows"] if r["method"] == method and r["temperature"] == temperature)


def _demo_greedy_vs_ar(*docs) -> tuple:
    """(runs, the chain's fewest and most times AR's greedy tok/s, the served default's), when the chain beat AR in
    every run, as the README's words say."""
    chain, served = ([_demo_speed(d, m, 0.0) / _demo_speed(d, "ar", 0.0) for d in docs] for m in ("chain", "served"))
    if min(chain) <= 1:
        raise LookupError(f"greedy, the chain did not beat AR in every run: {chain}")
    return len(docs), min(chain), max(chain), min(served), max(served)


def _demo_sampled_below_ar(*docs) -> tuple:
    """No number: every sampled speculative method slower than AR in every run, as the README says."""
    for d in docs:
        ar = _demo_speed(d, "ar", 1.0)
        faster = {r["method"] for r in d["rows"] if r["temperature"] == 1.0 and r["method"] != "ar"
                  and r["tokens_per_s"] >= ar}
        if faster:
            raise LookupError(f"sampled, {sorted(faster)} ran at least as fast as AR")
    return ()

def _served_dflash2(doc) -> tuple:
    """(min, max) accept length of DDTree's default and stock DFLASH's selector walk, greedy, T = 0.6 and T = 1."""
    sm = doc["summary"]
    return tuple(sm[server][traffic][end] for traffic in ("greedy", "T0.6_top_p0.95", "T1")
                 for server in ("ddtree_dflash2", "dflash_dflash2") for end in ("min", "max"))


def _served_cpu_accept(doc) -> tuple:
    """(min, max) accept length: greedy DDTree's default and DFLASH; sampled, DDTree's default and the paper's tree."""
    sm = doc["summary"]
    pairs = (("greedy", "dflash"), ("T0.6_top_p0.95", "ddtree_paper"), ("T1", "ddtree_paper"))
    return tuple(sm[server][traffic][end] for traffic, other in pairs for server in ("ddtree", other)
                 for end in ("min", "max"))


def _tau_vs_paper(doc, law: str, budget: int) -> float:
    """The served default's mean τ over the paper's tree's at one fixed budget (bench sampled, section 1)."""
    rows = doc["tau"][law]
    return rows[f"served default, B={budget}"]["mean"] / rows[f"paper's tree, B={budget}"]["mean"]


def _seed_ratio_se(doc, law: str = "T=0.6 top-p 0.95") -> float:
    """The larger, over budgets 15 and 31, standard error of the served default's τ over the paper's tree's paired
    seed by seed (sd / √seeds of the per-seed ratios)."""
    rows = doc["tau"][law]
    out = []
    for b in (15, 31):
        r = [x / y for x, y in zip(rows[f"served default, B={b}"]["per_seed"], rows[f"paper's tree, B={b}"]["per_seed"])]
        out.append(statistics.stdev(r) / len(r) ** 0.5)
    return max(out)


def _exact_vs_paper(doc, law: str, budget: int) -> float:
    rows = doc["exact"][law][f"B={budget}"]
    return rows[next(k for k in rows if k.startswith("served default"))]["vs_paper"]


def _dflash_cpu_greedy(doc) -> tuple:
    """(): stock DFLASH's T = 1 outputs on the CPU were mostly the greedy one, the plain server's none."""
    if not (doc["dflash"]["equal_to_greedy"] >= 6 and doc["plain"]["equal_to_greedy"] == 0):
        raise LookupError(f"DFLASH {doc['dflash']['equal_to_greedy']}, plain {doc['plain']['equal_to_greedy']} of 8 "
                          "T = 1 outputs equal to the greedy one")
    return ()

def _robust(doc, name, *fields):
    """A check of the requests run (robust_check.py), which must have passed, and the DDTree server alive."""
    c = doc["checks"][name]
    if not (doc["alive"] and c["ok"] and c["healthy_after"]):
        raise LookupError(f"the requests run's {name} did not pass")
    return tuple(c[f] for f in fields) if len(fields) > 1 else c[fields[0]]


def _cascade_identity(doc):
    """(fewest, most) prompts identical among the cascade servers, and the prompt count; every divergence a tie."""
    servers = {k: v for k, v in doc["servers"].items() if k.startswith("dd_cascade")}
    if any(v["unexplained"] for v in servers.values()):
        raise LookupError("a cascade server has an unexplained divergence")
    same = [v["identical"] for v in servers.values()]
    return min(same), doc["prompts"], max(same), doc["prompts"]


def _demo_lossless(doc) -> int:
    """The demo's prompt count, when every greedy row (its DFlash2 rows too) was identical to AR."""
    rows = [r for r in doc["rows"] if r["temperature"] == 0] + doc.get("dflash2", {}).get("rows", [])
    if not all(r["identical_to_ar"] for r in rows):
        raise LookupError("a greedy row of the demo differs from AR")
    return doc["prompts"]


CLAIMS = [
    # --- Try it: the demo
    ("then decodes {} held-out Python-stdlib snippets", DEMO_NOW, _demo_lossless, None),
    ("the default run took **{} s** with the native CPU kernels already built", DEMO_NOW, at("wall_s"), None),
    ("greedy, DDTree committed **{} tokens per target forward** against the chain's {}", DEMO_NOW,
     lambda d: (_demo_tau(d, "served", 0.0), _demo_tau(d, "chain", 0.0)), None),
    ("over the DFlash2 drafter's lattice {} against its selector walk's {}", DEMO_NOW,
     lambda d: tuple(next(r["tau"] for r in d["dflash2"]["rows"] if r["method"] == m) for m in ("lattice", "walk")),
     None),
    # --- Requests
    ("greedy output identical on **{}/{}** prompts for each kind", ROBUST,
     lambda d: min(_robust(d, f"grammar_{k}", "identical", "of") for k in ("json_schema", "regex", "ebnf")), None),
    ("`top_p` 1e-6 at T = 1.5 identical to greedy on {}/{}", ROBUST,
     lambda d: _robust(d, "top_p_1e-6", "identical", "of"), None),
    ("`n` = 8 gave {} distinct samples", ROBUST, lambda d: _robust(d, "independent_samples", "n8_distinct"), None),
    ("identical on {}/{} each to the plain server run", ROBUST,
     lambda d: min(_robust(d, k, "identical", "of") for k in ("frequency_penalty", "presence_penalty",
                                                              "repetition_penalty", "min_new_tokens")), None),
    ("within **{}** of the plain server's", ROBUST, lambda d: _robust(d, "logprobs", "max_abs_logprob_diff"), None),
    ("256 streams with {} disconnected mid-stream under retraction: the server stayed healthy, {}/{} completed",
     ROBUST, lambda d: (256 - _robust(d, "load_256_with_disconnects", "of"),)
     + _robust(d, "load_256_with_disconnects", "identical", "of"), None),
    # --- Results
    ("FlashInfer prefix cascade **{}/{}** to {}/{}", CASCADE_LOSSLESS, _cascade_identity, None),
    ("**{} µs** vs {} ms: **×{}**", GPU_TREE,
     lambda d: (at("stage.gpu_stage_us")(d), at("stage.ported_total_ms")(d),
                at("stage.speedup_stage_vs_ported_total")(d)), None),
    ("identical on **{}/{}** at budgets 16, 64 and auto", (LOSSLESS, LOSSLESS_RUN5),
     lambda d, d5: (min(_same_for_every_budget(d), *(d5["servers"][k]["identical"] for k in ("ddauto", "ddauto_nograph"))),
                    d["prompts"] if d["prompts"] == d5["prompts"] else -1), None),
    ("greedy **{}–{}** vs {}–{}; T = 1: **{}–{}** vs {}–{}", (AUTO_AB, SAMPLED_H100),
     lambda a, h: (_span_of(a, "accept_length", ("ddtree_auto",)) + _span_of(a, "accept_length", ("dflash",))
                   + _span_of(h, "accept_length", ("ddtree_auto",)) + _span_of(h, "accept_length", ("dflash",))), None),
    ("Sampled, CPU engine, {} held-out prompts × {} seeds", SAMPLED, lambda d: (d["prompts"], len(d["seeds"])), None),
    ("τ **{}× / {}×** at T = 1; {}× / {}× at T = 0.6, top-p 0.95 (paired exact: {}× / {}×)", SAMPLED,
     lambda d: tuple(_tau_vs_paper(d, law, b) for law in ("T=1", "T=0.6 top-p 0.95") for b in (15, 31))
     + tuple(_exact_vs_paper(d, "T=0.6 top-p 0.95", b) for b in (15, 31)), None),
    ("output tok/s: default **{}× / {}×** at c = 1 / 4", PROFILED_8K,
     lambda d: tuple(_vs(d, "ddtree_default", "dflash_flashinfer", c, input_len=8192) for c in (1, 4)), None),
    ("({}× at c=16, {}× at 32k: earlier call)", LONG,
     lambda d: (_vs(d, "ddtree_default", "dflash_flashinfer", 16, input_len=8192),
                _vs(d, "ddtree_default", "dflash_flashinfer", 1, input_len=32768)), None),
    ("T = 1 (H200, before): **{}× / {}×** at c = 1 / 32", INFLATED_T1,
     lambda t1: tuple(_vs_best(t1, "ddtree_default", c) for c in (1, 32)), None),
    ("(output tok/s **{}× / {}×** DFLASH's at c = 1 / 4, TPOT {}× / {}×;", DRAFT_8K,
     lambda d: tuple(_vs(d, "ddtree_draft_cascade", "dflash_flashinfer", c, input_len=8192) for c in (1, 4))
     + tuple(_tpot(d, "ddtree_draft_cascade", 8192, c) / _tpot(d, "dflash_flashinfer", 8192, c) for c in (1, 4)),
     None),
    ("`--attention-backend flashinfer` **{}× / {}×**", PROFILED_8K,
     lambda d: tuple(_vs(d, "ddtree_auto_fi", "dflash_flashinfer", c, input_len=8192) for c in (1, 4)), None),
    ("read the 8k context in {} ms of each round", BENCH + "round-cost-h200-2026-12-05-8k-profiles.md",
     lambda t: grep(r"\| _fwd_kernel \(only in b\) \| 0\.0 \| ([0-9.]+) \|")(t) / 1e3, None),
    # --- Limits
    ("at short context it gave {}× / {}× of the default's speed at c = 1 / 4", INFLATED,
     lambda d: tuple(_vs(d, "ddtree_default_flashinfer", "ddtree_default", c) for c in (1, 4)), None),
    ("triton's prefill still costs TTFT {} vs {} ms at c=1", DRAFT_8K,
     lambda d: tuple(pick("rows", "median_ttft_ms", server=s, input_len=8192, concurrency=1)(d)
                     for s in ("ddtree_draft_cascade", "dflash_flashinfer")), None),
    ("greedy at c = 4 it ties DFLASH ({}×) and at c=16 it lost ({}×, H200); sampled c = 16 / 32 has not run since "
     "the sort-free tail (before: {}× / {}×)", (SAMPLED_ROUND, INFLATED, INFLATED_T06),
     lambda r, g, t: (_vs_best(r, "ddtree_default", 4, ALL_DFLASH, traffic="greedy"), _vs_best(g, "ddtree_default", 16),
                      _vs_best(t, "ddtree_default", 16), _vs_best(t, "ddtree_default", 32)), None),
    ("A sampled round still takes {}–{} ms more than a greedy one", SAMPLED_ROUND_V2,
     lambda d: tuple((at(f"profiles.ddtree_default@t06_c{c}.round_us")(d)
                      - at(f"profiles.ddtree_default@greedy_c{c}.round_us")(d)) / 1e3 for c in (4, 1)), None),
    ("c = 1 / 4: greedy **{}×** / {}×; T = 0.6, top-p 0.95: **{}× / {}×** (before the sort-free tail: {}× / {}×)",
     SAMPLED_ROUND,
     lambda r: tuple(_vs_best(r, s, c, ALL_DFLASH, traffic=t) for s, t in
                     (("ddtree_default", "greedy"), ("ddtree_default", "t06"), ("ddtree_default_before", "t06"))
                     for c in (1, 4)), None),
    ("at c=1 its {}% longer acceptance shows in the time per output token (median {} vs {} ms), but its time to "
     "first token is longer ({} vs {} ms)", INFLATED,
     lambda d: ((pick("rows", "accept_length", server="ddtree_default", concurrency=1)(d)
                 / pick("rows", "accept_length", server="dflash", concurrency=1)(d) - 1) * 100,)
     + tuple(pick("rows", f, server=s, concurrency=1)(d)
             for f in ("median_tpot_ms", "median_ttft_ms") for s in ("ddtree_default", "dflash")), None),
    ("its round took {}× DFLASH's at c=16 and {}× at c=1", KIMI_TURNS,
     lambda d: tuple(_tpot(d, CASCADE, 1024, c) / _tpot(d, "dflash_flashmla", 1024, c) for c in (16, 1)), None),
    ("greedy **{}–{}** vs {}–{}; T = 0.6, top-p 0.95: {}–{} vs {}–{}; T = 1: {}–{} vs {}–{}", SERVED_CPU,
     _served_cpu_accept, None),
    ("greedy **{}–{}** vs {}–{}; T = 0.6, top-p 0.95: **{}–{}** vs {}–{}; T = 1: **{}–{}** vs {}–{}", SERVED_DFLASH2,
     _served_dflash2, None),
    ("(τ **{}× / {}×** at budgets 15 / 31, seed-by-seed SE {}", SAMPLED,
     lambda d: tuple(_tau_vs_paper(d, "T=0.6 top-p 0.95", b) for b in (15, 31)) + (_seed_ratio_se(d),), None),
    ("stock DFLASH decodes a plain drafter's sampled requests greedily", DFLASH_CPU, _dflash_cpu_greedy, None),
    ("In {} CPU demo runs, greedy, the chain beat AR's tok/s ({}–{}×) and DDTree gave {}–{}× AR's", DEMO_RUNS,
     _demo_greedy_vs_ar, None),
    ("sampled, none beat AR", DEMO_RUNS, _demo_sampled_below_ar, None),
    ("the build runs {}–{} µs per pop at budgets 8 and 64", GPU_TREE,
     span("build", "us_per_pop", budget=(8, 64)), None),
    ("top-k+LSE reaches {}% of copy bandwidth at batch 64", (GPU_TREE, CEILINGS),
     lambda d, c: pick("topk", "GBps", B=64)(d) / (c["copy_TBps"] * 1e3) * 100, None),
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


MEASURED = r"(?:×{n}|{n}×|{n}\s*(?:µs|ms|s\b|%|tok/s|MB|min\b)|{n}/[0-9]+)".format(n=r"[0-9][0-9,.]*")


def unchecked(readme: str | None = None, claims=CLAIMS) -> list[str]:
    """Measured-looking numbers (×N, N×, N with a unit: µs, ms, s, %, tok/s, MB, min, or a count N/M) anywhere in
    the README outside code blocks that no claim covers."""
    text = (ROOT / "README.md").read_text() if readme is None else readme
    readme = _flat(re.sub(r"```.*?```", " ", text, flags=re.S))
    covered = []
    for fragment, *_ in claims:
        m = re.search(NUMBER.join(re.escape(part) for part in _flat(fragment).split("{}")), readme)
        if m:
            covered.append(m.span())
    out = []
    for m in re.finditer(MEASURED, readme):
        if not any(c0 <= m.start() and m.end() <= c1 for c0, c1 in covered):
            out.append(m.group(0))
    return out


def main() -> int:
    failures = check() + [f"no claim covers {n!r} in the README" for n in unchecked()]
    for line in failures:
        print("MISMATCH:", line)
    print(f"{len(failures)} mismatch(es) in {len(CLAIMS)} README claims" if failures else
          f"all {len(CLAIMS)} README claims match their sources")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
