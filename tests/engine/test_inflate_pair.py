"""sglang_ddtree/tools/inflate_pair.py (run as scripts/inflate_pair.py): the shipped tiny pair zero-padded to larger
shapes computes the tiny pair's function.

Expected values come from the shipped tiny pair itself (the engine's own models on the original checkpoints),
never from the script: the engine's greedy tokens and accept lengths are the tiny pair's, the logits agree to
float64 rounding, and every padded-vocabulary logit sits at least 100 below the best real one. Small inflations
(head dim 32 -> 64, more heads per kv head, copied kv heads, identity layers, padded vocabulary) stand in for
Qwen3-8B's shapes, which the same code writes on a GPU machine.
"""
import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch

from sglang_ddtree.engine import Engine
from sglang_ddtree.engine import model as engine_model
from sglang_ddtree.engine.checkpoint import load_safetensors
from sglang_ddtree.engine.data import MODELS_DIR, heldout_prompts
from sglang_ddtree.engine.dflash import DFlashConfig, DFlashDraftModel
from sglang_ddtree.engine.model import Qwen3Config, Qwen3ForCausalLM

ROOT = Path(__file__).resolve().parents[2]
inflate = importlib.import_module("sglang_ddtree.tools.inflate_pair")

TINY_T, TINY_D = os.path.join(MODELS_DIR, "tiny-target"), os.path.join(MODELS_DIR, "tiny-dflash")
TINY_V = 259
MARGIN = 100.0  # the script's promise: padded logits at least this far below every real logit
SHAPES = {
    # head dim 32 -> 64 (rope frequencies spread by 2), 4 query heads per kv head (tiny: 2), one identity layer
    # in each model, an extra drafter feature, 100 padded tokens
    "gqa": dict(hidden=256, layers=5, heads=8, kv_heads=2, head_dim=64, intermediate=512, vocab=359, draft_layers=3,
                draft_features=4),
    # head dim kept, one query head per kv head (each tiny kv head copied twice), two identity target layers
    "mha": dict(hidden=160, layers=6, heads=6, kv_heads=6, head_dim=32, intermediate=400, vocab=300, draft_layers=2,
                draft_features=3),
}
N_PROMPTS, MAX_NEW = 8, 40


def argv(shape: dict, out) -> list[str]:
    args = ["--out", str(out), "--device", "cpu", "--dtype", "float64", "--shard-mb", "2"]
    for k, v in shape.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    return args


@pytest.fixture(scope="module", params=sorted(SHAPES))
def pair(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param) / "pair"
    assert inflate.main(argv(SHAPES[request.param], out)) == 0
    return request.param, out


def state(folder: str) -> dict:
    sd = {}
    for fn in sorted(os.listdir(folder)):
        if fn.endswith(".safetensors"):
            sd.update({k: v.double() for k, v in load_safetensors(os.path.join(folder, fn)).items()})
    return sd


def float64_pair(target_dir: str, draft_dir: str):
    """The engine's models with the checkpoints' float64 weights as stored (the engine's loader rounds through
    float32, which would hide a 1e-7 error in the identities)."""
    t = Qwen3ForCausalLM(Qwen3Config.load(target_dir)).double().eval()
    t.load_state_dict(state(target_dir))
    d = DFlashDraftModel(DFlashConfig.load(draft_dir)).double().eval()
    d.load_state_dict({k.removeprefix("model."): v for k, v in state(draft_dir).items()})
    return t, d


def rms_norm_float64(self, x):
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def forward(target, drafter, ids, ctx_len):
    """Target logits on ids [B, T] and the drafter's logits for the block [ids[ctx_len], MASK ...] after the
    first ctx_len tokens' features (non-causal over context + block, as the engine drafts)."""
    B, T = ids.shape
    pos = torch.arange(T).expand(B, -1)
    logits, feats = target(ids, pos, capture=tuple(drafter.config.target_layer_ids))
    bs = drafter.config.block_size
    kv = drafter.context_kv(feats[:, :ctx_len], pos[:, :ctx_len])
    block = torch.cat([ids[:, ctx_len:ctx_len + 1], torch.full((B, bs - 1), drafter.config.mask_token_id)], 1)
    bpos = ctx_len + torch.arange(bs).expand(B, -1)
    h = drafter(target.embed(block), bpos, torch.ones(B, bs, ctx_len + bs, dtype=torch.bool), prefix_kv=kv)
    return logits, target.lm_head(h)


