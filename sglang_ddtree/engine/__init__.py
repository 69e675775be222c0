"""Standalone DDTree decoding: a Qwen3 or DeepSeek-V3 (MLA) target, a DFlash drafter (no SGLang needed).

    from sglang_ddtree.engine import Engine
    engine = Engine.from_pretrained()                      # the shipped tiny pair, CPU or GPU
    engine = Engine.from_pretrained(pair="mla")            # the shipped tiny MLA pair
    out = engine.generate(["def parse(line):\n"], 64, method="ddtree", budget=32)
"""
from .engine import Engine, GenerationResult, summarize

__all__ = ["Engine", "GenerationResult", "summarize"]
