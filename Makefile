# The two commands a fresh machine needs: `make demo` (the main job) and `make test` (the CI suite).
PY ?= python3
PIP = $(PY) -m pip

.PHONY: install demo test bench-tree gpu-bundle
install:
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test,bench,engine]'

demo: install
	$(PY) -m sglang_ddtree demo

test: install
	$(PY) -m pytest -q -p no:cacheprovider

bench-tree: install
	$(PY) -m sglang_ddtree.bench tree --out docs/benchmarks

# SGLang 0.5.17 bundle for the H200 (ignored folder .sgl, carried by scripts/gpu_check.sh runs)
gpu-bundle:
	bash scripts/build_sglang_bundle.sh .sgl lean
