"""A DFlash2 drafter three ways, on the engine: τ of DDTree over its selector's lattice against the selector's own
walk (SGLang's DFLASH on a DFlash2 drafter) and against DDTree over the same drafter's marginals.

    python -m sglang_ddtree.bench dflash2 [--out dflash2.json] [--prompts 120] [--seeds 0,1,2]

The shipped tiny DFlash2 pair (tiny-target + tiny-dflash2, whose backbone is tiny-dflash's: the marginals are the
shipped DFlash drafter's own), held-out prompts the selector never saw. Greedy: the prompts in len(seeds) disjoint
groups, τ per group (its spread across groups); every greedy output is checked against AR's. T = 1: every prompt,
once per seed. Budgets are the tree's node budgets; budget 7 verifies as many nodes as the walk (8).
"""
from __future__ import annotations

import statistics
import time

import torch

from .. import _cli
from ..engine import Engine, summarize
from ..engine.data import MAX_NEW_TOKENS, MAX_NEW_TOKENS_WHY, heldout_prompts
from .common import metadata


def _runs(budgets) -> dict:
    """name -> generate() keywords of every method compared."""
    runs = {"walk": {"method": "walk"}, "chain": {"method": "chain"}}
    for b in budgets:
        for anchor, tag in ((None, ""), ("chain", "_anchored")):
            runs[f"lattice{b}{tag}"] = {"method": "lattice", "budget": b, "anchor": anchor, "paper": True}
            runs[f"ddtree{b}{tag}"] = {"method": "ddtree", "budget": b, "anchor": anchor, "paper": True}
    return runs


def _spread(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "each": values}


def main(argv=None) -> int:
    ap = _cli.Parser(prog=_cli.prog("bench", "dflash2"), description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--out", type=_cli.output_file, default="dflash2.json", help="the JSON to write (after each run)")
    ap.add_argument("--prompts", type=_cli.int_at_most(len(heldout_prompts()), "the shipped held-out prompts"),
                    default=120, help="held-out prompts (default 120)")
    ap.add_argument("--max-new", type=_cli.int_at_most(MAX_NEW_TOKENS, MAX_NEW_TOKENS_WHY), default=48,
                    help="tokens generated per prompt (default 48)")
    ap.add_argument("--seeds", type=_cli.positive_int_list, default=[1, 2, 3],
                    help="sampling seeds (and greedy prompt groups), comma-separated (default 1,2,3)")
    ap.add_argument("--budgets", type=_cli.positive_int_list, default=[7, 15, 31, 63],
                    help="tree budgets, comma-separated (default 7,15,31,63)")
    ap.add_argument("--device", type=_cli.device, default="cpu", help="cpu / cuda (default cpu)")
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    eng = Engine.from_pretrained(device=a.device, pair="dflash2")
    prompts = heldout_prompts(a.prompts)
    groups = [prompts[i::len(a.seeds)] for i in range(len(a.seeds))]
    out = {"meta": metadata(eng.device), "pair": "dflash2", "prompts": len(prompts), "max_new_tokens": a.max_new,
           "seeds": a.seeds, "selector_top_k": eng.drafter.candidate_selector.top_k, "greedy": {}, "t1": {}}
    t0 = time.perf_counter()
    ar = [[r.token_ids for r in eng.generate(g, a.max_new, method="ar", batch_size=len(g))] for g in groups]
    for name, kw in _runs(a.budgets).items():
        taus, same = [], 0
        for g, want in zip(groups, ar):
            res = eng.generate(g, a.max_new, batch_size=len(g), **kw)
            taus.append(summarize(res)["tau"])
            same += sum(r.token_ids == w for r, w in zip(res, want))
        out["greedy"][name] = {**_spread(taus), "identical_to_ar": f"{same}/{len(prompts)}"}
        taus = [summarize(eng.generate(prompts, a.max_new, batch_size=len(prompts), temperature=1.0, seed=s * 100_000,
                                       **kw))["tau"] for s in a.seeds]
        out["t1"][name] = _spread(taus)
        print(f"{name}: greedy tau {out['greedy'][name]['mean']:.3f} ({out['greedy'][name]['identical_to_ar']} = AR), "
              f"T=1 tau {out['t1'][name]['mean']:.3f} ({time.perf_counter() - t0:.0f}s)", flush=True)
        _cli.write_json(a.out, out)
    for mode in ("greedy", "t1"):
        walk = out[mode]["walk"]["mean"]
        out[f"{mode}_vs_walk"] = {k: v["mean"] / walk for k, v in out[mode].items()}
    out["seconds"] = time.perf_counter() - t0
    _cli.write_json(a.out, out)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
