"""`python -m sglang_ddtree.bench NAME [options]` runs sglang_ddtree/bench/NAME.py:main(argv)."""
import importlib
import pkgutil
import sys

from .. import _cli
from . import __path__ as _path

HELPERS = ("baseline", "common", "trace")  # shared code of the benchmarks, not benchmarks


def names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(_path) if not m.name.startswith("_") and m.name not in HELPERS)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    usage = f"usage: {_cli.prog('bench')} {{{','.join(names())}}} [options]   (NAME --help for each)"
    if argv and argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    if not argv or argv[0] not in names():
        given = f"unknown benchmark {argv[0]!r}" if argv else "no benchmark named"
        sys.stderr.write(f"{_cli.prog('bench')}: error: {given}; choose from {', '.join(names())} "
                         "(NAME --help for each)\n")
        return 2
    return importlib.import_module(f"sglang_ddtree.bench.{argv[0]}").main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
