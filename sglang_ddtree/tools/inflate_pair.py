"""Zero-pad the shipped tiny Qwen3 target and its DFlash drafter to larger shapes (by default Qwen3-8B's, as in
examples/qwen3-8b-shaped/) so that the pair costs what an 8B pair costs and still computes the tiny pair's
function: the same greedy tokens and the same acceptance, where dummy weights accept nothing.

    python scripts/inflate_pair.py --out /tmp/pair8b --device cuda     # /tmp/pair8b/target, /tmp/pair8b/dflash

(scripts/inflate_pair.py is this module's entry; `python -m sglang_ddtree.tools.inflate_pair` runs it too.)

Why it is the same function (tiny sizes h, d, N_t layers, eps e; big H, D, N; x the tiny residual stream):
* Residual stream X = [b*x, c, 0...]: real dims first, scaled by b; dim h holds a constant c (the constant
  channel); the rest are 0. The embedding, o_proj and down_proj write b times the tiny rows there and 0 elsewhere.
* Hidden RMSNorm: mean_H(X^2) + e' = (b^2|x|^2 + c^2)/H + e' = (b^2 h/H)(|x|^2/h + e) when c^2 = b^2 h e - H e',
  so weights w*sqrt(h/H) on the real dims (0 elsewhere) give exactly the tiny norm's output, its eps included.
  Here e' = e, c = the power of two nearest sqrt(H e) (exact in every dtype), b^2 = (c^2 + H e)/(h e).
* q/k RMSNorm over a head: q_proj/k_proj rows times a, a^2 = e' D/(d e), make a^2|q|^2/D + e' = (a^2 d/D)(|q|^2/d + e),
  so the big output is sqrt(D/d) (w_big/w) times the tiny one. q_norm weights kept: q = sqrt(D/d) q_tiny;
  k_norm weights times sqrt(d/D): k = k_tiny; hence q.k/sqrt(D) = q_tiny.k_tiny/sqrt(d).
* RoPE (neox: dims j and j + d/2 turn at theta^(-2j/d)): tiny dim i goes to big dim r(i mod d/2) + (D/2)(i div d/2),
  r = D/d, which turns at theta^(-2rj/D), the same rational exponent (so the same float). v is placed alike.
* Heads: tiny kv head k becomes ceil(g/G) big kv heads (copies; g, G the query heads per kv head) and its g query
  heads go into their groups (big q head A reads kv head A div G). Every other head has zero weights and zero
  o_proj columns. MLP: tiny units first, the rest zero (silu(0)*0 = 0).
* Layers: tiny layer t is big layer floor(t N/N_t); the others have all weights zero (identities). A drafter
  feature after tiny layer t is taken after big layer floor(t N/N_t); extra features (to reach --draft-features)
  take free layers and get zero fc columns.
* Drafter: its residual starts from the target's embeddings (same b, c); fc's real block is the tiny one and fc
  row h copies the first feature's constant, so hidden_norm's input is [b*ctx, c, 0] and the identity above holds
  with the drafter's eps (e'_D from c^2 = b^2 h e_D - H e'_D).
* Vocabulary: padded embedding rows are [0, c, 0]; padded lm_head rows read dim h only, where the final norm
  (weight 1 there) outputs c sqrt(H/h)/(b rho), rho = sqrt(|x|^2/h + e) the tiny final norm's denominator: a
  padded logit is -K/rho. From the tiny weights alone, a real logit is at most B = max_k sqrt(h)|W_k * w| in size
  and rho at most R (each layer adds at most |O| sqrt(sum |V|^2) sqrt(h) max w_in + |Down| max_i|Gate_i| |Up| h
  max w_post^2 to |x|; |.| the spectral norm), so K = R (B + PAD_MARGIN) keeps every padded logit PAD_MARGIN below
  every real one, for every input, in both models.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time

import torch

from .. import _cli
from ..engine.checkpoint import load_safetensors, save_safetensors
from ..engine.data import MODELS_DIR

PROG = "inflate_pair.py"
# examples/qwen3-8b-shaped/{target,dflash-b16}-config.json
QWEN3_8B = {"hidden": 4096, "layers": 36, "heads": 32, "kv_heads": 8, "head_dim": 128, "intermediate": 12288,
            "vocab": 151936, "draft_layers": 5, "draft_features": 5}
PAD_MARGIN = 100.0  # padded logits sit at least this far below every real logit
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}  # fp16: -K/rho overflows
COPIED = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
          "ddtree_calibration.json")


def parser() -> _cli.Parser:
    p = _cli.Parser(prog=PROG, description="Zero-pad the tiny pair to larger (default Qwen3-8B) shapes, same function.")
    p.add_argument("--out", required=True, help="new or empty folder; gets target/ and dflash/")
    p.add_argument("--target", default=os.path.join(MODELS_DIR, "tiny-target"))
    p.add_argument("--draft", default=os.path.join(MODELS_DIR, "tiny-dflash"))
    p.add_argument("--device", type=_cli.device, default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    for k, v in QWEN3_8B.items():
        p.add_argument("--" + k.replace("_", "-"), type=_cli.positive_int, default=v)
    p.add_argument("--shard-mb", type=_cli.positive_int, default=5000, help="largest safetensors file (MB)")
    return p


def read_json(folder: str, name: str = "config.json") -> dict:
    with open(os.path.join(folder, name)) as f:
        return json.load(f)


def head_map(nq: int, nkv: int, big_q: int, big_kv: int):
    """(big q head of each tiny q head, tiny kv head each big kv head copies or -1), or None if it does not fit."""
    g, G = nq // nkv, big_q // big_kv
    copies = -(-g // G)
    if nkv * copies > big_kv:
        return None
    q_to, kv_from = [], [-1] * big_kv
    for k in range(nkv):
        kv_from[k * copies:(k + 1) * copies] = [k] * copies
        q_to += [(k * copies + m // G) * G + m % G for m in range(g)]
    return q_to, kv_from


def rope_place(d: int, D: int) -> torch.Tensor:
    """Big head dim of each tiny head dim: the neox pair (j, j + d/2) at the same frequency."""
    r, half = D // d, d // 2
    return torch.tensor([r * (i % half) + (D // 2) * (i // half) for i in range(d)])


def spread(n: int, N: int) -> list[int]:
    return [t * N // n for t in range(n)]


def check(a, tcfg: dict, dcfg: dict) -> str | None:
    """The first reason the inflation cannot be made, as a user-facing sentence, or None."""
    h, d = tcfg["hidden_size"], tcfg.get("head_dim", tcfg["hidden_size"] // tcfg["num_attention_heads"])
    if tcfg.get("model_type") != "qwen3" or "DFlashDraftModel" not in dcfg.get("architectures", []):
        return "--target must be a qwen3 model and --draft a DFlashDraftModel"
    for cfg, who in ((tcfg, "target"), (dcfg, "drafter")):
        if cfg.get("attention_bias") or cfg.get("rope_scaling") or not cfg.get("rms_norm_eps", 0) > 0:
            return f"the {who} has attention biases, rope scaling or no positive rms_norm_eps (not handled)"
        cd = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
        if cd != d or cfg["hidden_size"] != h:
            return "the drafter's hidden size and head dim must be the target's"
        if a.heads % a.kv_heads or head_map(cfg["num_attention_heads"], cfg["num_key_value_heads"], a.heads,
                                            a.kv_heads) is None:
            return (f"--heads {a.heads} / --kv-heads {a.kv_heads} cannot hold the {who}'s "
                    f"{cfg['num_attention_heads']}/{cfg['num_key_value_heads']} heads with their grouping")
        if a.intermediate < cfg["intermediate_size"]:
            return f"--intermediate must be >= the {who}'s {cfg['intermediate_size']}"
    if a.hidden <= h:
        return f"--hidden must exceed the tiny hidden size {h} (one more dim carries the constant channel)"
    if a.head_dim % d or a.head_dim < d:
        return f"--head-dim must be a multiple of the tiny head dim {d}"
    if a.layers < tcfg["num_hidden_layers"] or a.draft_layers < dcfg["num_hidden_layers"]:
        return (f"--layers / --draft-layers must be >= the tiny {tcfg['num_hidden_layers']} / "
                f"{dcfg['num_hidden_layers']}")
    if a.vocab < tcfg["vocab_size"]:
        return f"--vocab must be >= the tiny vocabulary {tcfg['vocab_size']}"
    ids = dcfg["dflash_config"]["target_layer_ids"]
    if ids != sorted(set(ids)):
        return "the drafter's target_layer_ids must be increasing"
    if not len(ids) <= a.draft_features <= a.layers - 1:
        return f"--draft-features must be in [{len(ids)}, --layers - 1]"
    if os.path.exists(a.out) and (not os.path.isdir(a.out) or os.listdir(a.out)):
        return f"--out {a.out!r} exists and is not an empty folder"
    try:  # last: the folder is made only when everything else holds
        for role in ("target", "dflash"):
            os.makedirs(os.path.join(a.out, role))
    except OSError as e:
        return f"cannot write --out {a.out!r}: {e.strerror or e}"
    return None


class Inflation:
    """Everything but the weights: sizes, maps and the scalars of the module docstring."""

    def __init__(self, a, tcfg: dict, dcfg: dict):
        self.a, self.tcfg, self.dcfg = a, tcfg, dcfg
        self.h, self.H = tcfg["hidden_size"], a.hidden
        self.d, self.D = tcfg.get("head_dim", self.h // tcfg["num_attention_heads"]), a.head_dim
        self.V = tcfg["vocab_size"]
        e = tcfg["rms_norm_eps"]
        self.c = 2.0 ** round(math.log2(math.sqrt(self.H * e)))
        self.b = math.sqrt((self.c ** 2 + self.H * e) / (self.h * e))
        ed = dcfg["rms_norm_eps"]
        self.eps = {"target": e, "dflash": e if ed == e else (self.b ** 2 * self.h * ed - self.c ** 2) / self.H}
        self.place = rope_place(self.d, self.D)
        self.t_layers = spread(tcfg["num_hidden_layers"], a.layers)
        self.d_layers = spread(dcfg["num_hidden_layers"], a.draft_layers)
        real = [self.t_layers[i] for i in dcfg["dflash_config"]["target_layer_ids"]]
        free = [j for j in range(a.layers - 1) if j not in real]
        n = a.draft_features - len(real)
        extra = [free[i * (len(free) - 1) // max(1, n - 1)] for i in range(n)]  # spread, distinct
        self.feature_ids = sorted(real + extra)
        self.feature_src = [real.index(j) if j in real else -1 for j in self.feature_ids]

    def error(self) -> str | None:
        if not self.eps["dflash"] > 0:
            return "the drafter's rms_norm_eps is too small next to the target's for the constant channel"
        if max(self.feature_ids) > self.a.layers - 2:  # SGLang captures before layer id + 1
            return "a drafter feature would come after the last target layer"
        return None


def spectral(w: torch.Tensor) -> float:
    return float(torch.linalg.matrix_norm(w, 2))


def rho_bound(sd: dict, prefixes: list[str], cfg: dict, embed_norm: float, ctx_w: float = 0.0) -> float:
    """Largest final-norm denominator sqrt(|x|^2/h + eps) any input can reach (module docstring)."""
    h, nq, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim", h // nq)
    x = embed_norm
    for p in prefixes:
        n_in = max(float(sd[p + "input_layernorm.weight"].abs().max()), ctx_w) * math.sqrt(h)
        v = sd[p + "self_attn.v_proj.weight"].view(nkv, d, h)
        vs = [spectral(v[k]) for k in range(nkv)]
        attn = spectral(sd[p + "self_attn.o_proj.weight"]) * math.sqrt(sum(vs[i // (nq // nkv)] ** 2
                                                                           for i in range(nq))) * n_in
        n_post = float(sd[p + "post_attention_layernorm.weight"].abs().max()) * math.sqrt(h)
        mlp = (spectral(sd[p + "mlp.down_proj.weight"]) * float(sd[p + "mlp.gate_proj.weight"].norm(dim=1).max())
               * spectral(sd[p + "mlp.up_proj.weight"]) * n_post ** 2)
        x += attn + mlp
    return math.sqrt(x * x / h + cfg["rms_norm_eps"])


class Builder:
    """Big tensors on `device` in `dtype`, each from its tiny block (scaled in float64, cast once)."""

    def __init__(self, inf: Inflation, device: str, dtype):
        self.i, self.dev, self.dtype = inf, torch.device(device), dtype

    def put(self, shape, rows=None, cols=None, src=None, scale: float = 1.0) -> torch.Tensor:
        out = torch.zeros(shape, dtype=self.dtype, device=self.dev)
        if src is not None:
            src = (src.to(self.dev, torch.float64) * scale).to(self.dtype)
            if src.dim() == 1:
                out[rows.to(self.dev)] = src
            else:
                out[rows.to(self.dev)[:, None], cols.to(self.dev)[None, :]] = src
        return out

    def layer(self, sd: dict | None, cfg: dict, eps_big: float, eps: float) -> dict:
        """Thunks of one big decoder layer's tensors (names relative to the layer) from the tiny layer `sd`, or
        of an identity layer (all zero) when `sd` is None."""
        i, a = self.i, self.i.a
        shapes = layer_shapes(i)
        if sd is None:
            return {k: (lambda s=s: self.put(s)) for k, s in shapes.items()}
        H, D, d, h = i.H, i.D, i.d, i.h
        q_to, kv_from = head_map(cfg["num_attention_heads"], cfg["num_key_value_heads"], a.heads, a.kv_heads)
        hid, place, units = torch.arange(h), i.place, torch.arange(cfg["intermediate_size"])
        q_rows = torch.cat([A * D + place for A in q_to])
        kv_rows = torch.cat([B * D + place for B, k in enumerate(kv_from) if k >= 0])
        kv_src = torch.cat([k * d + torch.arange(d) for k in kv_from if k >= 0])
        alpha = math.sqrt(eps_big * D / (d * eps))
        hs = math.sqrt(h / H)
        args = {  # name: (rows, cols, tiny tensor, scale)
            "input_layernorm": (hid, None, sd["input_layernorm.weight"], hs),
            "post_attention_layernorm": (hid, None, sd["post_attention_layernorm.weight"], hs),
            "self_attn.q_proj": (q_rows, hid, sd["self_attn.q_proj.weight"], alpha),
            "self_attn.k_proj": (kv_rows, hid, sd["self_attn.k_proj.weight"][kv_src], alpha),
            "self_attn.v_proj": (kv_rows, hid, sd["self_attn.v_proj.weight"][kv_src], 1.0),
            "self_attn.o_proj": (hid, q_rows, sd["self_attn.o_proj.weight"], i.b),
            "self_attn.q_norm": (place, None, sd["self_attn.q_norm.weight"], 1.0),
            "self_attn.k_norm": (place, None, sd["self_attn.k_norm.weight"], math.sqrt(d / D)),
            "mlp.gate_proj": (units, hid, sd["mlp.gate_proj.weight"], 1.0),
            "mlp.up_proj": (units, hid, sd["mlp.up_proj.weight"], 1.0),
            "mlp.down_proj": (hid, units, sd["mlp.down_proj.weight"], i.b),
        }
        return {k: (lambda k=k: self.put(shapes[k], *args[k])) for k in shapes}


def layer_shapes(inf: "Inflation") -> dict:
    a, H, D, I = inf.a, inf.H, inf.D, inf.a.intermediate
    return {"input_layernorm": (H,), "post_attention_layernorm": (H,), "self_attn.q_proj": (a.heads * D, H),
            "self_attn.k_proj": (a.kv_heads * D, H), "self_attn.v_proj": (a.kv_heads * D, H),
            "self_attn.o_proj": (H, a.heads * D), "self_attn.q_norm": (D,), "self_attn.k_norm": (D,),
            "mlp.gate_proj": (I, H), "mlp.up_proj": (I, H), "mlp.down_proj": (H, I)}


def sub(sd: dict, prefix: str) -> dict:
    return {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}


def target_tensors(bld: Builder, sd: dict, K: float):
    """(name, thunk) of every target tensor, in file order."""
    i, a = bld.i, bld.i.a
    H, h, V = i.H, i.h, i.V
    hid = torch.arange(h)
    emb = sd["model.embed_tokens.weight"]
    head = sd.get("lm_head.weight", emb)  # a tied tiny head is written untied (the padded rows differ)

    def embed():
        t = bld.put((a.vocab, H), torch.arange(V), hid, emb, i.b)
        t[:, h] = i.c
        return t

    def lm_head():
        t = bld.put((a.vocab, H), torch.arange(V), hid, head)
        t[V:, h] = -K * i.b * math.sqrt(h / H) / i.c
        return t

    def norm():
        t = bld.put((H,), hid, None, sd["model.norm.weight"], math.sqrt(h / H))
        t[h] = 1.0
        return t

    out = [("model.embed_tokens.weight", embed)]
    real = {big: t for t, big in enumerate(i.t_layers)}
    eps = i.tcfg["rms_norm_eps"]
    for j in range(a.layers):
        thunks = bld.layer(sub(sd, f"model.layers.{real[j]}.") if j in real else None, i.tcfg, i.eps["target"], eps)
        out += [(f"model.layers.{j}.{k}.weight", f) for k, f in thunks.items()]
    return out + [("model.norm.weight", norm), ("lm_head.weight", lm_head)]


def draft_tensors(bld: Builder, sd: dict):
    """(name, thunk) of every drafter tensor, in file order."""
    i, a = bld.i, bld.i.a
    H, h = i.H, i.h
    hid = torch.arange(h)
    F = len(i.feature_ids)

    def fc():
        t = torch.zeros((H, F * H), dtype=bld.dtype, device=bld.dev)
        for p, f in enumerate(i.feature_src):
            if f >= 0:
                t[:, p * H:(p + 1) * H] = bld.put((H, H), hid, hid, sd["fc.weight"][:, f * h:(f + 1) * h])
        t[h, h] = 1.0  # the constant of the first feature
        return t

    def norm(name, const):
        def make():
            t = bld.put((H,), hid, None, sd[name], math.sqrt(h / H))
            t[h] = const
            return t
        return make

    out = [("fc.weight", fc), ("hidden_norm.weight", norm("hidden_norm.weight", 0.0))]
    real = {big: t for t, big in enumerate(i.d_layers)}
    for j in range(a.draft_layers):
        thunks = bld.layer(sub(sd, f"layers.{real[j]}.") if j in real else None, i.dcfg, i.eps["dflash"],
                           i.dcfg["rms_norm_eps"])
        out += [(f"layers.{j}.{k}.weight", f) for k, f in thunks.items()]
    return out + [("norm.weight", norm("norm.weight", 1.0))]


def write(folder: str, specs, shapes: dict, dtype, shard_mb: int) -> int:
    """HF layout: model.safetensors, or model-0000i-of-0000n.safetensors + model.safetensors.index.json."""
    size = lambda n: math.prod(shapes[n]) * torch.finfo(dtype).bits // 8
    shards, cur, cur_bytes = [], [], 0
    for name, thunk in specs:
        if cur and cur_bytes + size(name) > shard_mb * 10 ** 6:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append((name, thunk))
        cur_bytes += size(name)
    shards.append(cur)
    n = len(shards)
    weight_map = {}
    for k, shard in enumerate(shards):
        fn = "model.safetensors" if n == 1 else f"model-{k + 1:05d}-of-{n:05d}.safetensors"
        tensors = {}
        for name, thunk in shard:
            t = thunk()
            assert tuple(t.shape) == tuple(shapes[name]), (name, t.shape, shapes[name])
            tensors[name] = t.cpu()
            weight_map[name] = fn
        save_safetensors(tensors, os.path.join(folder, fn))
        del tensors
    total = sum(size(nm) for nm in weight_map)
    if n > 1:
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    return total


def expected_shapes(inf: Inflation) -> dict:
    a, H = inf.a, inf.H
    out = {"model.embed_tokens.weight": (a.vocab, H), "model.norm.weight": (H,), "lm_head.weight": (a.vocab, H),
           "fc.weight": (H, len(inf.feature_ids) * H), "hidden_norm.weight": (H,), "norm.weight": (H,)}
    for j in range(a.layers):
        out.update({f"model.layers.{j}.{k}.weight": s for k, s in layer_shapes(inf).items()})
    for j in range(a.draft_layers):
        out.update({f"layers.{j}.{k}.weight": s for k, s in layer_shapes(inf).items()})
    return out


def configs(inf: Inflation, dtype_name: str) -> tuple[dict, dict]:
    a = inf.a
    shape = {"hidden_size": a.hidden, "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
             "head_dim": a.head_dim, "intermediate_size": a.intermediate, "vocab_size": a.vocab,
             "torch_dtype": dtype_name, "tie_word_embeddings": False}
    t = {**inf.tcfg, **shape, "num_hidden_layers": a.layers, "rms_norm_eps": inf.eps["target"]}
    if "max_window_layers" in t:
        t["max_window_layers"] = a.layers
    d = {**inf.dcfg, **shape, "num_hidden_layers": a.draft_layers, "rms_norm_eps": inf.eps["dflash"],
         "num_target_layers": a.layers, "layer_types": ["full_attention"] * a.draft_layers,
         "dflash_config": {**inf.dcfg["dflash_config"], "target_layer_ids": inf.feature_ids}}
    return t, d


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    for folder in (a.target, a.draft):
        if not os.path.isfile(os.path.join(folder, "config.json")):
            _cli.fail(PROG, f"{folder!r} has no config.json")
    tcfg, dcfg = read_json(a.target), read_json(a.draft)
    problem = check(a, tcfg, dcfg)
    inf = None if problem else Inflation(a, tcfg, dcfg)
    problem = problem or inf.error()
    if problem:
        _cli.fail(PROG, problem)
    t0 = time.time()
    tsd = {k: v.double() for fn in sorted(os.listdir(a.target)) if fn.endswith(".safetensors")
           for k, v in load_safetensors(os.path.join(a.target, fn)).items()}
    dsd = {k.removeprefix("model."): v.double() for fn in sorted(os.listdir(a.draft)) if fn.endswith(".safetensors")
           for k, v in load_safetensors(os.path.join(a.draft, fn)).items()}
    emb = tsd["model.embed_tokens.weight"]
    head = tsd.get("lm_head.weight", emb)
    h = inf.h
    B = max(float((head * tsd["model.norm.weight"]).norm(dim=1).max()),
            float((head * dsd["norm.weight"]).norm(dim=1).max())) * math.sqrt(h)
    e_norm = float(emb.norm(dim=1).max())
    R = max(rho_bound(tsd, [f"model.layers.{t}." for t in range(tcfg["num_hidden_layers"])], tcfg, e_norm),
            rho_bound(dsd, [f"layers.{t}." for t in range(dcfg["num_hidden_layers"])], dcfg, e_norm,
                      float(dsd["hidden_norm.weight"].abs().max())))
    K = R * (B + PAD_MARGIN)
    dtype = DTYPES[a.dtype]
    bld = Builder(inf, a.device, dtype)
    shapes = expected_shapes(inf)
    tcfg_big, dcfg_big = configs(inf, a.dtype)
    total = 0
    for role, src, specs, cfg in (("target", a.target, target_tensors(bld, tsd, K), tcfg_big),
                                  ("dflash", a.draft, draft_tensors(bld, dsd), dcfg_big)):
        folder = os.path.join(a.out, role)
        total += write(folder, specs, shapes, dtype, a.shard_mb)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
        for fn in COPIED:
            if os.path.exists(os.path.join(src, fn)):
                shutil.copy(os.path.join(src, fn), folder)
    print(f"{PROG}: {a.out}/target ({a.layers} layers, tiny layers at {inf.t_layers}) and {a.out}/dflash "
          f"({a.draft_layers} layers, features after target layers {inf.feature_ids}): {total / 1e9:.2f} GB "
          f"{a.dtype} in {time.time() - t0:.1f} s; residual scale {inf.b:.4g}, constant {inf.c:g}, "
          f"padded logits <= -{K / R:.4g} (real logits within +-{B:.4g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
