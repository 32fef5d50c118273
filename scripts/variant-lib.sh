#!/usr/bin/env bash
# A measuring build of the library: some instantiation units recompiled with extra -D flags, the
# rest of build/'s objects as they are, linked into .gpu-exp/ab/libhopattn-NAME.so.xz for
# bench/ab.py (gpu-phases.sh ab). Build/ must be current for every other unit (ninja -C build).
#   scripts/variant-lib.sh NAME "-DFOO=1 -DBAR=2" fwd_softcap_bf16_hdim64 fwd_softcap_bf16_hdim128
# A unit is a generated instantiation's name, or a library source's path under the repository
# (src/sm90/decode/instantiate_bf16), or a host source's path with its extension (src/api/heuristics.cpp).
# SRC_ROOT=/path/to/worktree compiles those units against another checkout's src/ and include/ (a
# branch's headers) while every other object stays build/'s. JOBS (default: all at once) caps the
# parallel compiles. OBJ_DIR keeps the recompiled objects there (for SASS checks).
set -euo pipefail
name=$1 defines=$2; shift 2
src_root=${SRC_ROOT:-} jobs=${JOBS:-0}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
objs=() pids=()
for unit in "$@"; do
  case $unit in
    *.cpp) obj=CMakeFiles/hopattn.dir/$unit.o ;;  # a host source (no -D flags: they go to CUDA units)
    */*) obj=CMakeFiles/hopattn.dir/$unit.cu.o ;;
    *) obj=CMakeFiles/hopattn.dir/instantiations/$unit.cu.o ;;
  esac
  base=$(basename "$obj")
  cmd=$(ninja -C build -t commands "$obj" | tail -1)
  cmd=${cmd/-o $obj/-o $tmp/$base}
  cmd=${cmd/-MF $obj.d/-MF $tmp/$base.d}
  if [ -n "$src_root" ]; then
    cmd=${cmd//-I$PWD\/include /-I$src_root/include }
    cmd=${cmd//-I$PWD\/src /-I$src_root/src }
    cmd=${cmd//$PWD\/src\//$src_root/src/}  # a library source's own path
  fi
  if [ "$jobs" -gt 0 ]; then while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 2; done; fi
  (cd build && eval "${cmd/ -x cu / $defines -x cu }") &
  objs+=("$obj") pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done  # each compile's status: set -e stops on a failed one
link=$(ninja -C build -t commands libhopattn.so | tail -1)
for obj in "${objs[@]}"; do link=${link/ $obj / $tmp/$(basename $obj) }; done
(cd build && eval "${link/-o libhopattn.so/-o $tmp/libhopattn-$name.so}")
mkdir -p .gpu-exp/ab
xz -T2 -6 -c "$tmp/libhopattn-$name.so" > .gpu-exp/ab/libhopattn-$name.so.xz
if [ -n "${OBJ_DIR:-}" ]; then mkdir -p "$OBJ_DIR" && cp "$tmp"/*.o "$OBJ_DIR"/; fi
echo ".gpu-exp/ab/libhopattn-$name.so.xz: $* with $defines"
