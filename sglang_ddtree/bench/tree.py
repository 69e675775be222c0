"""`python -m sglang_ddtree bench tree`: the tree stage, the ports' path vs ours, batch × budget.

Both paths get the same draft logits (depth 15, vocab 151936, bf16) and target tokens. The ported path
runs per request (top-k + logsumexp, copy to host, heapq + visibility + child dicts, dict walk); ours
runs the batch through build_tree (canonical top-k + native builder) and accept_tree. The headline ratio
is the builder's: the ports' host build vs our native build from the same kind of inputs.
"""
from __future__ import annotations

import argparse

import torch

from .. import _cli, accept_tree, build_tree, build_tree_from_topk
from ..topk import topk_logprobs
from . import baseline
from .common import md_table, metadata, progress, time_fn, write_outputs

DEPTH, VOCAB = 15, 151936


def bench_point(logits: torch.Tensor, budget: int, device: torch.device, backend: str, repeats: int) -> dict:
    B = logits.shape[0]
    gen = torch.Generator(device="cpu").manual_seed(budget)
    targets = torch.randint(0, VOCAB, (B, budget + 1), generator=gen).to(device)
    k = min(budget, VOCAB)
    lp, ids = topk_logprobs(logits, k, backend)
    tree = build_tree_from_topk(lp, ids, budget, backend=backend)
    targets[:, 0] = tree.tokens[:, 1]  # make walks take at least one step
    ours = {
        "topk": time_fn(lambda: topk_logprobs(logits, k, backend), device=device, repeats=repeats),
        "build": time_fn(lambda: build_tree_from_topk(lp, ids, budget, backend=backend), device=device, repeats=repeats),
        "accept": time_fn(lambda: accept_tree(tree, targets, backend=backend), device=device, repeats=repeats),
        "stage": time_fn(lambda: accept_tree(build_tree(logits, budget, backend=backend), targets, backend=backend),
                         device=device, repeats=repeats),
    }
    ported_runs = [baseline.run_ported_round(logits, budget, targets) for _ in range(max(1, repeats // 4))]
    ported = {key: sorted(r[key] for r in ported_runs)[len(ported_runs) // 2] for key in ported_runs[0]}
    row = {"batch": B, "budget": budget, "depth": DEPTH, "vocab": VOCAB, "backend": backend,
           "ours_s": {k2: v["median_s"] for k2, v in ours.items()}, "ported_s": ported}
    row["build_speedup_per_request"] = ported["host_build"] / ours["build"]["median_s"]
    row["stage_speedup"] = ported["total"] / ours["stage"]["median_s"]
    return row


def main(argv=None) -> int:
    ap = _cli.Parser(prog=_cli.prog("bench", "tree"), description=__doc__,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small grid, few repeats (about 35 s on 2 idle cores, "
                    "longer on a loaded machine; the full grid takes far longer)")
    ap.add_argument("--device", type=_cli.device, default=None, help="cpu or cuda (default: cuda if available)")
    ap.add_argument("--batches", type=_cli.positive_int_list, default=None,
                    help="comma list (default 1,8,64,256; quick: 1,8,64)")
    ap.add_argument("--budgets", type=_cli.positive_int_list, default=None,
                    help="comma list (default 8,32,64,128,256; quick: 8,64)")
    ap.add_argument("--repeats", type=_cli.positive_int, default=None,
                    help="timed calls per point, the median reported (default: the grid's own)")
    ap.add_argument("--out", type=_cli.output_dir, default="bench_out",
                    help="output folder for tree-<device>.json/.md/.png (checked before the run)")
    args = ap.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    backend = device.type
    batches = args.batches or ([1, 8, 64] if args.quick else [1, 8, 64, 256])
    budgets = args.budgets or ([8, 64] if args.quick else [8, 32, 64, 128, 256])
    repeats = args.repeats or (4 if args.quick else 12)

    gen = torch.Generator(device="cpu").manual_seed(0)
    full = (torch.randn(max(batches), DEPTH, VOCAB, generator=gen) * 2.0).to(torch.bfloat16).to(device)
    print(f"bench tree: {len(batches) * len(budgets)} points (batch {batches} x budget {budgets}), {repeats} repeats; "
          f"{'about 35 s on 2 idle cores' if args.quick else 'the full grid takes a while'}", flush=True)
    rows = []
    for B, budget in progress([(b, g) for b in batches for g in budgets], desc="bench tree"):
        rows.append(bench_point(full[:B], budget, device, backend, repeats))

    meta = metadata(device)
    ms = lambda s: s * 1e3
    table = md_table(
        ["batch", "budget", "ported host build ms", "our build ms", "build ×/request", "ported stage ms",
         "our stage ms", "stage ×"],
        [[r["batch"], r["budget"], ms(r["ported_s"]["host_build"]), ms(r["ours_s"]["build"]),
          r["build_speedup_per_request"], ms(r["ported_s"]["total"]), ms(r["ours_s"]["stage"]),
          r["stage_speedup"]] for r in rows])
    md = (f"# Tree stage benchmark ({backend})\n\n{meta['date']}, commit {meta['commit']}, "
          f"{meta.get('gpu', meta['cpu'])}, torch {meta['torch']}, {meta['cpu_threads']} CPU threads. "
          f"Depth {DEPTH}, vocab {VOCAB}, bf16 logits; medians.\n\n"
          "'stage' = top-k + log-normaliser + build + walk for the whole batch (ours) or per request in a "
          "loop (ported: torch top-k, copy to host, heapq + visibility, dict walk).\n\n" + table)

    def plot(path):
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        for B in batches:
            pts = [r for r in rows if r["batch"] == B]
            ax[0].plot([r["budget"] for r in pts], [ms(r["ported_s"]["host_build"]) / B for r in pts], "o--", label=f"ported B={B}")
            ax[0].plot([r["budget"] for r in pts], [ms(r["ours_s"]["build"]) / B for r in pts], "o-", label=f"ours B={B}")
            ax[1].plot([r["budget"] for r in pts], [r["stage_speedup"] for r in pts], "o-", label=f"B={B}")
        ax[0].set(xscale="log", yscale="log", xlabel="budget", ylabel="build ms per request", title="tree build")
        ax[1].set(xscale="log", xlabel="budget", ylabel="× faster (whole stage)", title="ours vs ported")
        ax[0].legend(fontsize=7)
        ax[1].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path, dpi=110)

    paths = write_outputs(args.out, f"tree-{backend}", {"meta": meta, "rows": rows}, md, plot)
    print(md)
    print("wrote", ", ".join(map(str, paths)))
    return 0
