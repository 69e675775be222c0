"""Real SGLang 0.5.23 servers on the CPU, started for the served tests and shared by them.

Each server is `python -m sglang.launch_server` (DDTree through `python -m sglang_ddtree.launch_server`, the
documented entry point) on the shipped tiny pair, in float32 on SGLang's torch_native backend, in its own process
group; a server is started when a test first asks for it and stays up for the session (at most MAX_UP at a time:
the least recently used one stops first), so tests that share a server pay its start once. DDTree and the plain
server run on the unpatched test install plus `.deps/cpu-site` (the sgl_kernel and torchvision stand-ins any CPU
install needs); stock DFLASH, the baseline, on the patched copy `.deps/sgl-0.5.23-dflash`
(scripts/build_cpu_sglang.sh, patches/0.5.23/cpu/README.md).
"""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEPS = os.path.join(ROOT, ".deps")
SITE = os.path.join(DEPS, "cpu-site")
SGLANG = os.path.join(DEPS, "sgl-0.5.23")
SGLANG_DFLASH = os.path.join(DEPS, "sgl-0.5.23-dflash")
SGLANG_0517 = os.path.join(DEPS, "sgl-0.5.17")
SITES = {SGLANG_0517: SITE + "-0.5.17"}  # the CPU site of an install (0.5.23's by default)
MODELS = os.path.join(ROOT, "sglang_ddtree", "engine", "models")
TARGET, DRAFTER = os.path.join(MODELS, "tiny-target"), os.path.join(MODELS, "tiny-dflash")
DRAFTER2 = os.path.join(MODELS, "tiny-dflash2")  # tiny-dflash's backbone plus a trained candidate selector
CONTEXT = 1024  # --context-length: the context-limit test fills it
MAX_UP = 4  # each server is ~2 GB of processes (launcher, scheduler, detokenizer)
STICKY = ("plain", "ddtree")  # most tests compare against these two: stopped last
START_TIMEOUT = 300

# --decode-log-interval 1: the accept length a server reports (/server_info, what bench_serving prints) adds up only
# the decode steps its stats log has closed, one every interval (default 40): a short run would report none or a
# prefix of its steps.
# --sleep-on-idle: an idle scheduler otherwise polls without pause, most of a core each (23.5 CPU s in 30 idle s,
# 0.34 with it), and the servers kept up would starve the one under test on a 2-core machine
COMMON = ["--model-path", TARGET, "--device", "cpu", "--dtype", "float32", "--attention-backend", "torch_native",
          "--disable-cuda-graph", "--max-total-tokens", "16384", "--max-running-requests", "64",
          "--context-length", str(CONTEXT), "--random-seed", "0", "--sleep-on-idle", "--host", "127.0.0.1",
          "--log-level", "warning", "--decode-log-interval", "1"]
DDTREE = ["--speculative-draft-model-path", DRAFTER]
DFLASH = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", DRAFTER,
          "--speculative-draft-attention-backend", "torch_native"]

MAKE = "make"  # a server's launcher named so is a make target of the repository's Makefile, run in its root

