"""Engine benchmark: losslessness of the decode loop, and where a DDTree round's time goes.

    python -m sglang_ddtree.bench engine [--out engine.json] [--pair qwen3|mla] [--quick]

1. Lossless (the shipped tiny pair; `--pair mla`: the DeepSeek-V3 MLA one): greedy DDTree at several
   budgets (the paper's tree and the chain-anchored one) and the DFlash chain against AR in fp32 (must be
   token-identical), with tau, and in bf16 DDTree against the chain under identical conditions
   (reported as agreement; bf16 verify widths differ, so exact equality is not a property of bf16).
2. Timing (GPU): a randomly initialised Qwen3-8B-shaped target (36 layers, hidden 4096, 32/8 heads,
   vocab 151936, bf16) with a matching 5-layer DFlash drafter (block 16), ragged prompts of ~1k tokens,
   batch x budget grid. Per stage (draft, build, verify, sample, accept, commit) from CUDA events; the
   share of the round outside the target and drafter forwards; and, on the same rounds' inputs, the
   CPU heapq path of today's ports (bench/baseline.py: top-k, device->host copy, heapq build, dict
   walk) timed in place of our build + accept.
"""
from __future__ import annotations

import platform
import statistics
import time

import torch

from .. import _cli
from ..engine import Engine, summarize
from ..engine.data import MAX_NEW_TOKENS, MAX_NEW_TOKENS_WHY, PAIRS, heldout_prompts
from ..engine.dflash import DFlashDraftModel, dflash_config
from ..engine.model import Qwen3Config, Qwen3ForCausalLM
from ..sizes import MAX_BUDGET
from .baseline import run_ported_round

QWEN3_8B = dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                rope_theta=1000000.0, max_position_embeddings=40960, tie_word_embeddings=False)
DRAFT_8B = dict(num_layers=5, block_size=16, target_layer_ids=[1, 9, 17, 25, 33], mask_token_id=151669)


def lossless(device, n_prompts: int, max_new: int, budgets, dtypes=(torch.float32, torch.bfloat16), pair="qwen3",
             batch_size=None) -> dict:
    prompts = heldout_prompts(n_prompts)
    out = {}
    for dtype in dtypes:
        eng = Engine.from_pretrained(device=device, dtype=dtype, pair=pair)
        gen = lambda method, **kw: eng.generate(prompts, max_new, method=method, batch_size=batch_size, **kw)
        runs = {"ar": gen("ar"), "chain": gen("chain")}
        for b in budgets:
            runs[f"ddtree{b}"] = gen("ddtree", budget=b, paper=True)
            runs[f"ddtree{b}_anchored"] = gen("ddtree", budget=b, anchor="chain", paper=True)
        ids = {k: [r.token_ids for r in v] for k, v in runs.items()}
        rows = {}
        for k, v in ids.items():
            rows[k] = {"tau": summarize(runs[k])["tau"],
                       "identical_to_ar": sum(a == b for a, b in zip(v, ids["ar"])),
                       "identical_to_chain": sum(a == b for a, b in zip(v, ids["chain"]))}
        out[str(dtype).replace("torch.", "")] = {"pair": pair, "attention": eng.attention, "prompts": len(prompts),
                                                  "max_new_tokens": max_new, "runs": rows}
        print(f"[lossless {dtype}] " + ", ".join(f"{k}: tau {r['tau']:.2f}, ={r['identical_to_ar']}/AR "
                                                  f"={r['identical_to_chain']}/chain" for k, r in rows.items()),
              flush=True)
    return out


def random_8b(device, dtype=torch.bfloat16, seed=0, attention="auto") -> Engine:
    """Random weights, real shapes (std 0.02 normals, norms at 1): timing needs shapes, not skill."""
    torch.manual_seed(seed)
    cfg = Qwen3Config(**QWEN3_8B)
    with torch.device("meta"):
        target = Qwen3ForCausalLM(cfg)
        drafter = DFlashDraftModel(dflash_config(cfg, **DRAFT_8B))
    for m in (target, drafter):
        m.to(dtype).to_empty(device=device)
        with torch.no_grad():
            for name, p in m.named_parameters():
                p.fill_(1.0) if name.endswith("norm.weight") else p.normal_(0.0, 0.02)
        m.eval()
    return Engine(target, drafter, attention=attention)


