# [8192]*4 packed vs batch-4 fixed, same data: FP8 and bf16 timing (GPU-time timer); with argv[1]=='ncu'
# one call of each FP8 kernel for ncu.
import sys, torch
sys.path.insert(0, "bench")
import hopattn
e4m3 = torch.float8_e4m3fn
h, d = 16, 64
L, B = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (8192, 4)
cu = torch.tensor([i * L for i in range(B + 1)], dtype=torch.int32, device="cuda")
q, k, v = (torch.randn(B, L, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
q8, k8, v8 = (x.to(e4m3) for x in (q, k, v))
flat = lambda x: x.reshape(B * L, h, d)
calls = {
    "fp8 varlen": lambda c: hopattn.forward_fp8_varlen(flat(q8), flat(k8), flat(v8), cu, cu, L, L, causal=c),
    "fp8 fixed": lambda c: hopattn.forward_fp8(q8, k8, v8, causal=c),
    "bf16 varlen": lambda c: hopattn.varlen_attention(flat(q), flat(k), flat(v), cu, cu, L, L, causal=c),
    "bf16 fixed": lambda c: hopattn.attention(q, k, v, causal=c),
}
if len(sys.argv) > 1 and sys.argv[1] == "ncu":
    for name in ("fp8 varlen", "fp8 fixed"):
        calls[name](True)
    torch.cuda.synchronize()
    sys.exit()
from compare import make_events_timer
timer, _ = make_events_timer(torch, reps=30, warmup=5, sleep_cycles=200_000)
print(f"L={L} B={B}")
for c in (True, False):
    t = {n: timer(lambda: f(c)) * 1e3 for n, f in calls.items()}
    print(f"causal={int(c)} " + "  ".join(f"{n} {v:.1f}" for n, v in t.items()) +
          f"  fp8 v/f {t['fp8 varlen']/t['fp8 fixed']:.3f}  bf16 v/f {t['bf16 varlen']/t['bf16 fixed']:.3f}", flush=True)
