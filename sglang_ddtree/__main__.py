"""`python -m sglang_ddtree COMMAND`: demo (the standalone engine on the shipped tiny models), check (is
the SGLang plugin visible), bench (benchmarks)."""
import importlib
import sys

COMMANDS = {
    "demo": ("sglang_ddtree.engine.demo", "AR vs DFlash chain vs DDTree on the shipped tiny models"),
    "check": ("sglang_ddtree.sglang.check", "does SGLang see --speculative-algorithm ddtree, and if not why"),
    "bench": ("sglang_ddtree.bench.__main__", "benchmarks: python -m sglang_ddtree bench NAME"),
}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        lines = "\n".join(f"  {name:6s} {help_}" for name, (_, help_) in COMMANDS.items())
        print(f"usage: python -m sglang_ddtree COMMAND [options]\n{lines}")
        return 2
    name, rest = argv[0], argv[1:]
    if name == "bench":
        sys.argv = ["sglang_ddtree.bench", *rest]
        importlib.import_module("sglang_ddtree.bench.__main__")
        return 0
    return importlib.import_module(COMMANDS[name][0]).main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
