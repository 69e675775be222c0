"""The A/B's report (bench/ab.py): runs measured in separate calls merged into one, the table, the plot, and the
profiled rounds set side by side; it starts no server and reads only ab.json files."""
from __future__ import annotations

import json
import os


def merge(runs: list[tuple[str, dict]]) -> dict:
    """One report from several runs' (name, ab.json), e.g. concurrencies measured in separate device calls. They
    must have measured alike (client, output length, passes, bench_serving flags, traffics, shared launch flags,
    each server's own flags), and no (server, traffic, input length, concurrency) row may come twice; each row and
    profile keeps its run's name, and the runs' own headers are kept under "runs"."""
    if not runs:
        raise ValueError("nothing to merge")
    alike = ("client", "output_len", "warmup_passes", "repeats", "bench_args", "traffics", "common",
             "one_server_at_a_time")
    first_name, first = runs[0]
    out = {k: first.get(k) for k in alike}
    out.update(merged_from=[name for name, _ in runs], runs={}, servers={}, rows=[], profiles={})
    seen = {}
    for name, run in runs:
        for k in alike:
            if run.get(k) != first.get(k):
                raise ValueError(f"{name} and {first_name} differ in {k!r}: {run.get(k)!r} vs {first.get(k)!r}")
        for server, info in run.get("servers", {}).items():
            known = out["servers"].setdefault(server, {"args": info.get("args"), "runs": {}})
            if "args" in info and known["args"] != info["args"]:
                raise ValueError(f"server {server!r} ran with other flags in {name}: {info['args']!r}")
            known["runs"][name] = info
        for row in run.get("rows", []):
            key = (row["server"], row.get("traffic"), row.get("input_len"), row["concurrency"])
            if key in seen:
                raise ValueError(f"row {key} is in both {seen[key]} and {name}")
            seen[key] = name
            out["rows"].append({**row, "run": name})
        for key, prof in run.get("profiles", {}).items():
            out["profiles"][f"{key} ({name})" if key in out["profiles"] else key] = {**prof, "run": name}
        out["runs"][name] = {k: v for k, v in run.items() if k not in ("rows", "profiles", "servers")}
    out["rows"].sort(key=lambda r: (r["server"], r.get("traffic") or "", r.get("input_len") or 0, r["concurrency"]))
    return out


def merge_input(item: str) -> tuple[str, dict]:
    """One --merge argument, PATH or PATH@C,C..: the run's ab.json, with only those concurrencies' rows when
    given (e.g. a concurrency measured again in a later call, with an A/A twin, replaces the earlier call's);
    the run's name is its path, so the merged report says which file every row came from."""
    path, _, concs = item.partition("@")
    run = json.load(open(path))
    if concs:
        try:
            keep = {int(c) for c in concs.split(",")}
        except ValueError:
            raise ValueError(f"--merge: {item!r} is not PATH or PATH@C,C..") from None
        run = {**run, "rows": [r for r in run.get("rows", []) if r["concurrency"] in keep],
               "profiles": {k: v for k, v in run.get("profiles", {}).items() if profile_id(k, v)[2] in keep}}
    return item, run


def row_label(row: dict) -> str:
    """A row's server, with its traffic where the run named traffics: "server [traffic]"."""
    return row["server"] + (f" [{row['traffic']}]" if row.get("traffic") else "")


