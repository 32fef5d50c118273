# `python -m hopattn.info` (python/hopattn/info.py): exits 0 and reports what it can with or without
# the library, torch and a GPU; its facts agree with build_info(), CMakeLists.txt's GPU target and
# the feature set (varlen: forward and backward; KV cache: forward).
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hopattn
from hopattn import info
from hopattn_test_support import require_library_or_skip_module

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON_DIR = Path(hopattn.__file__).resolve().parents[1]
HAS_TORCH = importlib.util.find_spec("torch") is not None


def run_info(*args, library=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PYTHON_DIR), os.environ.get("PYTHONPATH", "")]))
    if library is not None:
        env["HOPATTN_LIBRARY"] = library
    return subprocess.run([sys.executable, "-m", "hopattn.info", *args], env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def lib():
    require_library_or_skip_module()


def test_runs_without_the_library(tmp_path):
    result = run_info(library=str(tmp_path / "missing.so"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"hopattn {hopattn.__version__}\n")
    assert "library: not loaded: HOPATTN_LIBRARY=" in result.stdout
    assert re.search(r"varlen \(varlen_attention, flash_attn_varlen_func\)\s+unknown \(library not loaded\)",
                     result.stdout)
    assert re.search(r"kv cache \(attention_with_kvcache, flash_attn_with_kvcache\)\s+unknown \(library not loaded\)",
                     result.stdout)


def test_json_without_the_library_reports_torch_as_found(tmp_path):
    result = run_info("--json", library=str(tmp_path / "missing.so"))
    assert result.returncode == 0, result.stderr
    facts = json.loads(result.stdout)
    assert facts["hopattn"] == hopattn.__version__
    assert "error" in facts["library"] and facts["device"]["usable"] is False
    assert (facts["torch"]["version"] is not None) == HAS_TORCH
    assert facts["features"]["kv cache (attention_with_kvcache, flash_attn_with_kvcache)"] == "unknown (library not loaded)"


def test_text_with_the_library(lib):
    result = run_info()
    assert result.returncode == 0, result.stderr
    build = hopattn.build_info()
    assert f"  version: {build['version']} (C ABI {build['abi_version']})" in result.stdout
    assert f"  instantiations: {', '.join(build['instantiations'])}" in result.stdout
    assert "\nGPU: " in result.stdout and "\nfeatures:\n" in result.stdout
    assert re.search(r"varlen \(varlen_attention, flash_attn_varlen_func\)\s+forward and backward", result.stdout)
    assert re.search(r"kv cache \(attention_with_kvcache, flash_attn_with_kvcache\)\s+forward: contiguous or paged", result.stdout)


def test_facts_agree_with_build_info(lib):
    facts = info.collect()
    build = hopattn.build_info()
    assert facts["library"]["instantiations"] == build["instantiations"]
    commit = build["version"].partition("+")[2] or "unknown"
    assert facts["library"]["commit"] == commit
    # Every (family, dtype) of the build appears with exactly its head dims.
    expected = {}
    for family, dtype, head_dim in build["kernels"]:
        expected.setdefault((family, dtype), []).append(head_dim)
    for (family, dtype), dims in expected.items():
        label = f"{info._FAMILY_LABELS.get(family, family)} {dtype}"
        status = facts["features"][label]
        assert status.endswith(f"head_dim {', '.join(map(str, sorted(dims)))}"), (label, status)
        assert status.startswith("available" if facts["device"]["usable"] else "built (no usable GPU here)")
    assert json.loads(json.dumps(facts))["library"]["instantiations"] == build["instantiations"]  # --json works


def test_architectures_are_the_cmake_gpu_targets(lib):
    # CMakeLists.txt sets the gencode (e.g. -gencode=arch=compute_90a,code=sm_90a); the library's
    # fatbin must hold exactly those cubins (and PTX only where code=compute_XX asks for it).
    if not (REPO_ROOT / "CMakeLists.txt").is_file():
        pytest.skip("not run from a source tree (e.g. the .gpu/ pack has no CMakeLists.txt)")
    cmake = (REPO_ROOT / "CMakeLists.txt").read_text()
    match = re.search(r'set\(HOPATTN_CUDA_GENCODE "([^"]+)"\)', cmake)
    assert match, "HOPATTN_CUDA_GENCODE not found in CMakeLists.txt"
    wanted = set()
    for codes in re.findall(r"(?<![\w-])code=\[?([\w,]+)\]?", match.group(1)):  # not "gencode="
        wanted.update(codes.split(","))
    assert info.collect()["library"]["architectures"] == sorted(wanted)


def test_architectures_of_a_file_that_is_not_a_library(tmp_path):
    path = tmp_path / "not-elf.so"
    path.write_bytes(b"hello")
    assert info.fatbin_architectures(str(path))[0].startswith("unknown (")
    assert info.fatbin_architectures(str(tmp_path / "absent.so"))[0].startswith("unknown (")


def test_device_is_usable_exactly_when_hopattn_is_available(lib):
    facts = info.collect()
    assert facts["device"]["usable"] == hopattn.is_available()
    if not facts["device"]["usable"]:
        assert facts["device"]["reason"]


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch")
def test_reports_torch_ops_when_torch_is_installed():
    import torch

    facts = info.collect()
    assert facts["torch"]["version"] == torch.__version__
    status = facts["features"]["torch ops (torch.compile, CUDA graphs)"]
    if hasattr(torch.library, "custom_op"):
        assert status == f"available (torch {torch.__version__})"
    else:
        assert status.startswith("no: torch")
    if torch.cuda.is_available():
        assert facts["device"]["gpus"][0].startswith(torch.cuda.get_device_name(0))
