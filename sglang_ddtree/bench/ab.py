"""A/B of SGLang servers with SGLang's own client, `python -m sglang.bench_serving`, one server at a time.

    python -m sglang_ddtree bench ab --out DIR --common "--model-path T --attention-backend triton" \
        --server base="" \
        --server dflash="--speculative-algorithm DFLASH --speculative-draft-model-path D" \
        --server ddtree="--speculative-algorithm DDTREE --speculative-draft-model-path D" \
        --prompts-file sglang_ddtree/engine/models/heldout_prompts.json --concurrency 1 4 16 32

Each server is launched, measured at every concurrency and stopped before the next one starts, so exactly one
server is on the GPU while it is measured. Before every run the server's cache and its speculative counters
are reset (/flush_cache), so the accept length bench_serving reports belongs to that run, and an unrecorded
warm pass at the same concurrency (`--warmup-passes`) keeps first-use costs of a batch size out of the row;
`--repeats N` measures N passes and reports their median (each pass's tok/s kept in the row); with
`--start-all --interleave` the servers take turns pass by pass (drift falls on all alike). `--traffic NAME=ARGS`
(repeatable) measures every server under each traffic, e.g. `greedy=` and `t06=--temperature 0.6 --top-p 0.95`,
in one start (a server start costs about a minute); each row names its traffic. Prompts: a JSON
list (or {"prompts": [...]}) of texts written as a ShareGPT-format file (`--prompts-file`), or random token
ids of a fixed length (`--random-input-len`, needs `--tokenizer`). `--url NAME=URL` measures an already
running server instead; `--merge A.json B.json` joins runs measured in separate calls (same flags, no row
twice). `--profile-concurrency` adds a torch-profiler capture of `--profile-steps` decode rounds under that
load (under every traffic), summarised by sglang_ddtree.bench.trace (kernel list, GPU busy and host gaps);
DIR/ab_profiles.md sets rounds side by side (profile_comparisons).
bench_serving runs in this process through its own `cli_main` (same parser, same code as the CLI; one
SGLang import for every run), or as a subprocess per run with `--client subprocess`. Every server started
here is stopped on exit, SIGTERM included. Writes DIR/ab.json, DIR/ab.md and DIR/ab.png (tok/s and accept length vs concurrency; `--plot-only` redraws it):
the report (merging, table, plot, profile comparisons) is bench/_ab_report.py's; this module runs the servers.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from .. import _cli
from .._cli import output_dir, positive_int
from ._ab_report import (greedy_traffic, markdown, merge, merge_input, paired, plot, profile_comparisons,  # noqa: F401
                         profile_id, row_label, write_outputs)

FIELDS = ("output_throughput", "median_tpot_ms", "p99_tpot_ms", "median_ttft_ms", "p99_ttft_ms",
          "median_itl_ms", "accept_length", "completed", "total_output_tokens", "duration")


def nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number up to 65535, got {value}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


def readable_file(text: str) -> str:
    if not os.path.isfile(text) or not os.access(text, os.R_OK):
        raise argparse.ArgumentTypeError(f"no readable file {text!r}")
    return text


def ab_json(text: str) -> str:
    """An earlier run's ab.json (PATH, or PATH@C,C.. for --merge): the file exists and holds a report's rows."""
    path, _, concs = text.partition("@")
    readable_file(path)
    try:
        with open(path) as f:
            rows = json.load(f).get("rows")
    except (ValueError, AttributeError) as e:
        raise argparse.ArgumentTypeError(f"{path!r} is not an ab.json report ({e})") from None
    if not isinstance(rows, list):
        raise argparse.ArgumentTypeError(f"{path!r} is not an ab.json report (no list of rows)")
    if concs and not all(c.strip().isdigit() for c in concs.split(",")):
        raise argparse.ArgumentTypeError(f"{text!r} is not PATH or PATH@C,C..")
    return text


def named(text: str) -> str:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return text


def traffic(text: str) -> tuple[str, str]:
    """A --traffic NAME=ARGS as (name, flags): the name goes into file names, tags and profile keys, so it is one
    plain word."""
    name, flags = named(text).split("=", 1)
    if not re.fullmatch(r"[\w.-]+", name.strip()):
        raise argparse.ArgumentTypeError(f"a traffic's name is letters, digits, '_', '.' or '-', got {name!r}")
    return name.strip(), flags


def load_prompts(path: str) -> list[str]:
    data = json.load(open(path))
    rows = data["prompts"] if isinstance(data, dict) else data
    return [r["text"] if isinstance(r, dict) else r for r in rows]


def write_sharegpt(prompts: list[str], path: str) -> str:
    """bench_serving's ShareGPT format; the answer text is unused (--sharegpt-output-len fixes the length)."""
    rows = [{"id": str(i), "conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": p}]}
            for i, p in enumerate(prompts)]
    json.dump(rows, open(path, "w"))
    return path


