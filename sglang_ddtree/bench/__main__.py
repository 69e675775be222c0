import importlib
import pkgutil
import sys

from . import __path__ as _path

names = sorted(m.name for m in pkgutil.iter_modules(_path) if m.name not in ("baseline", "common"))
if len(sys.argv) < 2 or sys.argv[1] not in names:
    sys.exit(f"usage: python -m sglang_ddtree.bench {{{','.join(names)}}} [options]   (NAME --help for each)")
sys.exit(importlib.import_module(f"sglang_ddtree.bench.{sys.argv[1]}").main(sys.argv[2:]))
