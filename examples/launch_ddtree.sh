#!/usr/bin/env bash
# Serve Qwen3-8B with DDTree speculative decoding (its DFlash drafter, block 16) on one GPU.
#   pip install "sglang==0.5.17" && pip install .     # in this checkout (not on PyPI yet); the plugin registers
#                                                     # itself with SGLang (docs/SERVING.md)
#   bash examples/launch_ddtree.sh                    # then: python examples/client_chat.py
# BUDGET: tree nodes verified per round (>= block size − 1 = 15; the verify width is BUDGET + 1), or auto (the
# default): chosen every round for the batch among 15, 31 and 63.
set -euo pipefail
MODEL=${MODEL:-Qwen/Qwen3-8B}
DRAFT=${DRAFT:-z-lab/Qwen3-8B-DFlash-b16}
BUDGET=${BUDGET:-auto}
PORT=${PORT:-30000}
python -m sglang_ddtree.check   # says whether SGLang sees the DDTREE algorithm, and if not why
exec python -m sglang_ddtree.launch_server \
  --model-path "$MODEL" \
  --speculative-draft-model-path "$DRAFT" \
  --speculative-ddtree-budget "$BUDGET" \
  --attention-backend triton \
  --max-running-requests 32 \
  --port "$PORT" "$@"
# Without the wrapper (plain SGLang entry points), the same server is:
#   SGLANG_DDTREE_BUDGET=$BUDGET python -m sglang.launch_server --model-path $MODEL \
#     --speculative-algorithm ddtree --speculative-draft-model-path $DRAFT --attention-backend triton
# or, for a numeric BUDGET, --speculative-num-draft-tokens $((BUDGET + 1)) instead of the environment variable.
