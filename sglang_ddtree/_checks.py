"""Argument checks shared by the public API: every failure names the argument it is about."""
from __future__ import annotations

import functools
import numbers

import torch

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def tensor(name: str, value, *, ndim: int | None = None, dtypes=None, device: torch.device | None = None):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if ndim is not None and value.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(value.shape)}")
    if dtypes is not None and value.dtype not in dtypes:
        names = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} must have dtype in ({names}), got {str(value.dtype).replace('torch.', '')}")
    if device is not None and value.device != device:
        raise ValueError(f"{name} must be on {device}, got {value.device}")
    return value


def shape(name: str, value: torch.Tensor, expected: tuple) -> None:
    if tuple(value.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)}, got {tuple(value.shape)}")


def integer(name: str, value, *, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def finite_nonnegative(name: str, value) -> float:
    """A Python or numpy real, finite and >= 0 (a temperature), as a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    value = float(value)
    if not value >= 0.0 or value == float("inf"):
        raise ValueError(f"{name} must be a finite value >= 0, got {value}")
    return value


INT_DTYPES = (torch.int32, torch.int64)
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def in_range(name: str, value, lo: int, hi: int | None = None) -> None:
    """Values of an integer argument inside [lo, hi): checked for Python ints and CPU tensors only. A CUDA
    tensor is not read back on the host (that would add a sync to every round); its bad values are not caught
    here, and a seq_len < 0 or a token outside the vocabulary gives a meaningless tree, not a crash."""
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu" or value.numel() == 0 or value.dtype not in INT_DTYPES:
            return  # not read on the host, empty, or the wrong type (per_request names that)
        low, high = int(value.min()), int(value.max())
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        low = high = int(value)
    else:
        return
    if low < lo or (hi is not None and high >= hi):
        bad = low if low < lo else high
        want = f">= {lo}" if hi is None else f"in [{lo}, {hi})"
        raise ValueError(f"{name} must be {want}, got {bad}")


@functools.lru_cache(maxsize=64)
def _filled(batch: int, value: int, device: torch.device) -> torch.Tensor:
    """A read-only int64 [batch] of `value` (the ops only read these: one allocation per shape, not per call,
    which was a fifth of a one-request build's wrapper time)."""
    return torch.full((batch,), value, dtype=torch.int64, device=device)


def per_request(name: str, value, batch: int, device: torch.device, *, default: int = 0) -> torch.Tensor:
    """An optional per-request integer vector (None → default, a Python/numpy int → broadcast) as int64 [batch].
    None returns a shared tensor: callers read it, never write it."""
    if value is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            # a fill recorded into a graph never runs outside it: never cache a tensor made during capture
            return torch.full((batch,), default, dtype=torch.int64, device=device)
        return _filled(batch, default, device)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        integer(name, int(value), minimum=INT64_MIN, maximum=INT64_MAX)
        return torch.full((batch,), int(value), dtype=torch.int64, device=device)
    tensor(name, value, ndim=1, dtypes=INT_DTYPES, device=device)
    shape(name, value, (batch,))
    return value.to(torch.int64).contiguous()