def compare(pair_dir, monkeypatch, ids, ctx_len=40):
    """max |big - tiny| over real-vocabulary logits (target, drafter) and the largest padded-minus-best-real."""
    monkeypatch.setattr(engine_model.RMSNorm, "forward", rms_norm_float64)
    tiny = float64_pair(TINY_T, TINY_D)
    big = float64_pair(str(pair_dir / "target"), str(pair_dir / "dflash"))
    with torch.no_grad():
        want = forward(*tiny, ids, ctx_len)
        got = forward(*big, ids, ctx_len)
    diff = max(float((g[..., :TINY_V] - w).abs().max()) for g, w in zip(got, want))
    pad_gap = max(float((g[..., TINY_V:].max(-1).values - g[..., :TINY_V].max(-1).values).max()) for g in got)
    return diff, pad_gap


def prompt_ids(n=4, length=64):
    from sglang_ddtree.engine.tokenizer import ByteTokenizer

    tok = ByteTokenizer.from_dir(TINY_T)
    return torch.tensor([tok.encode(p)[:length] for p in heldout_prompts(n)])


def test_float64_logits_are_the_tiny_pairs(pair, monkeypatch):
    """Target and drafter logits on held-out text equal the tiny pair's to float64 rounding: the norm, eps,
    attention-scale, rope and head-group identities are exact, not approximate."""
    diff, pad_gap = compare(pair[1], monkeypatch, prompt_ids())
    assert diff < 1e-10, diff
    assert pad_gap < -MARGIN, pad_gap


def test_padded_vocabulary_stays_out_on_any_input(pair, monkeypatch):
    """Random ids over the whole inflated vocabulary, padded ids included as input: every padded logit stays
    far below the best real one, in the target and in the drafter."""
    V = SHAPES[pair[0]]["vocab"]
    ids = torch.randint(0, V, (3, 56), generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(engine_model.RMSNorm, "forward", rms_norm_float64)
    big = float64_pair(str(pair[1] / "target"), str(pair[1] / "dflash"))
    with torch.no_grad():
        for logits in forward(*big, ids, 40):
            gap = logits[..., TINY_V:].max(-1).values - logits[..., :TINY_V].max(-1).values
            assert float(gap.max()) < -MARGIN, float(gap.max())


def test_wrong_rope_placement_is_caught(tmp_path, monkeypatch):
    """The check above can fail: tiny head dims placed first (frequencies not matched) change the logits."""
    monkeypatch.setattr(inflate, "rope_place", lambda d, D: torch.arange(d))
    assert inflate.main(argv(SHAPES["gqa"], tmp_path / "pair")) == 0
    diff, _ = compare(tmp_path / "pair", monkeypatch, prompt_ids(2))
    assert diff > 1e-2, diff


_tiny_runs: dict = {}


def generate(engine, method):
    rounds = []
    out = engine.generate(heldout_prompts(N_PROMPTS), MAX_NEW, method=method, budget=32 if method == "ddtree" else None,
                          on_round=lambda logits, budget, nodes: rounds.append(logits.clone()), paper=True)
    return out, rounds


@pytest.mark.parametrize("method", ["ddtree", "chain"])
def test_engine_greedy_tokens_and_accept_lengths_are_the_tiny_pairs(pair, method):
    """Engine.from_pretrained on the written folders (sharded files, index, copied tokenizer): greedy DDTree and
    chain decoding give the tiny pair's tokens and its accept length in every round of every request."""
    if method not in _tiny_runs:
        _tiny_runs[method] = generate(Engine.from_pretrained(device="cpu", dtype=torch.float64), method)
    want, want_rounds = _tiny_runs[method]
    big = Engine.from_pretrained(str(pair[1] / "target"), str(pair[1] / "dflash"), device="cpu", dtype=torch.float64)
    got, got_rounds = generate(big, method)
    assert [r.token_ids for r in got] == [r.token_ids for r in want]
    assert [r.accept_lengths for r in got] == [r.accept_lengths for r in want]
    assert sum(map(sum, (r.accept_lengths for r in want))) > 2 * sum(r.rounds for r in want)  # real acceptance
    assert len(got_rounds) == len(want_rounds)
    for g, w in zip(got_rounds, want_rounds):  # float32-rounded weights (the engine's loader): close, not equal
        assert float((g[..., :TINY_V] - w).abs().max()) < 1e-4
        assert float((g[..., TINY_V:].max(-1).values - w.max(-1).values).max()) < -MARGIN


def test_written_folders(pair):
    """Configs with the asked shapes and the tiny drafter's block and mask token; features after existing target
    layers (SGLang captures before layer id + 1), increasing; a complete shard index; tokenizer, generation
    config and drafter calibration copied unchanged."""
    name, out = pair
    s = SHAPES[name]
    t = json.loads((out / "target" / "config.json").read_text())
    d = json.loads((out / "dflash" / "config.json").read_text())
    tiny_d = json.loads(Path(TINY_D, "config.json").read_text())
    for cfg in (t, d):
        assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                cfg["intermediate_size"], cfg["vocab_size"]) == (s["hidden"], s["heads"], s["kv_heads"],
                                                                 s["head_dim"], s["intermediate"], s["vocab"])
        assert cfg["torch_dtype"] == "float64" and cfg["tie_word_embeddings"] is False
    assert t["num_hidden_layers"] == s["layers"] and t["architectures"] == ["Qwen3ForCausalLM"]
    assert d["num_hidden_layers"] == s["draft_layers"] == len(d["layer_types"])
    assert d["num_target_layers"] == s["layers"]
    ids = d["dflash_config"]["target_layer_ids"]
    assert len(ids) == s["draft_features"] and ids == sorted(set(ids)) and max(ids) <= s["layers"] - 2
    for k in ("block_size", "mask_token_id", "mask_token"):
        assert d["dflash_config"][k] == tiny_d["dflash_config"][k]
    for role, tiny in (("target", TINY_T), ("dflash", TINY_D)):
        folder = out / role
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        files = sorted(p.name for p in folder.glob("*.safetensors"))
        assert len(files) > 1 and sorted(set(index["weight_map"].values())) == files
        names = set()
        for f in files:
            names |= set(load_safetensors(str(folder / f)))
        assert names == set(index["weight_map"])
        assert index["metadata"]["total_size"] == sum(
            os.path.getsize(folder / f) for f in files) - sum(_header_bytes(folder / f) for f in files)
        for f in inflate.COPIED:
            if os.path.exists(os.path.join(tiny, f)):
                assert (folder / f).read_bytes() == Path(tiny, f).read_bytes(), f


