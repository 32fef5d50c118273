#!/usr/bin/env bash
# A measuring build of the library: some instantiation units recompiled with extra -D flags, the
# rest of build/'s objects as they are, linked into .gpu-exp/ab/libhopattn-NAME.so.xz for
# bench/ab.py (gpu-phases.sh ab). Build/ must be current for every other unit (ninja -C build).
#   scripts/variant-lib.sh NAME "-DFOO=1 -DBAR=2" fwd_softcap_bf16_hdim64 fwd_softcap_bf16_hdim128
set -euo pipefail
name=$1 defines=$2; shift 2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
objs=()
for unit in "$@"; do
  obj=CMakeFiles/hopattn.dir/instantiations/$unit.cu.o
  cmd=$(ninja -C build -t commands "$obj" | tail -1)
  cmd=${cmd/-o $obj/-o $tmp/$unit.cu.o}
  cmd=${cmd/-MF $obj.d/-MF $tmp/$unit.cu.o.d}
  (cd build && eval "${cmd/ -x cu / $defines -x cu }") &
  objs+=("$obj")
done
wait
link=$(ninja -C build -t commands libhopattn.so | tail -1)
for obj in "${objs[@]}"; do link=${link/ $obj / $tmp/$(basename $obj) }; done
(cd build && eval "${link/-o libhopattn.so/-o $tmp/libhopattn-$name.so}")
mkdir -p .gpu-exp/ab
xz -T2 -6 -c "$tmp/libhopattn-$name.so" > .gpu-exp/ab/libhopattn-$name.so.xz
echo ".gpu-exp/ab/libhopattn-$name.so.xz: $* with $defines"
