#!/usr/bin/env bash
# Machine facts and the two ceilings every benchmark is judged against: device copy bandwidth
# and bf16 matrix rate, measured on random data with CUDA events.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
nvcc --version | tail -1
python3 - <<'PY'
import json, os, torch
torch.manual_seed(0)
dev = torch.device("cuda")
def bench(fn, reps=20):
    for _ in range(3): fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) / 1e3)
    return sorted(ts)[len(ts) // 2]
src = torch.randn(2 ** 30 // 4, device=dev); dst = torch.empty_like(src)      # 1 GiB each
t = bench(lambda: dst.copy_(src))
copy_tbs = 2 * src.numel() * 4 / t / 1e12
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16); b = torch.randn_like(a)
t = bench(lambda: a @ b)
mma_tfs = 2 * 8192 ** 3 / t / 1e12
out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
       "sms": torch.cuda.get_device_properties(0).multi_processor_count,
       "copy_TBps": copy_tbs, "bf16_mma_TFps": mma_tfs}
print(json.dumps(out))
json.dump(out, open(os.path.join(os.environ["STEP_OUT"], "ceilings.json"), "w"), indent=1)
PY