def timing(engine: Engine, batches, budgets, prompt_len: int, rounds: int, warmup: int, heapq: bool,
           rows: list | None = None, save=lambda: None) -> list:
    """Appends one row per (batch, budget) to `rows` and calls save() after each (partial results survive)."""
    rows = [] if rows is None else rows
    V = engine.target.config.vocab_size
    g = torch.Generator().manual_seed(0)
    for B in batches:
        lens = [prompt_len + int(x) for x in torch.randint(-prompt_len // 4, prompt_len // 4 + 1, (B,), generator=g)]
        prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in lens]
        for budget in budgets:
            ported = []

            def on_round(draft_logits, bud, node_tokens):
                if heapq:
                    ported.append(run_ported_round(draft_logits, bud, node_tokens))

            # random weights accept ~1 token per round, so max_new ~ rounds; stop tokens disabled
            engine.generate(prompts, warmup + 1, method="ddtree", budget=budget, stop_token_ids=[], paper=True)
            torch.cuda.synchronize() if engine.device.type == "cuda" else None
            t0 = time.perf_counter()
            res = engine.generate(prompts, rounds + 1, method="ddtree", budget=budget, stop_token_ids=[],
                                  on_round=on_round, paper=True)
            wall = time.perf_counter() - t0
            st = dict(res[0].stage_times)
            n_rounds = st.pop("rounds")
            st.pop("prefill")
            per = {k: 1e3 * v / n_rounds for k, v in st.items()}           # ms per round
            round_ms = sum(per.values())
            ours_tree = per["build"] + per["accept"]
            row = {"batch": B, "budget": budget, "rounds": n_rounds, "prompt_len_mean": sum(lens) / B,
                   "tau": summarize(res)["tau"], "stage_ms": per, "round_ms": round_ms,
                   "tree_share_ours": ours_tree / round_ms,
                   "outside_forwards_share_ours": (round_ms - per["verify"] - per["draft"]) / round_ms,
                   "wall_s_incl_heapq": wall}
            if ported:
                pm = {k: 1e3 * statistics.median(p[k] for p in ported) for k in ported[0]}
                hround = round_ms - ours_tree + pm["total"]
                row.update({"heapq_ms": pm, "tree_share_heapq": pm["total"] / hround,
                            "outside_forwards_share_heapq": (hround - per["verify"] - per["draft"]) / hround})
            rows.append(row)
            save()
            print(f"[timing] B={B:>2} budget={budget:>2}: round {round_ms:7.2f} ms "
                  + " ".join(f"{k} {v:.2f}" for k, v in per.items())
                  + f" | tree share ours {100 * row['tree_share_ours']:.2f}%"
                  + (f", heapq {100 * row['tree_share_heapq']:.2f}% ({pm['total']:.2f} ms)" if ported else ""),
                  flush=True)
    return rows


def main(argv=None) -> int:
    ap = _cli.Parser(prog=_cli.prog("bench", "engine"), description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--out", type=_cli.output_file, default="engine.json", help="the JSON to write")
    ap.add_argument("--device", type=_cli.device, default=None, help="cpu / cuda (default: cuda when present)")
    ap.add_argument("--batches", type=_cli.positive_int_list, default=[1, 8, 32],
                    help="timing: batch sizes, comma-separated (default 1,8,32)")
    ap.add_argument("--budgets", type=_cli.int_list_at_most(MAX_BUDGET, "every builder's largest budget"),
                    default=[8, 32, 64], help="tree budgets, comma-separated, of both parts (default 8,32,64)")
    ap.add_argument("--prompt-len", type=_cli.positive_int, default=1024,
                    help="timing: mean prompt length in tokens, each prompt within ±25%% (default 1024)")
    ap.add_argument("--rounds", type=_cli.positive_int, default=12, help="timing: decode rounds timed (default 12)")
    ap.add_argument("--warmup", type=_cli.positive_int, default=3, help="timing: rounds run first, untimed (default 3)")
    ap.add_argument("--lossless-prompts", type=_cli.int_at_most(len(heldout_prompts()), "the held-out prompts "
                    "shipped"), default=200, help="lossless: held-out prompts decoded (default 200)")
    ap.add_argument("--lossless-dtypes", type=_cli.choice_list("float32", "bfloat16", "float16"),
                    default=["float32", "bfloat16"],
                    help="lossless: dtypes, comma-separated (default float32,bfloat16)")
    ap.add_argument("--lossless-max-new", type=_cli.int_at_most(MAX_NEW_TOKENS, MAX_NEW_TOKENS_WHY), default=48,
                    help="lossless: tokens generated per prompt (default 48)")
    ap.add_argument("--lossless-batch", type=_cli.positive_int, default=None, help="requests decoded together (default: all)")
    ap.add_argument("--pair", default="qwen3", choices=sorted(PAIRS), help="the shipped tiny pair to check")
    ap.add_argument("--skip-8b", action="store_true", help="only the lossless part (e.g. on CPU)")
    ap.add_argument("--skip-lossless", action="store_true", help="only the 8B-shaped timing")
    ap.add_argument("--attention", default="auto", choices=("auto", "tree", "mask"), help="target verify attention")
    ap.add_argument("--no-heapq", action="store_true", help="timing: skip the ports' CPU heapq path")
    a = ap.parse_args(argv)
    device = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
           "torch": torch.__version__, "args": vars(a)}
    t0 = time.time()

    def save():
        _cli.write_json(a.out, out)

    if not a.skip_lossless:
        dtypes = [getattr(torch, d) for d in a.lossless_dtypes]
        out["lossless"] = lossless(device, a.lossless_prompts, a.lossless_max_new, a.budgets, dtypes, a.pair,
                                   a.lossless_batch)
        out["lossless_s"] = time.time() - t0
        save()
    if not a.skip_8b:
        eng = random_8b(device, attention=a.attention)
        out["shapes"] = {"target": QWEN3_8B, "drafter": DRAFT_8B, "dtype": "bfloat16"}
        args = (a.batches, a.budgets, a.prompt_len, a.rounds, a.warmup, not a.no_heapq)
        out["timing"] = []
        try:
            timing(eng, *args, rows=out["timing"], save=save)
        except Exception as exc:  # keep the step's other numbers: retry with the SDPA verify path
            if eng.attention != "tree":
                raise
            print(f"[timing] attention op failed ({exc!r}); retrying with SDPA", flush=True)
            out["attention_op_error"] = repr(exc)
            eng.attention = "mask"
            out["timing"] = []
            timing(eng, *args, rows=out["timing"], save=save)
        out["attention"] = eng.attention
    out["total_s"] = time.time() - t0
    save()
    print(f"wrote {a.out}")
    if "lossless" not in out:
        return 0
    fp32 = out["lossless"]["float32"]
    ok = all(r["identical_to_ar"] == fp32["prompts"] for r in fp32["runs"].values())
    print(f"fp32 lossless: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
