"""The engine's tools, apart from its runtime (sglang_ddtree/engine/): the demo, training the shipped tiny pairs and
the DFlash2 selector, fitting the calibration, the budget sweep. Each runs as `python -m sglang_ddtree COMMAND`
(sglang_ddtree/__main__.py lists them); nothing in the runtime or the plugin imports them."""
