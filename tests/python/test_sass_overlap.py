# scripts/sass_overlap.py's SASS parsing, on a hand-written cuobjdump excerpt.
import pytest
from hopattn_test_support import load_script_or_skip_module

sass_overlap = load_script_or_skip_module("sass_overlap")

_SASS = """
	code for sm_90a
		Function : _ZN7hopattn4sm902ws13fwd_ws_kernelINS1_A
        /*0010*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0020*/                   MUFU.EX2 R1, R1 ;
        /*0030*/                   MUFU.EX2 R2, R2 ;
        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0050*/                   MUFU.EX2 R3, R3 ;
        /*0060*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0070*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0080*/                   MUFU.EX2 R4, R4 ;
		Function : _ZN7hopattn4sm902ws13bwd_kernelB
        /*0010*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0020*/                   MUFU.EX2 R1, R1 ;
        /*0030*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
"""


def test_counts_the_exponentials_between_each_wait_pair_of_forward_kernels_only():
    counts = sass_overlap.overlap_counts(_SASS)
    assert counts == {"_ZN7hopattn4sm902ws13fwd_ws_kernelINS1_A": [2, 0]}


def test_an_unclosed_span_is_not_counted():
    sass = "\n\t\tFunction : fwd_ws_kernelX\n WARPGROUP.DEPBAR.LE gsb0, 0x1 ;\n MUFU.EX2 R1, R1 ;\n"
    assert sass_overlap.overlap_counts(sass) == {"fwd_ws_kernelX": []}


def test_a_missing_cuobjdump_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        sass_overlap.main(["x.o", "--cuobjdump", "/nonexistent/cuobjdump"])
    assert "--cuobjdump" in capsys.readouterr().err
