# scripts/gtest_report.py: the summary of sharded GPU gtest runs, on hand-written JSON reports in
# GoogleTest's format (a pass, a failure, a skip, a disabled test, an unreadable shard).
import json

import pytest
from hopattn_test_support import load_script_or_skip_module

gtest_report = load_script_or_skip_module("gtest_report")


def _case(name, time, result="COMPLETED", failure=None, status="RUN"):
    case = {"name": name, "status": status, "result": result, "time": time}
    if failure is not None:
        case["failures"] = [{"failure": failure, "type": ""}]
    return case


def _write(path, suites):
    report = {"tests": sum(len(s) for s in suites.values()), "testsuites": [
        {"name": name, "testsuite": cases} for name, cases in suites.items()]}
    path.write_text(json.dumps(report))
    return str(path)


@pytest.fixture
def shards(tmp_path):
    a = _write(tmp_path / "gt-0.json", {
        "Sm90/ForwardVsReference": [_case("bf16_d64", "2.5s"), _case("bf16_d128", "0.5s", "SKIPPED")],
        "KvCache": [_case("Paged", "1s", failure="test_kvcache.cpp:10\nValue of: ok\n  Actual: false")],
    })
    b = _write(tmp_path / "gt-1.json", {
        "Sm90/ForwardVsReference": [_case("bf16_d256", "4s")],
        "Disabled": [_case("DISABLED_x", "0s", status="NOTRUN")],
    })
    return a, b


def test_counts_failures_and_time_over_shards(shards, capsys):
    assert gtest_report.main(list(shards) + ["--top", "2"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "gtest: 2 passed, 1 failed, 1 skipped, 1 disabled, 5 in all; 8.0 s of test time"
    assert "FAILED KvCache.Paged: test_kvcache.cpp:10" in out
    suites = out.index("slowest suites (of 3):")
    assert "7.0 s" in out[suites + 1] and "Sm90/ForwardVsReference" in out[suites + 1]
    tests = out.index("slowest tests:")
    assert out[tests + 1].endswith("Sm90/ForwardVsReference.bf16_d256")
    assert out[tests + 2].endswith("Sm90/ForwardVsReference.bf16_d64")
    assert len(out) == tests + 3  # --top 2


def test_all_passed_is_status_zero(tmp_path, capsys):
    ok = _write(tmp_path / "ok.json", {"S": [_case("a", "0.1s"), _case("b", "0s", "SKIPPED")]})
    assert gtest_report.main([ok, "--top", "0"]) == 0
    assert capsys.readouterr().out.splitlines() == ["gtest: 1 passed, 0 failed, 1 skipped, 2 in all; 0.1 s of test time"]


def test_a_missing_or_truncated_shard_is_a_failure(tmp_path, capsys):
    # A shard killed by its timeout writes no JSON (or half of one): that must not read as green.
    ok = _write(tmp_path / "ok.json", {"S": [_case("a", "0.1s")]})
    (tmp_path / "cut.json").write_text('{"testsuites": [')
    assert gtest_report.main([ok, str(tmp_path / "cut.json"), str(tmp_path / "absent.json")]) == 1
    out = capsys.readouterr().out
    assert out.count("UNREADABLE") == 2 and "absent.json" in out


@pytest.mark.parametrize("knob,value", [("GT_SHARDS", "four"), ("GT_SHARDS", "0"), ("PY_SHARDS", "-2")])
def test_gpu_phases_refuses_a_bad_shard_count(knob, value):
    # scripts/gpu-phases.sh checks its process counts before it touches a pack.
    import os
    import pathlib
    import subprocess

    root = pathlib.Path(__file__).resolve().parents[2]
    env = dict(os.environ, **{knob: value})
    r = subprocess.run(["bash", str(root / "scripts" / "gpu-phases.sh"), "gt"], cwd=root, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"{knob} must be a positive integer, got '{value}'" in r.stderr, (r.returncode, r.stderr)


def test_gpu_phases_bundle_puts_every_output_file_in_one_archive(tmp_path):
    # The device tool returns a few files per call: `bundle` leaves one archive holding them all.
    import os
    import pathlib
    import subprocess
    import tarfile

    root = pathlib.Path(__file__).resolve().parents[2]
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    names = {f"gt-{i}.json": str(i) for i in range(12)}
    for name, text in names.items():
        (out / name).write_text(text)
    (out / "sub" / "grid.md").write_text("grid")
    env = dict(os.environ, OUT=str(out), PACK=".no-such-pack")
    r = subprocess.run(["bash", str(root / "scripts" / "gpu-phases.sh"), "bundle"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "13 files in logs.tgz" in r.stdout, (r.stdout, r.stderr)
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == ["logs.tgz"]
    with tarfile.open(out / "logs.tgz") as t:
        members = {pathlib.PurePath(m.name).as_posix().lstrip("./"): t.extractfile(m).read().decode()
                   for m in t.getmembers() if m.isfile()}
    assert members == {**names, "sub/grid.md": "grid"}


def _collect(shard, files):
    """Node ids pytest collects from tests/python/<files> under HOPATTN_PY_SHARD=shard (conftest.py)."""
    import os
    import pathlib
    import subprocess
    import sys

    here = pathlib.Path(__file__).resolve().parent
    env = dict(os.environ, HOPATTN_PY_SHARD=shard)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", *files],
                       cwd=here, env=env, capture_output=True, text=True, timeout=120)
    ids = [line for line in r.stdout.splitlines() if "::" in line]
    return r.returncode, ids, r.stdout + r.stderr


def test_py_shards_split_the_collected_tests_test_by_test():
    # gpu-phases.sh PY_SHARDS=N runs N pytest processes with HOPATTN_PY_SHARD=i/N: together they
    # must run every test once, and one file's cases must spread over the shards.
    files = ["test_merge.py", "test_gtest_report.py"]
    rc, whole, log = _collect("", files)
    assert rc == 0 and len(whole) > 20, log
    parts = [_collect(f"{i}/3", files) for i in range(3)]
    assert all(p[0] == 0 for p in parts), [p[2] for p in parts]
    ids = [p[1] for p in parts]
    assert sorted(sum(ids, [])) == sorted(whole)
    assert max(map(len, ids)) - min(map(len, ids)) <= 1
    assert all(any("test_merge.py::" in i for i in part) for part in ids)


@pytest.mark.parametrize("value", ["3/3", "-1/2", "1", "a/b", "0/0"])
def test_py_shard_refuses_a_bad_value_by_name(value):
    rc, _, log = _collect(value, ["test_merge.py"])
    assert rc != 0 and "HOPATTN_PY_SHARD must be i/N with 0 <= i < N" in log, log
