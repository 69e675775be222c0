"""Regenerate patches/<release>/*.diff from an unpacked sglang (usage: python scripts/sglang_make_patches.py SITE).

Each patch is the upstream form of a run-time fix the plugin applies (spec_algo.py, adapters/hooks.py); paths are
those of the sglang git repository (python/sglang/...). tests/sglang/test_sglang_patches.py checks they
apply to the installed sglang.
"""
import difflib
import os
import sys

SPEC_METHODS = '''
    def carries_draft_hidden_states(self) -> bool:
        return False

    def need_topk(self) -> bool:
        return False

    def get_platform_worker_cls(self) -> Optional[type]:
        return None

    def create_future_map(
        self,
        device: torch.device,
        req_to_token_pool,
        needs_cpu_seq_lens: bool = True,
        needs_confidence_relay: bool = False,
    ) -> FutureMap:
        from sglang.srt.managers.overlap_utils import FutureMap

        return FutureMap(
            device,
            self,
            req_to_token_pool,
            needs_cpu_seq_lens,
            needs_confidence_relay,
        )
'''

POLICY_OLD = '''def resolve_dflash_verify_mask_policy(attn_backend: Any) -> tuple[str, bool]:
'''
POLICY_NEW = '''def resolve_dflash_verify_mask_policy(
    attn_backend: Any, spec_algorithm: Any = None
) -> tuple[str, bool]:
'''
POLICY_RET_OLD = '''    return backend_name, (backend_name not in _DFLASH_VERIFY_SKIP_CUSTOM_MASK_BACKENDS)
'''
POLICY_RET_NEW = '''    if spec_algorithm is not None and not (
        spec_algorithm.is_dflash() or spec_algorithm.is_dspark()
    ):
        # Plugin DFlash-family algorithms may verify a tree: graphs captured
        # without the mask would ignore it at replay.
        return backend_name, True
    return backend_name, (backend_name not in _DFLASH_VERIFY_SKIP_CUSTOM_MASK_BACKENDS)
'''
CALLER_OLD = '''            _, build_custom_mask = resolve_dflash_verify_mask_policy(
                self.model_runner.attn_backend
            )
'''
CALLER_NEW = '''            _, build_custom_mask = resolve_dflash_verify_mask_policy(
                self.model_runner.attn_backend, self.model_runner.spec_algorithm
            )
'''


def edit(text, old, new, what):
    if text.count(old) != 1:
        raise SystemExit(f"{what}: anchor found {text.count(old)} times")
    return text.replace(old, new)


def udiff(rel, before, after):
    path = "python/" + rel
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        "a/" + path, "b/" + path, n=3))


def main(site):
    dist = [d for d in os.listdir(site) if d.startswith("sglang-") and d.endswith(".dist-info")]
    version = dist[0][len("sglang-"):-len(".dist-info")].split(".post")[0]
    rel_dir = os.path.join(os.path.dirname(__file__), "..", "patches", version)
    os.makedirs(rel_dir, exist_ok=True)
    read = lambda rel: open(os.path.join(site, rel)).read()

    reg = "sglang/srt/speculative/spec_registry.py"
    src = read(reg)
    anchor = "    def handle_server_args(self, server_args: ServerArgs) -> None:\n"
    new = edit(src, anchor, SPEC_METHODS.lstrip("\n") + "\n" + anchor, reg)
    if "from typing import" in new and "Optional" not in new.split("from typing import")[1].split("\n")[0]:
        raise SystemExit("spec_registry: Optional not imported")
    header = ("CustomSpecAlgo lacks methods the scheduler calls on every speculative algorithm\n"
              "(carries_draft_hidden_states in init_disaggregation, create_future_map in init_overlap,\n"
              "need_topk in FutureMap, get_platform_worker_cls in adaptive spec): a plugin algorithm\n"
              "without them dies with AttributeError at start-up. Give them the defaults of a plain algorithm.\n\n")
    open(os.path.join(rel_dir, "0001-custom-spec-algo-missing-methods.diff"), "w").write(header + udiff(reg, src, new))

    utils = "sglang/srt/speculative/dflash_utils.py"
    runner = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"
    u0, r0 = read(utils), read(runner)
    u1 = edit(edit(u0, POLICY_OLD, POLICY_NEW, utils), POLICY_RET_OLD, POLICY_RET_NEW, utils)
    r1 = edit(r0, CALLER_OLD, CALLER_NEW, runner)
    header = ("DFlash-family verify graphs are captured without a custom mask on flashinfer/fa3/triton,\n"
              "so a plugin algorithm in the DFlash family that verifies a tree (DDTREE) gets graphs that\n"
              "ignore its tree mask at replay. Capture the mask for non-builtin DFlash-family algorithms.\n\n")
    open(os.path.join(rel_dir, "0002-dflash-verify-mask-policy-for-plugins.diff"), "w").write(
        header + udiff(utils, u0, u1) + udiff(runner, r0, r1))
    print("wrote", sorted(os.listdir(rel_dir)))


if __name__ == "__main__":
    main(sys.argv[1])
