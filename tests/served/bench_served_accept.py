"""Accept length on the CPU servers through `python -m sglang.bench_serving`, greedy and sampled, DDTree against
stock DFLASH with the same drafter (torch_native, its only CPU backend), PASSES passes each, written to a JSON file
(docs/benchmarks). On this CPU only accept length (tokens committed per target forward) means something; the
client's speed fields are kept but are not results.

    PYTHONPATH=.deps/sgl-0.5.23 python tests/served/bench_served_accept.py OUT.json [SERVER ...]

SERVER: names in fleet.SERVERS (default: ddtree dflash). One server is up at a time.
"""
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

import fleet as F  # noqa: E402
from test_served_accept import OUTPUT, PROMPTS, bench  # noqa: E402

TRAFFIC = {"greedy": [], "T0.6_top_p0.95": ["--temperature", "0.6", "--top-p", "0.95"],
           "T1": ["--temperature", "1.0"]}
CONCURRENCY, PASSES = (4, 16), 2


def summary(runs: list[dict]) -> dict:
    """{server: {traffic: {min, max, mean, n}}} of the runs' accept lengths (both concurrencies, every pass)."""
    out: dict = {}
    for r in runs:
        out.setdefault(r["server"], {}).setdefault(r["traffic"], []).append(r["accept_length"])
    return {srv: {t: {"min": min(v), "max": max(v), "mean": sum(v) / len(v), "n": len(v)} for t, v in tr.items()}
            for srv, tr in out.items()}


def main(out: str, servers: list[str]) -> None:
    from sglang_ddtree.engine.data import heldout_prompts

    prompts = heldout_prompts()[:PROMPTS]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=F.ROOT).stdout.strip()
    result = {"date": time.strftime("%Y-%m-%d"), "commit": commit, "machine": platform.processor() or "cpu",
              "cores": os.cpu_count(), "prompts": PROMPTS, "output_len": OUTPUT, "runs": []}
    fleet = F.Fleet()
    try:
        for name in servers:
            url = fleet.url(name)
            for traffic, flags in TRAFFIC.items():
                for c in CONCURRENCY:
                    for k in range(PASSES):
                        with tempfile.TemporaryDirectory() as tmp:
                            r = bench(url, prompts, Path(tmp), name, flags, c)
                        result["runs"].append({"server": name, "traffic": traffic, "concurrency": c, "pass": k,
                                               "accept_length": r["accept_length"], "completed": r["completed"],
                                               "output_throughput": r.get("output_throughput")})
                        print(name, traffic, c, k, r["accept_length"], flush=True)
            fleet._stop(name)  # one server up at a time
    finally:
        fleet.stop_all()
        result["servers"] = {n: " ".join([*(f"{k}={v}" for k, v in F.SERVERS[n][2].items()), *F.SERVERS[n][1]])
                             for n in servers}
        result["cost"] = fleet.report()
        result["summary"] = summary(result["runs"])
        Path(out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["ddtree", "dflash"])
