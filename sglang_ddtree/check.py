"""`python -m sglang_ddtree.check` (forwards to sglang_ddtree.sglang.check)."""
import sys

from .sglang.check import main

if __name__ == "__main__":
    sys.exit(main())
