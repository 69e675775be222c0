"""The shipped tiny DFlash2 drafter (engine/models/tiny-dflash2) is a checkpoint SGLang 0.5.23 serves: its own config
parsing reads the selector's fields, its `DFlash2DraftModel` builds from the config and its `load_weights` fills
every parameter from the file, and its selector gives the project's lattice (engine/dflash2.py) on the same
hidden states: the same candidates, the same scores, the same greedy walk. 0.5.17 has no DFlash2 (skipped)."""
import json
import os

import pytest
import torch
from conftest import FIXTURES

from sglang_ddtree.engine import dflash2 as D2
from sglang_ddtree.engine.checkpoint import load_drafter, load_safetensors, load_target
from sglang_ddtree.engine.data import MODELS_DIR, PAIRS

TARGET_DIR, DRAFTER_DIR = (os.path.join(MODELS_DIR, d) for d in PAIRS["dflash2"])


@pytest.fixture(scope="module")
def sglang_drafter(sglang_release):
    """SGLang's DFlash2DraftModel of the shipped checkpoint, built and loaded by SGLang's own code on the CPU."""
    from sglang_ddtree.sglang.adapters import releases

    if not releases.supports("selector"):
        pytest.skip(f"SGLang {sglang_release} has no DFlash2 drafter")
    from sglang.srt import runtime_context as rc
    from sglang.srt.layers.rotary_embedding import base as rope_base
    from sglang.srt.model_loader.weight_utils import safetensors_weights_iterator
    from sglang.srt.models.dflash import DFlash2DraftModel
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils.hf_transformers_utils import get_config

    mp = pytest.MonkeyPatch()
    for name in ("_server_args", "_config_bags", "_publish_role"):  # the parallel context the layers read
        if hasattr(rc._CONTEXT, name):
            mp.setattr(rc._CONTEXT, name, getattr(rc._CONTEXT, name))
    mp.setattr(rope_base, "_is_cpu", True)  # SGLang's CPU engine's rope (no CUDA kernel to pick here)
    try:
        sa = prepare_server_args(["--model-path", os.path.join(FIXTURES, "tiny_target"), "--device", "cuda",
                                  "--skip-tokenizer-init", "--speculative-algorithm", "DFLASH",
                                  "--speculative-draft-model-path", os.path.join(FIXTURES, "tiny_drafter")])
        if hasattr(sa, "resolve_once"):
            sa.resolve_once()
        rc.publish(sa, role="test")
        cfg = get_config(DRAFTER_DIR, trust_remote_code=False)
        model = DFlash2DraftModel(cfg)
        model.load_weights(safetensors_weights_iterator([os.path.join(DRAFTER_DIR, "model.safetensors")]))
        yield cfg, model.eval()
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def ours():
    return load_target(TARGET_DIR), load_drafter(DRAFTER_DIR)


def test_sglang_parses_the_selector_config(sglang_drafter, ours):
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

    cfg, _ = sglang_drafter
    parsed = parse_dflash_draft_config(draft_hf_config=cfg)
    with open(os.path.join(DRAFTER_DIR, "config.json")) as f:
        shipped = json.load(f)
    assert shipped["architectures"] == ["DFlash2DraftModel"]
    assert parsed.selector_rank == shipped["dflash_config"]["selector_rank"] > 0
    assert parsed.selector_top_k == shipped["dflash_config"]["selector_top_k"] == ours[1].candidate_selector.top_k
    assert parsed.block_size == ours[1].config.block_size and parsed.mask_token_id == ours[1].config.mask_token_id
    assert parsed.output_multiplier == 1.0 and parsed.final_logit_softcapping is None


def test_sglang_loads_every_parameter_from_the_file(sglang_drafter):
    """SGLang's load_weights skips names it does not know, so each of its parameters is compared with the file
    (fused projections as SGLang stacks them): none is left at its initial value."""
    _, model = sglang_drafter
    file = load_safetensors(os.path.join(DRAFTER_DIR, "model.safetensors"))
    fused = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
    seen = 0
    for name, param in model.named_parameters():
        parts = name.rsplit(".", 2)
        if len(parts) == 3 and parts[1] in fused:
            want = torch.cat([file[f"{parts[0]}.{p}.{parts[2]}"] for p in fused[parts[1]]])
        else:
            want = file[name]
        assert torch.equal(param.detach().float(), want.float()), name
        seen += 1
    selector = [n for n in file if n.startswith("candidate_selector.")]
    assert sorted(selector) == ["candidate_selector.hidden_projection.weight",
                                "candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook"]
    assert all(file[n].abs().sum() > 0 for n in selector)
    assert seen == len(dict(model.named_parameters())) > 20


class _Head(torch.nn.Module):
    """The target's lm_head as SGLang's candidate_topk reads one: a dense weight and its vocabulary."""

    def __init__(self, weight):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.org_vocab_size = weight.shape[0]


