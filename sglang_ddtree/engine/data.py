"""Training text and held-out prompts: the Python standard library's own source files.

Every machine with Python has them, so the tiny models can be retrained anywhere. Files are split by a
hash of their path (stable across machines and Python versions): 1 in 8 is held out. The held-out
prompts used by the demo and the tests are shipped (models/heldout_prompts.json) so they do not depend
on which Python version a machine has.
"""
from __future__ import annotations

import hashlib
import json
import os
import sysconfig

SKIP_DIRS = {"test", "tests", "idlelib", "turtledemo", "ensurepip", "lib2to3", "site-packages",
             "dist-packages", "__pycache__", "config-3"}
MODELS_DIR = os.path.join(os.path.dirname(__file__), "models")
PROMPTS_FILE = os.path.join(MODELS_DIR, "heldout_prompts.json")
PAIRS = {"qwen3": ("tiny-target", "tiny-dflash"), "mla": ("tiny-mla-target", "tiny-mla-dflash")}  # under MODELS_DIR
# the commands' longest continuation, and why (the error a larger one gets says it)
MAX_NEW_TOKENS = 1024
MAX_NEW_TOKENS_WHY = "the shipped targets were trained on 256-token windows: longer runs only cost time"


def stdlib_files(root: str | None = None) -> list[str]:
    """Sorted relative paths of the stdlib's .py files, tests and vendored tools excluded."""
    root = root or sysconfig.get_paths()["stdlib"]
    out = []
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        parts = [] if rel == "." else rel.split(os.sep)
        if any(p in SKIP_DIRS or p.startswith("config-") for p in parts):
            dirs[:] = []
            continue
        out += [os.path.normpath(os.path.join(rel, f)) for f in files if f.endswith(".py")]
    return sorted(out)


def is_heldout(relpath: str) -> bool:
    return hashlib.sha256(relpath.replace(os.sep, "/").encode()).digest()[0] % 8 == 0


def split(root: str | None = None) -> tuple[list[str], list[str]]:
    files = stdlib_files(root)
    return [f for f in files if not is_heldout(f)], [f for f in files if is_heldout(f)]


def read(relpath: str, root: str | None = None) -> bytes:
    root = root or sysconfig.get_paths()["stdlib"]
    with open(os.path.join(root, relpath), "rb") as f:
        return f.read()


def make_prompts(files: list[str], per_file: int = 6, min_bytes: int = 96, max_bytes: int = 320,
                 root: str | None = None) -> list[dict]:
    """Prompts = consecutive lines (>= min_bytes, ASCII) at evenly spaced lines of each file, the last line cut
    in half."""
    out = []
    for rel in files:
        lines = read(rel, root).decode("utf-8", errors="replace").splitlines(keepends=True)
        if len(lines) < 20:
            continue
        for k in range(per_file):
            start = (k * len(lines)) // per_file
            text, end = "", start
            while end < len(lines) and len(text) < min_bytes:
                text += lines[end]
                end += 1
            # end mid-line (half of the last line kept), so a continuation starts with content
            last = text[:-1].rsplit("\n", 1)[-1] if text.endswith("\n") else ""
            text = text[:len(text) - 1 - len(last) + max(1, len(last) // 2)]
            if min_bytes <= len(text) <= max_bytes and text.isascii() and text.strip():
                out.append({"file": rel.replace(os.sep, "/"), "line": start + 1, "text": text})
    return out


def heldout_prompts(n: int | None = None) -> list[str]:
    """The shipped held-out prompts (first n)."""
    with open(PROMPTS_FILE) as f:
        prompts = [p["text"] for p in json.load(f)["prompts"]]
    return prompts[:n] if n else prompts
