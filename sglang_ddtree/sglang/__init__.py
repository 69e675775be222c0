"""The SGLang plugin: `--speculative-algorithm ddtree` on SGLang's DFlash machinery.

plugin.register() is SGLang's entry point (group `sglang.srt.plugins`); spec_algo.py answers SGLang's
algorithm predicates; settings.py declares the SGLANG_DDTREE_* settings; args.py maps and validates server
arguments; worker.py runs the decode round from the project's shared ops; adapters/ is the only place that imports
SGLang or reads its objects (adapters/hooks.py keeps the tree mask in captured verify graphs); check.py explains
what SGLang sees.
"""