def markdown(rows: list[dict]) -> str:
    head = ("| server | input | conc | output tok/s | TPOT P50 (ms) | TPOT P99 (ms) | TTFT P50 (ms) | TTFT P99 (ms) | accept len |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    f = lambda v, p: "-" if v is None else format(v, p)  # noqa: E731
    return head + "".join(
        f"| {row_label(r)} | {r.get('input_len') or 'prompts'} | {r['concurrency']} | "
        f"{f(r['output_throughput'], '.1f')} | {f(r['median_tpot_ms'], '.3f')} | "
        f"{f(r['p99_tpot_ms'], '.3f')} | {f(r['median_ttft_ms'], '.1f')} | {f(r['p99_ttft_ms'], '.1f')} | "
        f"{f(r['accept_length'], '.2f')} |\n" for r in rows)


def plot(rows: list[dict], path: str) -> str | None:
    """Output tok/s and accept length against concurrency, one line per server (traffic, input length); None
    where matplotlib is not installed. Drawn on a bare Figure, not through pyplot: pyplot's backend switch
    pokes IPython when it is importable, and the GPU bundle's IPython is a partial one."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    lines = {}
    for r in rows:
        lines.setdefault(row_label(r) + (f" in{r['input_len']}" if r.get("input_len") else ""), []).append(r)
    fig = Figure(figsize=(11, 4))
    ax1, ax2 = fig.subplots(1, 2)
    for k, (label, rs) in enumerate(lines.items()):
        rs = sorted(rs, key=lambda r: r["concurrency"])
        c, color = [r["concurrency"] for r in rs], f"C{k % 10}"  # one colour per server in both panels
        ax1.plot(c, [r["output_throughput"] for r in rs], marker="o", label=label, color=color)
        if any(r.get("accept_length") for r in rs):
            ax2.plot(c, [r.get("accept_length") or float("nan") for r in rs], marker="o", label=label, color=color)
    for ax, name in ((ax1, "output tok/s"), (ax2, "accept length")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    fig.suptitle("sglang.bench_serving, one server measured at a time")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def write_outputs(report: dict, out: str) -> None:
    """DIR/ab.md and DIR/ab.png from a report's rows (the table also to stdout), and DIR/ab_profiles.md where two
    profiled rounds make a pair (profile_comparisons)."""
    rows = report["rows"]
    with open(os.path.join(out, "ab.md"), "w") as f:
        f.write(markdown(rows))
    plot(rows, os.path.join(out, "ab.png"))
    print(markdown(rows))
    cmp = profile_comparisons(report.get("profiles", {}), report.get("traffics"))
    if cmp:
        with open(os.path.join(out, "ab_profiles.md"), "w") as f:
            f.write(cmp)


def profile_id(key: str, prof: dict) -> tuple[str, str | None, int]:
    """(server, traffic, concurrency) of a stored profile: its own fields, else (a report from before traffics)
    its key "<server>_c<conc>" (a merged report may suffix " (<run>)")."""
    if "server" in prof:
        return prof["server"], prof.get("traffic"), int(prof["concurrency"])
    name, _, conc = key.split(" (")[0].rpartition("_c")
    return name, None, int(conc)


def greedy_traffic(traffics: dict | None) -> str | None:
    """The traffic a sampled round is set against: the one named "greedy", else the first given."""
    traffics = traffics or {}
    return "greedy" if "greedy" in traffics else next(iter(traffics), None)


def paired(a: tuple, b: tuple, greedy: str | None) -> bool:
    """Whether round b is set against round a (each (server, traffic, concurrency)): at one concurrency, a server
    against each DFLASH server under one traffic; a server's sampled round against its own greedy one (what
    sampling costs a round); a server against its "_before" twin (its flags on an older copy of the plugin)
    under one traffic."""
    (sa, ta, ca), (sb, tb, cb) = a, b
    if ca != cb:
        return False
    if ta == tb:
        return (sa.startswith("dflash") and not sb.startswith("dflash")) or sa == sb + "_before"
    return sa == sb and ta == greedy and tb is not None


def profile_comparisons(profiles: dict, traffics: dict | None = None) -> str:
    """Markdown: every pair of profiled rounds (`paired`), b against a kernel by kernel
    (sglang_ddtree.bench.trace.compare); "" where no such pair was profiled."""
    from .trace import compare, compare_markdown

    greedy = greedy_traffic(traffics)
    rounds = [(profile_id(k, p), p) for k, p in sorted(profiles.items())
              if "error" not in p and "kernel_us_by_name" in p]
    name = lambda s, t: s if t is None else f"{s} {t}"  # noqa: E731
    return "\n".join(compare_markdown(f"{name(*b[:2])} (b) against {name(*a[:2])} (a), c={a[2]}", compare(pa, pb))
                     for a, pa in rounds for b, pb in rounds if paired(a, b, greedy))
