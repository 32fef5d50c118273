#!/usr/bin/env bash
# For the next device session (prepared in session 49, not yet run): the softcap forward with the
# fixed max and O's normaliser on the tensor cores (branch softcap-fm-tcsum, 871cb42). It is meant
# to fix softcap-fm's one-key rows (pytest [*-window] dq; the new test_gpu_rows_that_see_one_key_*)
# and keep fm's measured +5-10%.
# Needs, git-ignored in this checkout:
#   .gpu-fmt/  .gpu-fm's gtest binary (the branch adds no gtest) with the branch's tests/python,
#              and as lib/libhopattn.so.xz the library fmt2 (main's objects + the branch's four
#              fwd_softcap units, scripts/variant-lib.sh with SRC_ROOT=/work/wt-fm);
#   .gpu-exp/ab/libhopattn-{main47,rs,fmb,fmt2}.so.xz (rs: the recip score alone, running max).
# carry [.gpu-fmt, .gpu-exp/ab/libhopattn-main47.so.xz, .gpu-exp/ab/libhopattn-rs.so.xz, .gpu-exp/ab/libhopattn-fmb.so.xz,
#        .gpu-exp/ab/libhopattn-fmt2.so.xz]; ~6 min.
# Merge softcap-fm-tcsum if the gtests, sanitizers and pytest pass and fmt2 keeps most of fmb's
# gain over main47.
# The phases are s48 callF.sh's (the softcap/window/local gtests, the sanitizers on a fixed-max and
# a running-max kernel, pytest -k softcap in 2 shards, the softcap A/B, the bundle), on this pack.
PACK=.gpu-fmt AB_ONLY='main47 rs fmb fmt2' AB_TAG=fmt bash docs/bench/s48-2026-12-05/callF.sh
