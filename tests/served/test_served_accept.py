"""Accept length through SGLang's own client, `python -m sglang.bench_serving`: DDTree's default against stock DFLASH
with the same drafter on the same held-out prompts, greedy, as the served benchmarks measure it. On this CPU speed
means nothing; the tokens committed per target forward do (a tree that accepts less than the chain has no reason to
exist)."""
import json
import os
import subprocess
import sys

import fleet as F

PROMPTS, OUTPUT, CONCURRENCY = 32, 48, 8


def bench(url: str, prompts, tmp_path, tag: str, extra=(), concurrency: int = CONCURRENCY) -> dict:
    """bench_serving's JSON result of one run over `prompts` (its ShareGPT format, the output length fixed); `extra`:
    more of its flags (`--temperature`, `--top-p`). Its accept length is the server's average since the counters
    were last reset: `--flush-cache` resets them after the warm-up request, so it is this run's alone (without it,
    every earlier request to the server counts)."""
    data = tmp_path / "prompts.json"
    data.write_text(json.dumps([{"id": str(i), "conversations": [{"from": "human", "value": p},
                                                                 {"from": "gpt", "value": p}]}
                                for i, p in enumerate(prompts)]))
    out = tmp_path / f"{tag}.jsonl"
    argv = [sys.executable, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", url,
            "--dataset-name", "sharegpt", "--dataset-path", str(data), "--sharegpt-output-len", str(OUTPUT),
            "--num-prompts", str(len(prompts)), "--max-concurrency", str(concurrency), "--request-rate", "inf",
            "--tokenizer", F.TARGET, "--output-file", str(out), "--disable-tqdm", "--seed", "0",
            "--flush-cache", *extra]  # the server's accept counters reset after the warm-up: this run's alone
    run = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=F.environment(F.SGLANG), cwd=F.ROOT)
    assert run.returncode == 0 and out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text().strip().splitlines()[-1])


def at_least_dflash(fleet, prompts, tmp_path, ddtree: str, dflash: str) -> tuple[dict, dict]:
    """bench_serving runs of a DDTree server and a stock DFLASH one over the first PROMPTS held-out prompts, greedy,
    each complete; DDTree's accept length must be at least DFLASH's."""
    dd, df = (bench(fleet.url(name), prompts[:PROMPTS], tmp_path, name) for name in (ddtree, dflash))
    for r in (dd, df):
        assert r["completed"] == PROMPTS and r["accept_length"], r
    print(f"\naccept length over {PROMPTS} held-out prompts, greedy: {ddtree} {dd['accept_length']:.2f}, {dflash} "
          f"{df['accept_length']:.2f}")
    assert dd["accept_length"] >= df["accept_length"], (dd["accept_length"], df["accept_length"])
    return dd, df


def test_ddtree_accepts_at_least_what_dflash_does(fleet, prompts, tmp_path):
    dd, df = at_least_dflash(fleet, prompts, tmp_path, "ddtree", "dflash")
    record = os.environ.get("SERVED_ACCEPT_RECORD")  # a path: the two runs kept (docs/benchmarks)
    if record:
        with open(record, "w") as f:
            json.dump({"prompts": PROMPTS, "output_len": OUTPUT, "concurrency": CONCURRENCY, "ddtree": dd,
                       "dflash": df}, f, indent=1)