# name -> (launcher module, extra flags, extra environment, SGLang install)
SERVERS = {
    "plain": ("sglang.launch_server", [], {}, SGLANG),
    "plain_sync": ("sglang.launch_server", ["--disable-overlap-schedule"], {}, SGLANG),
    "dflash": ("sglang.launch_server", DFLASH, {}, SGLANG_DFLASH),
    "ddtree": ("sglang_ddtree.launch_server", DDTREE, {}, SGLANG),  # the default flags
    "ddtree_b7": ("sglang_ddtree.launch_server", DDTREE + ["--speculative-ddtree-budget", "7"], {}, SGLANG),
    "ddtree_auto": ("sglang_ddtree.launch_server", DDTREE + ["--speculative-ddtree-budget", "auto"], {}, SGLANG),
    # the paper's tree, keys and verify (no anchor, the raw draft: at T = 1 a sampled request's law keys are the
    # paper's; the top candidates, each node verified by the target's own draw)
    "ddtree_paper": ("sglang_ddtree.launch_server", DDTREE,
                     {"SGLANG_DDTREE_ANCHOR": "none", "SGLANG_DDTREE_CALIBRATION": "off",
                      "SGLANG_DDTREE_CHILDREN": "top"}, SGLANG),
    # the pool small enough that 64 long streams force retraction; hidden states enabled, so a request can ask for them
    "ddtree_edge": ("sglang_ddtree.launch_server", DDTREE + ["--max-total-tokens", "3000",
                                                              "--enable-return-hidden-states"], {}, SGLANG),
    # tensor parallelism over gloo, one core a rank, every round's tree and plan hashed across the ranks
    "ddtree_tp2": ("sglang_ddtree.launch_server", DDTREE + ["--tp-size", "2"],
                   {"SGLANG_CPU_OMP_THREADS_BIND": "0|1", "SGLANG_DDTREE_TP_CHECK": "1"}, SGLANG),
    # the DFlash2 drafter (SGLang 0.5.23): DDTree's default (greedy requests over its selector's lattice, sampled
    # ones over its backbone's marginals), the lattice and the marginals for every request, and stock DFLASH's
    # selector walk (the baseline)
    "ddtree_dflash2": ("sglang_ddtree.launch_server", ["--speculative-draft-model-path", DRAFTER2], {}, SGLANG),
    "ddtree_dflash2_lattice": ("sglang_ddtree.launch_server", ["--speculative-draft-model-path", DRAFTER2],
                               {"SGLANG_DDTREE_SELECTOR": "lattice"}, SGLANG),
    "ddtree_dflash2_marginals": ("sglang_ddtree.launch_server", ["--speculative-draft-model-path", DRAFTER2],
                                 {"SGLANG_DDTREE_SELECTOR": "marginals"}, SGLANG),
    "dflash_dflash2": ("sglang.launch_server", [DFLASH[0], DFLASH[1], DFLASH[2], DRAFTER2, *DFLASH[4:]], {},
                       SGLANG_DFLASH),
    # SGLang 0.5.17 (the release served on the H200), unpatched too
    "plain_0517": ("sglang.launch_server", [], {}, SGLANG_0517),
    "ddtree_0517": ("sglang_ddtree.launch_server", DDTREE, {}, SGLANG_0517),
    # the README's CPU server, started as the README starts it: `make serve-cpu` (its own flags, not COMMON)
    "serve_cpu": (MAKE, ["serve-cpu"], {}, SGLANG),
}


def missing() -> str | None:
    """Why servers cannot start here (None: they can)."""
    for path, what in ((SGLANG, "SGLang 0.5.23's test install (make sglang-deps)"),
                       (SGLANG_0517, "SGLang 0.5.17's test install (make sglang-deps)"),
                       (SITE, "the CPU site (make sglang-deps)"), (SITES[SGLANG_0517], "0.5.17's CPU site"),
                       (SGLANG_DFLASH, "the DFLASH copy (make sglang-deps)")):
        if not os.path.isdir(path):
            return f"no {what} at {path}"
    return None


PORTS = range(12000, 22000)  # below SGLang's own later-bound ports (22000-29999) and the kernel's ephemeral range


def _free_port() -> int:
    """A free port for a server's HTTP side, which it binds only minutes later: not from the ephemeral range, where
    any socket's connect() (a TP worker's gloo, a health check) may take it meanwhile (a TP 2 server once failed to
    bind its port so), nor from the range SGLang draws its workers' ports from."""
    for port in random.sample(PORTS, 64):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS.start}..{PORTS.stop - 1}")


class PortTaken(RuntimeError):
    """The server could not bind its port (taken after it was chosen): start it again on another."""


