"""Where a decode round's time goes, per stage, on the device's timeline: CUDA events recorded between stages
(nothing read until `result`), or the host clock on a CPU. The engine keeps one per batch; the server one per
worker when SGLANG_DDTREE_STAGE_TIMES asks for its log."""
from __future__ import annotations

import time

import torch


class StageClock:
    """`mark(stage)` starts `stage` (None: an untimed stretch); `result()` adds each stretch to its stage's total
    (seconds) and returns the totals, waiting once for the last event."""

    def __init__(self, device: torch.device, stages=()):
        self.cuda = torch.device(device).type == "cuda"
        self.marks: list = []
        self.totals = dict.fromkeys(stages, 0.0)

    def mark(self, stage: str | None) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append((stage, ev))
        else:
            self.marks.append((stage, time.perf_counter()))

    def result(self) -> dict:
        if self.cuda and self.marks:
            self.marks[-1][1].synchronize()  # every mark is on the stream the round runs on
        for (stage, a), (_, b) in zip(self.marks, self.marks[1:]):
            if stage is not None:
                self.totals[stage] = self.totals.get(stage, 0.0) + (a.elapsed_time(b) / 1e3 if self.cuda else b - a)
        self.marks = self.marks[-1:]
        return dict(self.totals)

    def reset(self) -> None:
        """Totals back to zero (the open stretch since the last mark stays)."""
        self.totals = dict.fromkeys(self.totals, 0.0)
