"""Fixed budgets against budget='auto' on the engine, per batch size (`python -m sglang_ddtree bench budget_sweep`;
`python -m sglang_ddtree budget` still runs it).

The auto budget is budget.AutoWidth, run by round.Round as the server runs it; this command measures what it
chooses and what that costs on the shipped pair.
"""
from __future__ import annotations

import collections
import time

import torch

from .. import _cli
from ..engine.data import MAX_NEW_TOKENS, MAX_NEW_TOKENS_WHY, heldout_prompts
from ..engine.engine import Engine, summarize

FIT_PROMPTS = 100  # the shipped calibration's fit prompts (python -m sglang_ddtree calibration's default)


def main(argv=None) -> int:
    """Fixed budgets against budget='auto' on the engine (the shipped pair, held-out prompts the calibration
    was not fitted on), per batch size: τ, decode wall time (the start-up cost table excluded and reported
    apart), tokens/s and the budgets auto chose."""
    unfitted = len(heldout_prompts()) - FIT_PROMPTS
    ap = _cli.Parser(prog=_cli.prog("bench", "budget_sweep"), description=" ".join(main.__doc__.split()))
    ap.add_argument("--out", type=_cli.output_file, default="budget.json", help="the JSON to write (after each row)")
    ap.add_argument("--batches", type=_cli.positive_int_list, default=[1, 16, 128],
                    help="batch sizes, comma-separated (default 1,16,128)")
    ap.add_argument("--prompts", type=_cli.int_at_most(unfitted, "the held-out prompts the calibration was not "
                    "fitted on"), default=128, help=f"taken after the calibration's {FIT_PROMPTS} fit prompts")
    ap.add_argument("--max-new", type=_cli.int_at_most(MAX_NEW_TOKENS, MAX_NEW_TOKENS_WHY), default=48,
                    help="tokens generated per prompt (default 48)")
    ap.add_argument("--device", type=_cli.device, default=None, help="cpu / cuda (default: cuda when present)")
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    eng = Engine.from_pretrained(device=a.device)
    prompts = heldout_prompts()[FIT_PROMPTS:FIT_PROMPTS + a.prompts]
    kw = dict(method="ddtree", anchor="chain", draft_temperature="drafter")
    out = {"device": str(eng.device), "prompts": len(prompts), "max_new_tokens": a.max_new, "rows": []}
    for bs in a.batches:
        eng.generate(prompts[:bs], 4, batch_size=bs, budget=8, **kw)  # warm-up
        for budget in (8, 16, 32, 64, "auto"):
            t0 = time.perf_counter()
            res = eng.generate(prompts, a.max_new, batch_size=bs, budget=budget, **kw)
            wall = time.perf_counter() - t0
            cost_s = sum(r.stage_times.get("cost", 0.0) for r in res[::bs])
            s = summarize(res)
            row = {"batch": bs, "budget": budget, "tau": s["tau"], "decode_s": wall - cost_s, "cost_table_s": cost_s,
                   "tok_per_s": s["tokens"] / (wall - cost_s),
                   "chosen": dict(collections.Counter(b for r in res for b in r.round_budgets))}
            out["rows"].append(row)
            print(row, flush=True)
            _cli.write_json(a.out, out)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
