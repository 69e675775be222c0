"""`python -m sglang_ddtree COMMAND`: every command-line entry point of the package, listed in one place so
`--help` shows them all. `COMMAND --help` for each; `--version` prints the package's version."""
import importlib
import sys

from ._cli import PROG

# name: (module whose main(argv) runs it, one line of help). Each also runs as `python -m MODULE`.
COMMANDS = {
    "demo": ("sglang_ddtree.tools.demo", "DDTree (the served default) vs the DFlash chain vs AR on the shipped tiny "
                                          "models, CPU or GPU"),
    "check": ("sglang_ddtree.sglang.check", "does SGLang see --speculative-algorithm ddtree, and if not why"),
    "launch_server": ("sglang_ddtree.sglang.launch_server", "SGLang's launch_server with the plugin loaded and the "
                                                             "DDTree flags (--speculative-ddtree-budget ...)"),
    "bench": ("sglang_ddtree.bench.__main__", "the benchmarks, one per module of sglang_ddtree/bench/ (`bench --help` "
                                             "lists them)"),
    "calibration": ("sglang_ddtree.tools.calibrate", "fit and check the drafter's per-depth temperatures"),
    "train": ("sglang_ddtree.tools.train", "retrain the shipped tiny model pairs (deterministic, CPU)"),
    "train_selector": ("sglang_ddtree.tools.train_selector", "retrain the shipped tiny DFlash2 drafter's candidate "
                                                              "selector (deterministic, CPU)"),
}


# earlier names of a command, still run: the command they became
ALIASES = {"budget": ("bench", "budget_sweep")}


def version() -> str:
    from . import __version__

    return __version__


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = "\n".join(f"  {name:{width}s}  {help_}" for name, (_, help_) in COMMANDS.items())
    return (f"usage: {PROG} COMMAND [options]   (COMMAND --help for its options; --version)\n\ncommands:\n{lines}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv and argv[0] == "--version":
        print(f"sglang-ddtree {version()}")
        return 0
    if argv and argv[0] in ALIASES:
        argv = [*ALIASES[argv[0]], *argv[1:]]
    if not argv or argv[0] not in COMMANDS:
        given = f"unknown command {argv[0]!r}" if argv else "no command given"
        sys.stderr.write(f"{PROG}: error: {given}; choose from {', '.join(COMMANDS)} (--help says what each does)\n")
        return 2
    name, rest = argv[0], argv[1:]
    return importlib.import_module(COMMANDS[name][0]).main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
