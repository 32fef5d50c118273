#!/usr/bin/env bash
# Session 50 (prepared, not yet run): the softcap fixed max with O's normaliser as an asynchronous
# WGMMA (branch softcap-fm-wgsum; library wgs = main's objects + its four fwd_softcap units). P x a
# (keys x 8) tile of ones in shared memory, an N = 8 WGMMA batched with the next S GEMM (or the
# tile's last P V), instead of fmt2's mma.sync (HMMA), which waits for the tensor cores beside the
# other warpgroups' WGMMAs. Key loops: d64 1387 (fmt2 1353, fm 1334; LDL/STL 71 against 56 / 49),
# d128 1334 (fmt2 1317, fm 1304; none). Prediction: d128 near fmb (+6-8% over main47, fmt2 +0-4%);
# d64 about fmt2 (+2-5%), its spills eating what the HMMA's stall cost.
# 1. Correctness on wgs with .gpu-m50's tests (s50-merge's gtest binary and tests/python; the library
#    swapped): the softcap/window/local gtests, memcheck/racecheck on a fixed-max and a running-max
#    kernel, pytest -k softcap (includes out == v bitwise on one-key rows).
# 2. A/B main47 / fmb / fmt2 / wgs, softcap 30, 3 rounds, at six points.
# carry [.gpu-m50, .gpu-exp/ab/libhopattn-{main47,fmb,fmt2,wgs}.so.xz]; ~6 min.
# The phases are s48 callF.sh's (as s49 callS.sh runs them), on this pack, with wgs as the library
# under test and six A/B points.
xz -T8 -dkf .gpu-exp/ab/libhopattn-wgs.so.xz
PACK=${PACK:-.gpu-m50} LIB=$PWD/.gpu-exp/ab/libhopattn-wgs.so AB_ONLY='main47 fmb fmt2 wgs' AB_TAG=wgs \
  AB_POINTS=64:4096:0,64:1024:1,64:16384:0,128:1024:0,128:4096:1,128:16384:0 bash docs/bench/s48-2026-12-05/callF.sh
