"""`python -m sglang_ddtree COMMAND`: demo (the standalone engine on the shipped tiny models), check (is
the SGLang plugin visible), bench (benchmarks). `COMMAND --help` for each."""
import importlib
import sys

COMMANDS = {
    "demo": ("sglang_ddtree.engine.demo", "AR vs DFlash chain vs DDTree on the shipped tiny models"),
    "check": ("sglang_ddtree.sglang.check", "does SGLang see --speculative-algorithm ddtree, and if not why"),
    "bench": ("sglang_ddtree.bench.__main__", "benchmarks: python -m sglang_ddtree bench NAME"),
}


def usage() -> str:
    lines = "\n".join(f"  {name:6s} {help_}" for name, (_, help_) in COMMANDS.items())
    return f"usage: python -m sglang_ddtree COMMAND [options]   (COMMAND --help for its options)\n{lines}"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if not argv or argv[0] not in COMMANDS:
        given = f"unknown command {argv[0]!r}" if argv else "no command given"
        sys.stderr.write(f"python -m sglang_ddtree: error: {given}\n{usage()}\n")
        return 2
    name, rest = argv[0], argv[1:]
    return importlib.import_module(COMMANDS[name][0]).main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
