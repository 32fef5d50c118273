# Packed FP8 d64 against fixed-length calls on sub-mixes: where does the powers mix lose?
import sys, torch
sys.path.insert(0, "bench")
import hopattn
from compare import make_events_timer
timer, _ = make_events_timer(torch, reps=40, warmup=5, sleep_cycles=200_000)
e4m3 = torch.float8_e4m3fn
h, d = 16, int(sys.argv[1]) if len(sys.argv) > 1 else 64
mixes = {"8k x4": [8192] * 4, "4k x4": [4096] * 4, "8k x4 + 4k x4": [8192] * 4 + [4096] * 4,
         "powers": [8192] * 4 + [4096] * 4 + [2048] * 4 + [1024] * 4 + [512] * 4 + [256] * 4 + [128] * 8,
         "powers reversed": ([8192] * 4 + [4096] * 4 + [2048] * 4 + [1024] * 4 + [512] * 4 + [256] * 4 + [128] * 8)[::-1],
         "small only": [2048] * 4 + [1024] * 4 + [512] * 4 + [256] * 4 + [128] * 8}
for causal in (True, False):
    for name, lens in mixes.items():
        total = sum(lens)
        cu = torch.tensor([0] + [sum(lens[: i + 1]) for i in range(len(lens))], dtype=torch.int32, device="cuda")
        q8, k8, v8 = (torch.randn(total, h, d, device="cuda", dtype=torch.bfloat16).to(e4m3) for _ in range(3))
        m = max(lens)
        var = timer(lambda: hopattn.forward_fp8_varlen(q8, k8, v8, cu, cu, m, m, causal=causal))
        fixed = 0.0
        for L in sorted(set(lens)):
            c = lens.count(L)
            qf, kf, vf = (torch.randn(c, L, h, d, device="cuda", dtype=torch.bfloat16).to(e4m3) for _ in range(3))
            fixed += timer(lambda: hopattn.forward_fp8(qf, kf, vf, causal=causal))
        print(f"d{d} causal={int(causal)} {name:16s} varlen {var*1e3:8.1f} us  fixed sum {fixed*1e3:8.1f} us  ratio {var/fixed:.3f}", flush=True)
