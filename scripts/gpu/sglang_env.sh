# Sourced by the SGLang GPU steps: SGLang 0.5.17 from the carried bundle (.sgl/, `make gpu-bundle`), the
# plugin's entry point, a `datasets` stub for sglang.bench_serving (it imports `datasets` at import time; the
# lean bundle has none and our prompts are local files), the tiny pair's paths and the common server flags.
# a server left by an earlier step (killed by its timeout) would hold its port and GPU memory
pkill -f "sglang.launch_server" 2>/dev/null && sleep 5
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch_ext} FLASHINFER_WORKSPACE_BASE=/tmp/fi
_x() { python3 -c "import sys,tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='fully_trusted')" "$1" "$2"; }
[ -f /tmp/site/.done ] || { mkdir -p /tmp/site && _x .sgl/sgl-bundle.tar.xz /tmp/site && touch /tmp/site/.done; }
[ -f /tmp/site_pin/.done ] || { mkdir -p /tmp/site_pin && _x .sgl/tf-pin.tar.xz /tmp/site_pin && touch /tmp/site_pin/.done; }
EP=/tmp/ddtree_ep/sglang_ddtree-0.1.0.dist-info; mkdir -p "$EP"
printf 'Metadata-Version: 2.1\nName: sglang-ddtree\nVersion: 0.1.0\n' > "$EP/METADATA"
printf '[sglang.srt.plugins]\nddtree = sglang_ddtree.sglang.plugin:register\n' > "$EP/entry_points.txt"
mkdir -p /tmp/stubs/datasets
printf 'def load_dataset(*a, **k):\n    raise RuntimeError("datasets stub: pass a local --dataset-path")\n' > /tmp/stubs/datasets/__init__.py
export PYTHONPATH=/tmp/site_pin:/tmp/site:$PWD:/tmp/ddtree_ep:/tmp/stubs
python3 -c "from sglang_ddtree import _build; _build.load_cuda()" >/dev/null 2>&1 || echo "ops build FAILED"
TARGET=$PWD/sglang_ddtree/engine/models/tiny-target
DRAFTER=$PWD/sglang_ddtree/engine/models/tiny-dflash
HELDOUT=$PWD/sglang_ddtree/engine/models/heldout_prompts.json
TINY_COMMON="--model-path $TARGET --attention-backend triton --sampling-backend pytorch --grammar-backend none
 --mem-fraction-static 0.75 --max-total-tokens 65536 --cuda-graph-bs 1 2 4 8 16 32 --disable-prefill-cuda-graph
 --max-running-requests 32 --random-seed 0"
DFLASH_ARGS="--speculative-algorithm DFLASH --speculative-draft-model-path $DRAFTER"
DDTREE_AUTO_ARGS="--speculative-algorithm DDTREE --speculative-draft-model-path $DRAFTER"  # with SGLANG_DDTREE_BUDGET=auto
ddtree_args() { echo "--speculative-algorithm DDTREE --speculative-draft-model-path $DRAFTER --speculative-num-draft-tokens $(( $1 + 1 ))"; }