def _post(url: str, payload: dict | None = None, timeout: float = 600):
    body = json.dumps(payload or {}).encode()
    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout).read()


def wait_ready(base: str, proc=None, timeout: float = 900) -> float:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            urllib.request.urlopen(base + "/health_generate", timeout=10)
            return time.time() - t0
        except Exception:  # not up yet: connection refused / 503 while loading
            time.sleep(2)
    raise TimeoutError(base)


def split_args(text: str) -> tuple[dict, list[str]]:
    """Launch arguments; leading K=V words are environment variables for that server."""
    env, words = {}, shlex.split(text)
    while words and "=" in words[0] and not words[0].startswith("-"):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    return env, words


class Server:
    def __init__(self, name: str, args: str, common: str, port: int, log_dir: str, profile_dir: str | None):
        self.name, self.port, self.base = name, port, f"http://127.0.0.1:{port}"
        env_c, common_w = split_args(common)
        env_s, words = split_args(args)
        env = dict(os.environ, **env_c, **env_s)
        if profile_dir:
            env["SGLANG_TORCH_PROFILER_DIR"] = profile_dir
        cmd = [sys.executable, "-m", "sglang.launch_server", *common_w, *words, "--host", "127.0.0.1",
               "--port", str(port)]
        self.cmd = cmd
        self.log = open(os.path.join(log_dir, f"server_{name}.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def stop(self) -> None:
        if self.log.closed:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


_CLIENT_LOCK = threading.Lock()


def on_sigterm(*_):
    """`timeout` sends SIGTERM: unwind so every launched server is stopped (a server left running keeps its port
    and GPU memory and breaks the next run). KeyboardInterrupt, not SystemExit: run_client turns a SystemExit
    (argparse's) into a return code and would go on to the next run, so the timeout would never end the bench."""
    raise KeyboardInterrupt("SIGTERM")


def _client_main():
    """SGLang's own bench_serving entry point (`python -m sglang.bench_serving` runs this cli_main), or None
    where this SGLang has no importable one (then each run is a subprocess)."""
    try:
        from sglang.benchmark.serving import cli_main
    except ImportError:
        return None
    return cli_main


def run_client(argv: list[str], log_path: str, a) -> int:
    """One bench_serving run. In process (`--client inproc`, the default) SGLang's cli_main parses `argv`
    exactly as the CLI does; importing SGLang once instead of per run saves ~25 s a run on the H200 host."""
    main = _client_main() if a.client == "inproc" else None
    if main is None:
        cmd = [sys.executable, "-m", "sglang.bench_serving", *argv]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.run_timeout)
        with open(log_path, "w") as f:
            f.write(" ".join(shlex.quote(c) for c in cmd) + "\n" + r.stdout + r.stderr)
        return r.returncode
    import contextlib
    import traceback

    with _CLIENT_LOCK, open(log_path, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        print("sglang.bench_serving " + " ".join(shlex.quote(c) for c in argv), flush=True)
        old, sys.argv = sys.argv, ["sglang.bench_serving", *argv]
        try:
            main()
            return 0
        except SystemExit as e:  # argparse errors and explicit exits
            return e.code if isinstance(e.code, int) else 1
        except Exception:
            traceback.print_exc(file=f)
            return 1
        finally:
            sys.argv = old


def bench_serving(base: str, conc: int, a, dataset: list[str], out_dir: str, tag: str, warmup: int = 2) -> dict:
    _post(base + "/flush_cache")
    out_file = os.path.join(out_dir, f"bs_{tag}_c{conc}.jsonl")
    n = max(a.num_prompts, a.prompts_per_conc * conc)
    argv = ["--backend", "sglang", "--base-url", base, "--num-prompts", str(n), "--max-concurrency", str(conc),
            "--request-rate", "inf", "--output-file", out_file, "--seed", str(a.seed), "--disable-tqdm",
            "--warmup-requests", str(warmup), *dataset, *shlex.split(a.bench_args)]
    if a.tokenizer:
        argv += ["--tokenizer", a.tokenizer]
    log = os.path.join(out_dir, f"bs_{tag}_c{conc}.log")
    rc = run_client(argv, log, a)
    if (rc != 0 or not os.path.exists(out_file)) and a.client == "inproc":  # once more as the plain CLI
        os.replace(log, log + ".inproc")
        rc = run_client(argv, log, argparse.Namespace(**{**vars(a), "client": "subprocess"}))
    if rc != 0 or not os.path.exists(out_file):
        raise RuntimeError(f"bench_serving failed for {tag} c={conc} (rc {rc}; bs_{tag}_c{conc}.log has its output)")
    res = json.loads(open(out_file).read().strip().splitlines()[-1])
    return {k: res.get(k) for k in FIELDS}


def with_bench_args(a, flags: str):
    """The options of a traffic's passes: its own bench_serving flags after --bench-args'."""
    return argparse.Namespace(**{**vars(a), "bench_args": f"{a.bench_args} {flags}".strip()})


def median_row(runs: list[dict]) -> dict:
    """One row from repeated passes: each field's median (lower middle for an even count), and the passes'
    output tok/s listed so the spread is on record next to it."""
    def med(values):
        v = sorted(x for x in values if x is not None)
        return v[(len(v) - 1) // 2] if v else None
    row = {k: med(r.get(k) for r in runs) for k in FIELDS}
    row["passes_output_throughput"] = [r.get("output_throughput") for r in runs]
    return row


def measured(base: str, conc: int, a, dataset: list[str], out_dir: str, tag: str) -> dict:
    """--repeats measured passes at one concurrency (after the warm pass), as one median row."""
    if a.repeats == 1:
        return bench_serving(base, conc, a, dataset, out_dir, tag)
    return row_of([bench_serving(base, conc, a, dataset, out_dir, f"{tag}_r{i}") for i in range(a.repeats)])


def row_of(runs: list[dict]) -> dict:
    """One pass as it is; several as their median row."""
    return runs[0] if len(runs) == 1 else median_row(runs)


def turns(names: list[str], repeats: int) -> list[list[str]]:
    """--interleave's order of passes: pass r of every server, the order rotated by r, before pass r + 1 of any,
    so drift during the run (other processes, clocks, the host's load) falls on every server alike and no
    server is always measured first."""
    return [names[r % len(names):] + names[:r % len(names)] for r in range(repeats)]


def with_output_len(dataset: list[str], n: int) -> list[str]:
    """The dataset arguments with every output-length flag set to n."""
    out = list(dataset)
    for i, arg in enumerate(out[:-1]):
        if arg in ("--sharegpt-output-len", "--random-output-len"):
            out[i + 1] = str(n)
    return out


def running_and_waiting(base: str) -> tuple[int, int] | None:
    """(requests decoding, requests waiting) from SGLang's /v1/loads (core section), or None where the server
    has no such endpoint."""
    try:
        loads = json.loads(urllib.request.urlopen(base + "/v1/loads?include=core", timeout=5).read())["loads"]
        return sum(int(r["num_running_reqs"]) for r in loads), sum(int(r["num_waiting_reqs"]) for r in loads)
    except Exception:
        return None


def wait_for_wave(base: str, conc: int, timeout: float, poll: float = 0.05) -> float | None:
    """Seconds until all `conc` requests of a profile wave are decoding (none waiting, none in prefill), so a
    capture started now holds decode rounds only; None when the server cannot say or the wave never got there
    (the caller then falls back to a delay). A delay from the load's start was not enough: on 2026-12-04 the
    in-process client spent over a second before sending, and the 8B-shaped capture at 16 requests held the
    whole wave's prefill."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        state = running_and_waiting(base)
        if state is None:
            return None
        if state[0] >= conc and state[1] == 0:
            return time.monotonic() - t0
        time.sleep(poll)
    return None


def profile(base: str, conc: int, a, dataset: list[str], out_dir: str, tag: str, prof_dir: str,
            ttft_s: float = 0.0) -> dict:
    """Capture --profile-steps decode rounds at `conc` and summarise the trace.

    The load is one wave of `conc` requests with --profile-output-len tokens each and no client warm-up, and
    the capture starts once that wave has been prefilled (SGLang's /v1/loads says all `conc` are decoding,
    then --profile-margin; where it cannot say, --profile-delay, at least twice the measured P99 TTFT at this
    concurrency): no request arrives or finishes inside the window, so every captured step is a decode round
    (a window with arrivals mixes prefill GEMMs into the per-round kernel list).
    SGLang answers /start_profile with num_steps only once those steps ran and the trace is written, so
    stacks are off (their export takes minutes), and a capture that has not returned when the load ends
    is stopped explicitly: never a hang."""
    from .trace import summarize_trace

    before = set(glob.glob(os.path.join(prof_dir, "**", "*.json*"), recursive=True))
    wave = argparse.Namespace(**{**vars(a), "num_prompts": conc, "prompts_per_conc": 1})
    long = with_output_len(dataset, a.profile_output_len)
    load = threading.Thread(target=lambda: bench_serving(base, conc, wave, long, out_dir, f"{tag}_prof", warmup=0))
    load.start()
    waited = wait_for_wave(base, conc, a.profile_timeout)
    delay = max(a.profile_delay, 2 * ttft_s + 0.5) if waited is None else a.profile_margin
    time.sleep(delay)
    err = None
    try:
        _post(base + "/start_profile", {"output_dir": prof_dir, "num_steps": a.profile_steps, "with_stack": False,
                                         "activities": ["CPU", "GPU"], "record_shapes": False},
              timeout=a.profile_timeout)
    except Exception as e:  # the load ended first or the export is slow: stop it, keep whatever was written
        err = f"start_profile: {type(e).__name__}: {e}"
        try:
            _post(base + "/stop_profile", timeout=a.profile_timeout)
        except Exception as e2:
            err += f"; stop_profile: {type(e2).__name__}: {e2}"
    load.join(a.run_timeout)
    new = sorted(set(glob.glob(os.path.join(prof_dir, "**", "*.json*"), recursive=True)) - before,
                 key=os.path.getmtime)
    if not new:
        return {"error": err or "no trace written"}
    summary = summarize_trace(new[-1], steps=a.profile_steps)
    when = (f"capture {delay:.1f} s after all {conc} were decoding ({waited:.1f} s after the load began)"
            if waited is not None else f"capture after {delay:.1f} s")
    summary.update(trace=os.path.basename(new[-1]), load=f"{conc} requests x {a.profile_output_len} tokens, {when}")
    if err:
        summary["warning"] = err
    return summary


def main(argv=None) -> int:
    ap = _cli.Parser(prog=_cli.prog("bench", "ab"), description=__doc__.split("\n")[0])
    ap.add_argument("--server", type=named, action="append", default=[], metavar="NAME=ARGS",
                    help="launch and measure")
    ap.add_argument("--url", type=named, action="append", default=[], metavar="NAME=URL",
                    help="measure a running server")
    ap.add_argument("--common", default="", help="launch arguments shared by every --server")
    ap.add_argument("--concurrency", type=positive_int, nargs="+", default=[1, 4, 16, 32],
                    help="client concurrencies measured, each a row")
    ap.add_argument("--num-prompts", type=positive_int, default=64, help="prompts per measured pass (at least)")
    ap.add_argument("--prompts-per-conc", type=positive_int, default=4, help="at least this many prompts per slot")
    ap.add_argument("--output-len", type=positive_int, default=64, help="output tokens per request")
    ap.add_argument("--prompts-file", type=readable_file,
                    help="JSON list of prompt texts (sent as a ShareGPT-format file)")
    ap.add_argument("--random-input-len", nargs="+", metavar="LEN[@C,C..]",
                    help="random prompts of LEN tokens instead (several lengths allowed; @C,C.. gives that length "
                         "its own concurrencies, else --concurrency)")
    ap.add_argument("--tokenizer", help="tokenizer path for bench_serving (random prompts need one)")
    ap.add_argument("--seed", type=int, default=0, help="bench_serving's seed (prompt order, random prompts)")
    ap.add_argument("--bench-args", default="", help="more bench_serving flags for every run, e.g. sampled traffic: "
                    "'--temperature 1.0' or '--temperature 0.6 --top-p 0.95' (before a --traffic's own)")
    ap.add_argument("--traffic", type=traffic, action="append", default=[], metavar="NAME=ARGS",
                    help="repeatable: measure (and profile) every server under each traffic, ARGS its own "
                         "bench_serving flags (e.g. greedy= t06='--temperature 0.6 --top-p 0.95'); each server is "
                         "started once for all of them; rows name their traffic")
    ap.add_argument("--port", type=port, default=31100, help="first port of the launched servers")
    ap.add_argument("--start-timeout", type=seconds, default=600, help="seconds a server may take to come up")
    ap.add_argument("--run-timeout", type=seconds, default=600, help="seconds one bench_serving pass may take")
    ap.add_argument("--start-all", action="store_true",
                    help="start every --server at once (saves start-up time); each is still measured alone, "
                         "and every server gets --sleep-on-idle (an idle SGLang scheduler otherwise busy-polls "
                         "a CPU core, which a host-bound server under test competes with)")
    ap.add_argument("--interleave", action="store_true",
                    help="with --start-all: at each concurrency the servers take turns, one pass each, "
                         "--repeats times (rotating who goes first), instead of all of one server's passes in "
                         "a row; each pass still has one server under load")
    ap.add_argument("--profile-concurrency", type=positive_int, nargs="*", default=[],
                    help="concurrencies at which to capture a torch-profiler trace of decode rounds")
    ap.add_argument("--profile-steps", type=positive_int, default=20, help="decode rounds per profile capture")
    ap.add_argument("--profile-margin", type=float, default=0.2,
                    help="seconds between the whole profile wave decoding (SGLang's /v1/loads) and the capture")
    ap.add_argument("--profile-delay", type=float, default=1.0,
                    help="where the server has no /v1/loads: seconds from the load's start to the capture (at "
                         "least 2x the measured P99 TTFT + 0.5 s)")
    ap.add_argument("--profile-output-len", type=positive_int, default=512,
                    help="tokens per request of the profile load (its wave must outlast the capture)")
    ap.add_argument("--profile-timeout", type=seconds, default=120, help="seconds a profile capture may take")
    ap.add_argument("--warmup-passes", type=nonnegative_int, default=1,
                    help="unrecorded bench_serving passes at each concurrency before the measured one")
    ap.add_argument("--repeats", type=positive_int, default=1,
                    help="measured passes per concurrency; the row is their median (their tok/s listed)")
    ap.add_argument("--client", choices=("inproc", "subprocess"), default="inproc",
                    help="run SGLang's bench_serving in this process (one import) or as a subprocess per run")
    ap.add_argument("--out", type=output_dir, required=True, help="report folder (created; checked before any run)")
    ap.add_argument("--plot-only", type=ab_json, metavar="AB_JSON", help="only draw DIR/ab.png from an earlier run's ab.json")
    ap.add_argument("--merge", type=ab_json, nargs="+", metavar="AB_JSON[@C,C..]",
                    help="only join earlier runs' ab.json (e.g. concurrencies measured in separate calls) into "
                         "DIR/ab.json, ab.md and ab.png; every row keeps the run it came from; @C,C.. takes only "
                         "those concurrencies from that run")
    a = ap.parse_args(argv)
    if a.plot_only:
        os.makedirs(a.out, exist_ok=True)
        return 0 if plot(json.load(open(a.plot_only))["rows"], os.path.join(a.out, "ab.png")) else 1
    if a.merge:
        report = merge([merge_input(item) for item in a.merge])
        os.makedirs(a.out, exist_ok=True)
        json.dump(report, open(os.path.join(a.out, "ab.json"), "w"), indent=1)
        write_outputs(report, a.out)
        return 0
    if not a.server and not a.url:
        ap.error("give at least one --server or --url")
    if a.interleave and not a.start_all:
        ap.error("--interleave needs --start-all (the servers take turns, so all must be up)")
    if a.start_all:
        a.common = f"{a.common} --sleep-on-idle"
    if (a.prompts_file is None) == (a.random_input_len is None):
        ap.error("give exactly one of --prompts-file and --random-input-len")
    os.makedirs(a.out, exist_ok=True)
    workloads = []  # (label, dataset args, concurrencies)
    if a.prompts_file:
        path = write_sharegpt(load_prompts(a.prompts_file), os.path.join(a.out, "prompts_sharegpt.json"))
        workloads.append((None, ["--dataset-name", "sharegpt", "--dataset-path", path, "--sharegpt-output-len",
                                 str(a.output_len)], a.concurrency))
    else:
        if not a.tokenizer:
            ap.error("--random-input-len needs --tokenizer")
        for item in a.random_input_len:
            length, _, concs = item.partition("@")
            try:
                cs = [int(c) for c in concs.split(",")] if concs else a.concurrency
                workloads.append((int(length), ["--dataset-name", "random-ids", "--random-input-len", length,
                                                "--random-output-len", str(a.output_len), "--random-range-ratio",
                                                "1.0", "--tokenize-prompt"], cs))
            except ValueError:
                ap.error(f"--random-input-len: {item!r} is not LEN or LEN@C,C..")
    if len(dict(a.traffic)) < len(a.traffic):
        ap.error("--traffic: a name given twice")
    traffics = [(t, with_bench_args(a, flags)) for t, flags in a.traffic] or [(None, a)]  # none: as before traffics
    loads = [(t, ta, length, dataset, c) for t, ta in traffics for length, dataset, concs in workloads for c in concs]
    client = "python -m sglang.bench_serving" + (" (its cli_main, in process)" if a.client == "inproc" else "")
    report = {"client": client, "output_len": a.output_len, "warmup_passes": a.warmup_passes, "repeats": a.repeats,
              "bench_args": a.bench_args,
              "workloads": [{"input_len": n, "dataset": d, "concurrency": c} for n, d, c in workloads],
              "concurrency": a.concurrency, "one_server_at_a_time": True, "common": a.common, "servers": {},
              "rows": [], "profiles": {}}
    if a.traffic:
        report["traffics"] = dict(a.traffic)
    targets = [(n, v, False) for n, v in (s.split("=", 1) for s in a.server)]
    targets += [(n, v, True) for n, v in (s.split("=", 1) for s in a.url)]
    prof_root = tempfile.mkdtemp(prefix="ab_prof_")

    def launch(i, name, spec):
        prof_dir = os.path.join(prof_root, name)
        os.makedirs(prof_dir, exist_ok=True)
        return Server(name, spec, a.common, a.port + i, a.out, prof_dir if a.profile_concurrency else None)

    signal.signal(signal.SIGTERM, on_sigterm)
    early = {}  # --start-all: every server starts now (in parallel); each is still measured alone, the rest idle
    if a.start_all:
        early = {name: launch(i, name, spec) for i, (name, spec, running) in enumerate(targets) if not running}
        report["one_server_at_a_time"] = "measured one at a time; the other servers were up and idle"
    def tag_of(name, t, length):  # names the pass's files: one per server, traffic and input length
        return name + (f"@{t}" if t else "") + ("" if length is None else f"_in{length}")

    def add_row(name, t, length, c, row):  # written at once: a call cut short keeps every finished row
        report["rows"].append({"server": name, "traffic": t, "input_len": length, "concurrency": c, **row})
        json.dump(report, open(os.path.join(a.out, "ab.json"), "w"), indent=1)
        print(f"[ab] {tag_of(name, t, length)} c={c}: {row['output_throughput']:.1f} tok/s, TPOT "
              f"{row['median_tpot_ms']:.3f} ms, accept {row['accept_length']}", flush=True)

    def warm_up(base, tag, c, ta, dataset):
        warm = argparse.Namespace(**{**vars(ta), "num_prompts": 2 * c, "prompts_per_conc": 2})
        for w in range(a.warmup_passes):  # a batch size's first use (graphs, JIT) stays out
            bench_serving(base, c, warm, dataset, a.out, f"{tag}_warm{w}")

    def profiles(name, base):  # one per traffic and concurrency, its load under that traffic's flags
        length, dataset, _ = workloads[0]
        for t, ta in traffics:
            for c in a.profile_concurrency:
                ttft = [r["p99_ttft_ms"] or 0 for r in report["rows"] if r["server"] == name
                        and r["traffic"] == t and r["input_len"] == length and r["concurrency"] == c]
                key = f"{tag_of(name, t, None)}_c{c}"
                report["profiles"][key] = {**profile(base, c, ta, dataset, a.out, key, os.path.join(prof_root, name),
                                                     ttft_s=(ttft[0] if ttft else 0) / 1e3),
                                           "server": name, "traffic": t, "concurrency": c}

    def failed(name, e):  # one server failing must not lose the others' rows: recorded, reported
        report["servers"].setdefault(name, {})["error"] = f"{type(e).__name__}: {e}"
        print(f"[ab] {name} FAILED: {e}", flush=True)

    def ready(name, spec, running, srv):
        if running:
            report["servers"][name] = {"url": spec.rstrip("/")}
            return spec.rstrip("/")
        t = wait_ready(srv.base, srv.proc, a.start_timeout)
        report["servers"][name] = {"args": spec, "start_s": round(t, 1)}
        print(f"[ab] {name} ready", flush=True)
        return srv.base

    try:
        if a.interleave:
            report["one_server_at_a_time"] += "; the servers took turns, one pass each (--interleave)"
            bases = {}
            for name, spec, running in targets:
                try:
                    bases[name] = ready(name, spec, running, early.get(name))
                except Exception as e:
                    failed(name, e)
            for t, ta, length, dataset, c in loads:
                passes = {}
                for name in list(bases):
                    try:
                        warm_up(bases[name], tag_of(name, t, length), c, ta, dataset)
                        passes[name] = []
                    except Exception as e:
                        failed(name, e)
                        bases.pop(name)
                for r, order in enumerate(turns(list(passes), a.repeats)):
                    for name in order:
                        if name not in bases:
                            continue
                        try:
                            passes[name].append(bench_serving(bases[name], c, ta, dataset, a.out,
                                                              f"{tag_of(name, t, length)}_r{r}"))
                        except Exception as e:
                            failed(name, e)
                            bases.pop(name)
                for name, runs in passes.items():
                    if name in bases:
                        add_row(name, t, length, c, row_of(runs))
                json.dump(report, open(os.path.join(a.out, "ab.json"), "w"), indent=1)
            for name, base in bases.items():
                try:
                    profiles(name, base)
                except Exception as e:
                    failed(name, e)
            json.dump(report, open(os.path.join(a.out, "ab.json"), "w"), indent=1)
        for i, (name, spec, running) in enumerate([] if a.interleave else targets):
            srv = None
            try:
                srv = None if running else early.get(name) or launch(i, name, spec)
                base = ready(name, spec, running, srv)
                for t, ta, length, dataset, c in loads:
                    warm_up(base, tag_of(name, t, length), c, ta, dataset)
                    add_row(name, t, length, c, measured(base, c, ta, dataset, a.out, tag_of(name, t, length)))
                profiles(name, base)
            except Exception as e:
                failed(name, e)
            finally:
                if srv is not None:
                    srv.stop()
            json.dump(report, open(os.path.join(a.out, "ab.json"), "w"), indent=1)
    finally:
        for srv in early.values():
            srv.stop()
    write_outputs(report, a.out)
    return 0 if all("error" not in s for s in report["servers"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
