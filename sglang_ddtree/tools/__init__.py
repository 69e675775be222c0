"""The engine's tools, apart from its runtime (sglang_ddtree/engine/): the demo, training the shipped tiny pairs and
the DFlash2 selector, fitting the calibration, each run as `python -m sglang_ddtree COMMAND` (sglang_ddtree/__main__.py
lists them), and the tiny pair inflated to larger shapes (inflate_pair, `python scripts/inflate_pair.py`). Nothing in
the runtime or the plugin imports them; the benchmarks are sglang_ddtree/bench/'s."""
