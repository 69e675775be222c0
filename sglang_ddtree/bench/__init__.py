"""Benchmarks: `python -m sglang_ddtree.bench NAME [args]` runs sglang_ddtree/bench/NAME.py:main(argv)."""