def _header_bytes(path) -> int:
    with open(path, "rb") as f:
        return 8 + int.from_bytes(f.read(8), "little")


def test_defaults_are_the_example_qwen3_8b_shapes():
    """Without shape options the script writes examples/qwen3-8b-shaped's shapes."""
    a = inflate.parser().parse_args(["--out", "x"])
    ex = ROOT / "examples" / "qwen3-8b-shaped"
    t = json.loads((ex / "target-config.json").read_text())
    d = json.loads((ex / "dflash-b16-config.json").read_text())
    assert (a.hidden, a.layers, a.heads, a.kv_heads, a.head_dim, a.intermediate, a.vocab) == (
        t["hidden_size"], t["num_hidden_layers"], t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"],
        t["intermediate_size"], t["vocab_size"])
    assert (a.draft_layers, a.draft_features) == (d["num_hidden_layers"], len(d["dflash_config"]["target_layer_ids"]))
    assert a.dtype == "bfloat16"


@pytest.mark.parametrize("extra, needle", [
    (["--hidden", "128"], "--hidden"),
    (["--head-dim", "48"], "--head-dim"),
    (["--heads", "8", "--kv-heads", "1"], "--heads"),
    (["--vocab", "200"], "--vocab"),
    (["--layers", "3"], "--layers"),
    (["--draft-features", "2"], "--draft-features"),
    (["--intermediate", "100"], "--intermediate"),
    (["--dtype", "float16"], "--dtype"),
    (["--hidden", "0"], "--hidden"),
])
def test_user_errors_are_one_line_before_any_work(tmp_path, capsys, extra, needle):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        inflate.main(argv(SHAPES["gqa"], out) + extra)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and needle in err, err
    assert not out.exists()


def test_a_non_empty_out_is_refused(tmp_path, capsys):
    (tmp_path / "keep").write_text("x")
    with pytest.raises(SystemExit) as info:
        inflate.main(argv(SHAPES["gqa"], tmp_path))
    assert info.value.code == 2 and "--out" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["keep"]


def test_an_unwritable_out_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as info:
        inflate.main(argv(SHAPES["gqa"], tmp_path / "file" / "out"))
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and len(err.splitlines()) == 1 and "cannot write --out" in err, err


def test_the_script_entry_runs_the_tool():
    """scripts/inflate_pair.py (the GPU steps' and the docs' command line) is the tool's entry: the same help."""
    import subprocess
    import sys

    run = lambda *a: subprocess.run([sys.executable, *a, "--help"], capture_output=True, text=True, cwd=ROOT)  # noqa: E731
    script, module = run("scripts/inflate_pair.py"), run("-m", "sglang_ddtree.tools.inflate_pair")
    assert script.returncode == module.returncode == 0 and script.stdout == module.stdout
    assert script.stdout.startswith("usage: inflate_pair.py ") and "--out" in script.stdout