def environment(install: str, extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(PYTHONPATH=os.pathsep.join([SITES.get(install, SITE), install, ROOT]), SGLANG_USE_CPU_ENGINE="1",
               PYTHONUNBUFFERED="1", **(extra or {}))
    for name in [k for k in env if k.startswith("SGLANG_DDTREE_")]:  # a test's knobs come only from `extra`
        if name not in (extra or {}) and name != "SGLANG_DDTREE_REQUIRE_SERVED":
            del env[name]
    return env


class Server:
    def __init__(self, name: str, logdir: str):
        self.name = name
        self.module, flags, self.env, self.install = SERVERS[name]
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = os.path.join(logdir, f"{name}-{self.port}.log")  # a restarted server keeps its crash log
        self.argv = [sys.executable, "-m", self.module, *COMMON, *flags, "--port", str(self.port)]
        if self.module == MAKE:  # this Python's environment, the make target's flags and the port
            self.argv = [MAKE, "--no-print-directory", *flags, f"PY={sys.executable}", f"PORT={self.port}"]
        self.proc = None

    def start(self) -> None:
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                         env=environment(self.install, self.env), start_new_session=True)

    def wait(self, timeout: float = START_TIMEOUT) -> None:
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server {self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                urllib.request.urlopen(self.url + "/health_generate", timeout=30)
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                if "address already in use" in self.tail():  # its HTTP server gave up; the process lives on
                    raise PortTaken(f"server {self.name}: port {self.port} taken:\n{self.tail()}")
                time.sleep(1)
        raise RuntimeError(f"server {self.name} did not answer within {timeout} s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return "".join(line for line in f.readlines() if "server_args=" not in line)[-6000:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of the server's processes so far: how long it would keep a quiet machine's
        cores busy, whatever else shares them (the suite's cost on CI is judged from this, not from wall time)."""
        import psutil

        try:
            procs = [psutil.Process(self.proc.pid)]
            procs += procs[0].children(recursive=True)
        except psutil.Error:
            return 0.0
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def stop(self) -> None:
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self.proc = None


class Fleet:
    """The session's servers by name (module docstring)."""

    def __init__(self):
        self.logdir = tempfile.mkdtemp(prefix="served-")
        self.up: dict[str, Server] = {}  # in order of last use
        self.spent: dict[str, list] = {}  # name -> [starts, CPU seconds of its processes]

    def url(self, name: str) -> str:
        return self.server(name).url

    def _stop(self, name: str) -> None:
        srv = self.up.pop(name)
        cost = self.spent.setdefault(name, [0, 0.0])
        cost[1] += srv.cpu_seconds()
        srv.stop()

    def _make_room(self, starting: int = 1) -> None:
        """Stop servers until `starting` more fit: the least recently used first, the sticky ones last."""
        while self.up and len(self.up) + starting > MAX_UP:
            order = sorted(self.up, key=lambda n: n in STICKY)  # stable: least recently used first within each
            self._stop(order[0])

    def server(self, name: str) -> Server:
        srv = self.up.pop(name, None)
        if srv is None or not srv.alive():
            self._make_room()
            for attempt in range(3):
                srv = Server(name, self.logdir)
                srv.start()
                try:
                    srv.wait()
                    break
                except PortTaken:
                    srv.stop()
                    if attempt == 2:
                        raise
            self.spent.setdefault(name, [0, 0.0])[0] += 1
        self.up[name] = srv
        return srv

    def stop_all(self) -> None:
        for name in list(self.up):
            self._stop(name)

    def report(self) -> str:
        """Starts and CPU seconds per server (what the suite costs a quiet machine)."""
        rows = [f"{n}: {k} start(s), {t:.0f} CPU s" for n, (k, t) in sorted(self.spent.items())]
        total = sum(t for _, t in self.spent.values())
        return f"served servers: {total:.0f} CPU s in all ({'; '.join(rows)})"


# --- the client --------------------------------------------------------------------------------------------------
def post(base: str, payload: dict, path: str = "/generate", timeout: float = 600):
    """The JSON answer, or {'error': status, 'body': text} for an HTTP error."""
    req = urllib.request.Request(base + path, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    try:
        return json.loads(urllib.request.urlopen(req, timeout=timeout).read())
    except urllib.error.HTTPError as e:
        return {"error": e.code, "body": e.read().decode(errors="replace")[:600]}


def healthy(base: str) -> bool:
    try:
        urllib.request.urlopen(base + "/health_generate", timeout=120)
        return True
    except Exception:  # noqa: BLE001 — any failure to answer is unhealthy
        return False


def generate(base: str, prompt, sampling: dict, **extra):
    payload = {"sampling_params": sampling, **extra}
    payload["input_ids" if isinstance(prompt, list) else "text"] = prompt
    return post(base, payload)


def generate_many(base: str, prompts, sampling: dict, concurrency: int = 16, **extra) -> list:
    import concurrent.futures as cf

    with cf.ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(lambda p: generate(base, p, sampling, **extra), prompts))
