# A/B timer (git-ignored): hopattn ops at the paper grid's shapes through bench/ncu_shape.make_call,
# each point warmed 0.3 s then triton do_bench (median). One library per process (HOPATTN_LIBRARY).
import sys, os, time, argparse
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(sys.argv[0]))), ".gpu", "bench"))
import torch, triton
import hopattn, common, ncu_shape
ap = argparse.ArgumentParser()
ap.add_argument("--ops", default="attention,forward_fp8")
ap.add_argument("--hdims", default="64,128,256")
ap.add_argument("--seqlens", default="1024,4096,16384")
ap.add_argument("--causal", default="0,1")
ap.add_argument("--tag", default="")
a = ap.parse_args()
x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
t0 = time.time()
while time.time() - t0 < 1.0: x @ x
for op in a.ops.split(","):
  for d in map(int, a.hdims.split(",")):
    for s in map(int, a.seqlens.split(",")):
      for c in map(int, a.causal.split(",")):
        args = ncu_shape.parse_args(["--op", op, "--hdim", str(d), "--seqlen", str(s)] + (["--causal"] if c else []))
        b, s_, h, d_ = ncu_shape.shape(args)
        f = ncu_shape.make_call(torch, hopattn, args)
        t1 = time.time()
        while time.time() - t1 < 0.3: f()
        ms = triton.testing.do_bench(f, warmup=20, rep=150)
        tf = common.attention_flops(b, h, s_, s_, d_, bool(c)) / ms / 1e9
        print(f"AB {a.tag} {op} d{d} s{s} c{c} {ms*1e3:.1f}us {tf:.1f}", flush=True)
