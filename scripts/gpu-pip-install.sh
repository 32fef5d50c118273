#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repository root, with .cutlass/include (a copy of the CUTLASS
# include dir) carried: `pip install .` into a fresh venv, restricted to bf16 head_dim 128, then a
# smoke test of the installed package (python -m hopattn.info and one attention against SDPA).
set -uo pipefail
python3 -m venv /tmp/cleanv
# The machine's python3 is itself a venv (torch, scikit-build-core, cmake, ninja): expose its
# packages to the fresh venv through a .pth file, so only hopattn is new there.
parent=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
child=$(/tmp/cleanv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$parent" > "$child/parent-venv.pth"
export PATH=$(dirname $(which python3)):$PATH
/tmp/cleanv/bin/python -c "import hopattn" 2>&1 | tail -1
t0=$(date +%s)
CUTLASS_DIR=$PWD/.cutlass timeout 400 /tmp/cleanv/bin/pip install --no-build-isolation --no-deps . -C cmake.define.HOPATTN_HEAD_DIMS=128 -C cmake.define.HOPATTN_DTYPES=bf16 > ${OUT:-/tmp}/pip.log 2>&1
echo "pip install rc=$? in $(( $(date +%s) - t0 )) s"; tail -3 ${OUT:-/tmp}/pip.log
cd /tmp && /tmp/cleanv/bin/python -m hopattn.info 2>&1 | head -30
/tmp/cleanv/bin/python - <<'PY'
import torch, hopattn
q, k, v = (torch.randn(2, 1000, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
o = hopattn.attention(q, k, v, causal=True)
r = torch.nn.functional.scaled_dot_product_attention(*(x.transpose(1, 2).float() for x in (q, k, v)), is_causal=True).transpose(1, 2)
print("installed", hopattn.__file__, "rel err vs fp32 SDPA", ((o.float() - r).norm() / r.norm()).item())
PY
