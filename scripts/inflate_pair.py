"""`python scripts/inflate_pair.py --out DIR [...]`: the shipped tiny pair zero-padded to larger (by default Qwen3-8B)
shapes, same function (docs/inflated-pair.md). The tool is sglang_ddtree/tools/inflate_pair.py (also
`python -m sglang_ddtree.tools.inflate_pair`); this entry keeps the command line the GPU steps (scripts/gpu/62, 70)
and the docs give."""
import sys

from sglang_ddtree.tools.inflate_pair import main

if __name__ == "__main__":
    sys.exit(main())
