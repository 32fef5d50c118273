# A/B timer for the backward alone (git-ignored): autograd.grad of hopattn.attention at the paper
# grid's shapes (bench/common.probe_inputs), each point warmed 0.3 s, then triton do_bench (median).
import sys, os, time, argparse
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(sys.argv[0]))), ".gpu", "bench"))
import torch, triton
import hopattn, common
ap = argparse.ArgumentParser()
ap.add_argument("--points", default="64:1024:1,64:2048:1,64:4096:0,128:1024:1,128:2048:1,128:4096:0,256:1024:1,256:2048:1,256:4096:0")
ap.add_argument("--tag", default="")
a = ap.parse_args()
x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
t0 = time.time()
while time.time() - t0 < 1.0: x @ x
for pt in a.points.split(","):
    d, s, c = map(int, pt.split(":"))
    b, h, flops, q, k, v = common.probe_inputs(torch, "bwd", d, s, bool(c), seed=0)
    out = hopattn.attention(q, k, v, causal=bool(c))
    dout = torch.randn_like(out)
    f = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    t1 = time.time()
    while time.time() - t1 < 0.3: f()
    ms = triton.testing.do_bench(f, warmup=20, rep=150)
    print(f"AB {a.tag} bwd d{d} s{s} c{c} {ms*1e3:.1f}us {flops / ms / 1e9:.1f}", flush=True)