def _hidden(B=6, seed=0):
    """Drafter-like hidden states [B, L, H] (unit RMS, as the drafter's final norm leaves them) and roots [B]."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, 7, 128, generator=g), torch.randint(0, 256, (B,), generator=g)


def test_sglang_lattice_equals_the_projects(sglang_drafter, ours):
    _, model = sglang_drafter
    target, drafter = ours
    was = torch._dynamo.config.disable
    torch._dynamo.config.disable = True  # SGLang's compiled edge scorer, run as written (no C++ compiler needed)
    try:
        model.lm_head = _Head(target.lm_head.weight.detach().clone())
        h, roots = _hidden()
        B, L, H = h.shape
        with torch.no_grad():
            ids, unary = model.compute_candidates(h.reshape(B * L, H))
            scores = model.candidate_selector.build_lattice(candidate_ids=ids.view(B, L, -1),
                                                            unary_logits=unary.view(B, L, -1), hidden_states=h,
                                                            anchor_token_ids=roots)
            our_ids, our_scores = drafter.lattice(h, target.lm_head(h), roots, "cpu")
        assert torch.equal(ids.view(B, L, -1), our_ids)
        torch.testing.assert_close(scores, our_scores, rtol=1e-5, atol=1e-5)
        # the selector's greedy walk: SGLang's sample_path picks what the project's walk picks
        K = our_ids.shape[-1]
        tokens, q = model.candidate_selector.sample_path(
            candidate_ids=our_ids, scores=our_scores, uniforms=torch.rand(B, L), temperatures=torch.ones(B),
            greedy_mask=torch.ones(B, dtype=torch.bool))
        path, our_q = D2.walk(our_scores, torch.zeros(B), torch.arange(B), torch.zeros(B, dtype=torch.int64))
        assert torch.equal(tokens, our_ids.gather(-1, path.unsqueeze(-1)).squeeze(-1))
        assert torch.equal(q, our_q) and our_q.shape == (B, L, K)
    finally:
        torch._dynamo.config.disable = was


@pytest.mark.parametrize("lattice_sampled", [True, False], ids=["lattice", "auto"])
@pytest.mark.parametrize("anchor", [None, "chain"])
def test_the_served_draft_head_builds_the_engines_lattice_tree(sglang_drafter, ours, anchor, lattice_sampled):
    """The server's draft head over SGLang's own selector (adapters.v0_5_23.Selector: its unary transform and
    build_lattice) builds the lattice tree (tree.build_tree_from_lattice over the engine's lattice, one request at a
    time) from the same drafter hidden states: the
    same nodes, tokens, parents and keys, for greedy rows (keys at T = 1, the anchor applied) and, with
    SGLANG_DDTREE_SELECTOR=lattice, sampled rows at their own temperatures (no anchor) in one batch. With `auto`
    (the default) a sampled row's tree is instead the marginals' (the head without a selector, the same row's)."""
    from sglang_ddtree.round import RoundOps
    from sglang_ddtree.sampling import NodeLaw
    from sglang_ddtree.sglang.adapters.v0_5_23 import Selector
    from sglang_ddtree.sglang.draft_head import DraftTreeHead
    from sglang_ddtree.tree import build_tree_from_lattice

    _, model = sglang_drafter
    target, drafter = ours
    was = torch._dynamo.config.disable
    torch._dynamo.config.disable = True
    try:
        weight = target.lm_head.weight.detach().clone()
        B, block, budget = 6, 8, 31
        g = torch.Generator().manual_seed(4)
        hidden = torch.randn(B, block, 128, generator=g)
        roots, prefix = torch.randint(0, 256, (B,), generator=g), torch.randint(5, 60, (B,), generator=g)
        temps = torch.tensor([0.0, 1.0, 0.6, 0.0, 1.3, 0.8])
        law = NodeLaw(temps, torch.where(temps == 0, 1, 0), torch.ones(B), torch.zeros(B))
        made = lambda **kw: DraftTreeHead(weight=weight, num_org=weight.shape[0], block_size=block, budget=budget,  # noqa: E731
                                          topk=None, max_bs=B, ops=RoundOps("cpu", "cpu"), tree_in_graph=False,
                                          anchor=anchor, **kw)
        head = made(selector=Selector(model), lattice_sampled=lattice_sampled)
        with torch.no_grad():
            got = head.build(hidden.reshape(B * block, -1), B, roots, prefix, law)
            marginal = made().build(hidden.reshape(B * block, -1), B, roots, prefix, law)
            h = hidden[:, 1:]
            ids, scores = drafter.lattice(h, h @ weight.T, roots, "cpu")
            want = [build_tree_from_lattice(ids[b:b + 1], scores[b:b + 1], budget, temperature=temps[b:b + 1],
                                            root_tokens=roots[b:b + 1], seq_lens=prefix[b:b + 1],
                                            anchor=anchor if temps[b] == 0 else None) for b in range(B)]
        assert (head.keys_out is None) == lattice_sampled
        for b, w in enumerate(want):
            if not lattice_sampled and temps[b] > 0:
                for name, t in marginal.tensors().items():
                    assert torch.equal(getattr(got, name)[b], t[b]), (b, name)
                continue
            n = int(w.num_nodes[0])
            assert int(got.num_nodes[b]) == n == budget + 1, b
            assert torch.equal(got.tokens[b, :n], w.tokens[0, :n]), b
            assert torch.equal(got.parents[b, :n], w.parents[0, :n]), b
            torch.testing.assert_close(got.logw[b, :n], w.logw[0, :n], rtol=1e-5, atol=1e-5)
    finally:
        torch._dynamo.config.disable = was
