"""Hugging Face checkpoint folders (config.json + model.safetensors) without extra dependencies.

The safetensors format is an 8-byte little-endian header length, a JSON header naming each tensor's
dtype/shape/byte range, then the raw bytes. Reading and writing it here keeps the engine loadable on
machines that have torch and nothing else (the GPU host has no package index).
"""
from __future__ import annotations

import json
import os
import struct

import torch

from .dflash import DFlashConfig, DFlashDraftModel
from .dflash2 import DFlash2Config, DFlash2DraftModel, is_dflash2
from .mla import DeepseekV3Config, DeepseekV3ForCausalLM
from .model import CausalLM, Qwen3Config, Qwen3ForCausalLM

TARGETS = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "deepseek_v3": (DeepseekV3Config, DeepseekV3ForCausalLM)}

_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
           "I64": torch.int64, "I32": torch.int32, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}
_NAMES = {v: k for k, v in _DTYPES.items()}


def load_safetensors(path: str) -> dict[str, torch.Tensor]:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = bytearray(f.read())
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        lo, hi = meta["data_offsets"]
        t = torch.frombuffer(data, dtype=torch.uint8, count=hi - lo, offset=lo) if hi > lo else \
            torch.empty(0, dtype=torch.uint8)
        out[name] = t.view(_DTYPES[meta["dtype"]]).reshape(meta["shape"]).clone()
    return out


def save_safetensors(tensors: dict[str, torch.Tensor], path: str) -> None:
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        b = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def _load_state(model: torch.nn.Module, folder: str, strip: str = "") -> None:
    sd = {}
    for fn in sorted(os.listdir(folder)):
        if fn.endswith(".safetensors"):
            sd.update(load_safetensors(os.path.join(folder, fn)))
    if strip:
        sd = {k[len(strip):] if k.startswith(strip) else k: v for k, v in sd.items()}
    if getattr(model.config, "tie_word_embeddings", False):
        sd.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and model.config.tie_word_embeddings)]
    if missing or unexpected:
        raise ValueError(f"checkpoint {folder!r} does not match the model: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")


def load_target(folder: str, dtype=torch.float32, device="cpu") -> CausalLM:
    """The target named by config.json's model_type (TARGETS), its weights cast to `dtype`."""
    with open(os.path.join(folder, "config.json")) as f:
        model_type = json.load(f).get("model_type", "qwen3")
    if model_type not in TARGETS:
        raise ValueError(f"{folder!r}: model_type {model_type!r} is not an engine target ({sorted(TARGETS)})")
    config_cls, model_cls = TARGETS[model_type]
    cfg = config_cls.load(folder)
    with torch.device("meta"):
        model = model_cls(cfg)
    model = model.to_empty(device="cpu")
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    _load_state(model, folder)
    return model.to(device=device, dtype=dtype).eval()


def load_drafter(folder: str, dtype=torch.float32, device="cpu") -> DFlashDraftModel:
    """A DFlash drafter, or a DFlash2 one (a candidate selector on the backbone) where config.json names it."""
    with open(os.path.join(folder, "config.json")) as f:
        config_cls, model_cls = (DFlash2Config, DFlash2DraftModel) if is_dflash2(json.load(f)) else \
            (DFlashConfig, DFlashDraftModel)
    cfg = config_cls.load(folder)
    with torch.device("meta"):
        model = model_cls(cfg)
    model = model.to_empty(device="cpu")
    _load_state(model, folder, strip="model.")
    return model.to(device=device, dtype=dtype).eval()


def save_model(model: torch.nn.Module, folder: str, config_extra: dict | None = None, dtype=None) -> None:
    """config.json and model.safetensors (weights cast to `dtype` when given, e.g. bf16 for a smaller file)."""
    os.makedirs(folder, exist_ok=True)
    cfg = {**model.config.to_dict(), **(config_extra or {})}
    sd = {k: v if dtype is None else v.to(dtype) for k, v in model.state_dict().items()}
    if cfg.get("tie_word_embeddings"):
        sd.pop("lm_head.weight", None)
    save_safetensors(sd, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
