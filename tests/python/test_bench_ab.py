# Checks bench/ab.py's pure parts (points, --lib, the AB lines, the summary, .xz unpacking) and that
# its bad arguments are refused before any process starts, without torch or a GPU.
import importlib
import lzma

import pytest

ab = importlib.import_module("ab")  # bench/ab.py; conftest.py puts bench/ on sys.path


def test_points_parse_and_reject():
    assert ab.parse_points("128:4096:1, 64:1024:0") == [(128, 4096, 1), (64, 1024, 0)]
    for bad, word in [("128:4096", "head_dim:seqlen:causal"), ("96:4096:0", "head_dim"),
                      ("128:3000:0", "divide"), ("128:4096:2", "causal"), ("a:b:c", "head_dim:seqlen:causal")]:
        with pytest.raises(ValueError, match=word):
            ab.parse_points(bad)


def test_lib_parse_and_reject():
    assert ab.parse_lib("main=.gpu/lib/libhopattn.so") == ("main", ".gpu/lib/libhopattn.so")
    assert ab.parse_lib("new=a=b.so") == ("new", "a=b.so")
    for bad in ["main", "=x.so", "main=", "my-lib=x.so"]:
        with pytest.raises(ValueError, match="name=path"):
            ab.parse_lib(bad)


def test_env_parse_and_reject():
    # One library under two names with different knobs: each name gets its own variables.
    env = ab.parse_env(["b:HOPATTN_BWD_TAIL_SPLIT=0", "b:X=a=b", "a:Y="], ["a", "b"])
    assert env["b"] == {"HOPATTN_BWD_TAIL_SPLIT": "0", "X": "a=b"}
    assert env["a"] == {"Y": ""}
    assert env["c"] == {}  # a library without --env runs with the plain environment
    for bad, word in [("bX=1", "name:VAR=VALUE"), ("b:X", "name:VAR=VALUE"), ("b:=1", "name:VAR=VALUE"),
                      ("z:X=1", "no --lib named 'z'")]:
        with pytest.raises(ValueError, match=word):
            ab.parse_env([bad], ["a", "b"])


def test_lines_and_summary():
    lines = [
        "AB main-r1 backward d128 s2048 c1 900.0us 380.0",
        "AB new-r1 backward d128 s2048 c1 890.0us 384.0",
        "noise that is not an AB line",
        "AB main-r2 backward d128 s2048 c1 900.0us 376.0",
        "AB new-r2 backward d128 s2048 c1 890.0us 382.0",
    ]
    assert ab.parse_line(lines[0]) == ("main", 1, ("backward", "d128", "s2048", "c1"), 380.0)
    assert ab.parse_line(lines[2]) is None
    [(point, means, ratios)] = ab.summarize(lines, ["main", "new"])
    assert point == ("backward", "d128", "s2048", "c1")
    assert means == pytest.approx([378.0, 383.0])
    assert ratios == pytest.approx([1.0, 383.0 / 378.0])


def test_xz_library_is_unpacked_once(tmp_path):
    packed = tmp_path / "libx.so.xz"
    with lzma.open(packed, "wb") as f:
        f.write(b"\x7fELF fake")
    out = ab.unpacked(str(packed))
    assert out == str(tmp_path / "libx.so") and open(out, "rb").read() == b"\x7fELF fake"
    plain = tmp_path / "liby.so"
    assert ab.unpacked(str(plain)) == str(plain)  # not .xz: returned as given


@pytest.mark.parametrize("argv, word", [
    (["--lib", "main=a.so"], "two or more"),
    (["--lib", "main=a.so", "--lib", "main=b.so"], "distinct"),
    (["--lib", "main=a.so", "--lib", "new=b.so", "--points", "128:5000:0"], "divide"),
    (["--lib", "main=a.so", "--lib", "new=b.so", "--rounds", "0"], "rounds"),
    (["--lib", "main", "--lib", "new=b.so"], "name=path"),
    (["--lib", "main=/nonexistent/a.so", "--lib", "new=/nonexistent/b.so"], "not a file"),
    (["--lib", "main=/nonexistent/a.so.xz", "--lib", "new=/nonexistent/b.so"], "not a file"),
])
def test_bad_arguments_exit_before_timing(argv, word, capsys):
    with pytest.raises(SystemExit) as e:
        ab.main(argv)
    assert e.value.code == 2 and word in capsys.readouterr().err
