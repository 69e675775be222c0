# The two commands a fresh machine needs: `make demo` (the main job) and `make test` (the CI suite).
PY ?= python3
PIP = $(PY) -m pip
DEPS = .deps
# One install for both commands (`install`: the package with its pinned `test` extra). SGLang itself is installed
# without its GPU dependencies (CPU tests of the plugin); the wheels are cp312-only, so each release goes into
# its own --target folder.
SGL_WHEEL = --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_34_x86_64
SGL_LIGHT_DEPS = aiohttp dill ipython msgspec orjson pillow psutil pybase64 pydantic pyzmq requests starlette tqdm \
  triton "apache-tvm-ffi==0.1.11" "sentencepiece==0.2.1" compressed_tensors gguf \
  "openai==2.8.0" partial-json-parser einops setproctitle uvicorn fastapi
# what a running 0.5.23 server imports beyond those (the served tests start real CPU servers)
SGL_SERVE_DEPS = uvloop prometheus-client python-multipart watchfiles xxhash zstandard interegular jsonschema \
  soundfile "xgrammar==0.2.7" datasets
PYTEST = $(PY) -m pytest -q -p no:cacheprovider

.PHONY: install sglang-deps no-hub-kernels demo test test-core serve-cpu bench-tree gpu-bundle gpu-fa3 gpu-fi-aot
install:
	$(INSTALL_PACKAGE)

# torch and transformers are held at the releases `install` put in place while SGLang's light dependencies
# install (some depend on them; unpinned, pip would replace the CPU torch with a multi-GB CUDA one, and a newer
# transformers pulls in `kernels`, which SGLang 0.5.17's transformers cannot import). The transformers pin lives
# in one place: pyproject.toml's `test` extra.
TORCH_PIN = torch==$$($(PY) -c "import torch; print(torch.__version__.split('+')[0])")
TRANSFORMERS_PIN = transformers==$$($(PY) -c "import importlib.metadata as m; print(m.version('transformers'))")

# The light dependencies go into the running Python's environment, so their stamp names that environment (a fresh
# venv in an old checkout installs them again); the --target folders are the same for every environment.
ENV_ID := $(shell $(PY) -c "import hashlib, sys; print(hashlib.sha1(sys.prefix.encode()).hexdigest()[:10])")
# ... and the list itself: an environment made before a dependency was added gets it
LIGHT_ID := $(shell echo '$(SGL_LIGHT_DEPS) $(SGL_SERVE_DEPS)' | sha1sum | cut -c1-8)

# The package installed once per environment (`serve-cpu` starts without reinstalling): the stamp is remade when
# pyproject.toml changes, when the environment is made anew (its pyvenv.cfg), or when the environment lost the package
INSTALLED = $(DEPS)/installed-$(ENV_ID).stamp
define INSTALL_PACKAGE
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test,bench]'
	mkdir -p $(DEPS) && touch $(INSTALLED)
endef
VENV_CFG := $(wildcard $(shell $(PY) -c "import sys; print(sys.prefix)")/pyvenv.cfg)
ifneq ($(shell $(PY) -I -c "import importlib.util as u; print(u.find_spec('sglang_ddtree') is not None)" 2>/dev/null),True)
$(shell rm -f $(INSTALLED))
endif
$(INSTALLED): pyproject.toml $(VENV_CFG)
	$(INSTALL_PACKAGE)

$(DEPS)/light-$(ENV_ID)-$(LIGHT_ID).stamp: | $(INSTALLED)
	$(PIP) install -q $(SGL_LIGHT_DEPS) $(SGL_SERVE_DEPS) "$(TORCH_PIN)" "$(TRANSFORMERS_PIN)"
	mkdir -p $(DEPS) && touch $@

$(DEPS)/sglang.stamp:
	$(PIP) install -q $(SGL_WHEEL) --target $(DEPS)/sgl-0.5.23 sglang==0.5.23
	$(PIP) install -q $(SGL_WHEEL) --target $(DEPS)/sgl-0.5.17 sglang==0.5.17
	$(PIP) install -q --no-deps --target $(DEPS)/sgl-0.5.17 transformers==5.12.1 tokenizers==0.22.2 \
	  "huggingface-hub>=1.5,<2" xgrammar==0.2.1
	touch $@

# SGLang 0.5.23 on the CPU (scripts/build_cpu_sglang.sh): the CPU site any install needs there, and the copy patched
# for stock DFLASH; remade when a patch or the stand-ins change
$(DEPS)/cpu-sglang.stamp: $(DEPS)/sglang.stamp scripts/build_cpu_sglang.sh $(wildcard patches/0.5.23/cpu/*.diff) \
  patches/0.5.23/cpu/sgl_kernel/__init__.py tests/sglang/torchvision_stub.py
	bash scripts/build_cpu_sglang.sh $(DEPS)/sgl-0.5.23 $(DEPS)
	touch $@

sglang-deps: $(DEPS)/light-$(ENV_ID)-$(LIGHT_ID).stamp $(DEPS)/sglang.stamp $(DEPS)/cpu-sglang.stamp

demo: install
	$(PY) -m sglang_ddtree demo

# An environment that an older install left with `kernels` (pulled in by transformers newer than the pin) fails
# SGLang 0.5.17's collection with "Either a revision or a version must be specified": say so first.
no-hub-kernels:
	@$(PY) -c "import importlib.metadata as m, sys; names = {(d.metadata['Name'] or '').lower() for d in m.distributions()}; \
	  sys.exit('kernels' in names and 'make test: the kernels package is installed and SGLang 0.5.17 transformers' \
	  ' cannot import with it: pip uninstall -y kernels')"

# Everything (plugin tests against sglang 0.5.23, the served tests on real CPU servers), then the plugin tests again
# against 0.5.17.
test: install sglang-deps no-hub-kernels
	PYTHONPATH=$(DEPS)/sgl-0.5.23 $(PYTEST)
	PYTHONPATH=$(DEPS)/sgl-0.5.17 $(PYTEST) tests/sglang

# A DDTree server on this CPU: the shipped tiny pair on SGLang 0.5.23's CPU engine (PORT, default 30000)
PORT ?= 30000
MODELS = sglang_ddtree/engine/models
serve-cpu: $(INSTALLED) sglang-deps
	SGLANG_USE_CPU_ENGINE=1 PYTHONPATH=$(DEPS)/cpu-site:$(DEPS)/sgl-0.5.23 $(PY) -m sglang_ddtree.launch_server \
	  --model-path $(MODELS)/tiny-target --speculative-draft-model-path $(MODELS)/tiny-dflash --device cpu \
	  --dtype float32 --max-total-tokens 20000 --sleep-on-idle --port $(PORT)

# The suite without SGLang installed (the plugin tests skip).
test-core: install
	$(PYTEST)

bench-tree: install
	$(PY) -m sglang_ddtree.bench tree --out docs/benchmarks

# SGLang 0.5.17 bundle for the H200 (ignored folder .sgl, carried by scripts/gpu_check.sh runs); gpu-fa3 adds
# sgl_kernel's FA3 library (its head dim 128 bf16 sm_90 kernels, .sgl/fa3), gpu-fi-aot FlashInfer's modules built
# with nvcc here (.sgl/fi-aot.tar.xz, ~17 min on 2 cores)
gpu-bundle:
	bash scripts/build_sglang_bundle.sh .sgl lean

gpu-fa3:
	$(PY) -m pip install -q zstandard
	bash scripts/build_fa3_parts.sh

gpu-fi-aot:
	bash scripts/build_fi_aot.sh
