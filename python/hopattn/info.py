# `python -m hopattn.info`: what this installation can do. Prints the package version, the loaded
# library's build (commit, GPU architectures, kernel instantiations), the GPU found, and whether
# each feature is available. Meant for bug reports and for "why does this raise NotImplementedError"
# questions, so it never fails: whatever is missing (library, GPU, torch) is reported, and the exit
# status is 0. `--json` prints the same facts as one JSON object.
import argparse
import ctypes
import json
import struct
import sys

from . import __version__, _lib, ops

# Kernel families of build_info()["kernels"], as the library names them, with a readable label.
# A family not listed here (a newer library) is still printed, under its own name.
_FAMILY_LABELS = {
    "fwd": "forward (sm90)",
    "bwd": "backward (sm90)",
    "fp8": "fp8 forward (sm90), output",
}
_VARLEN = "varlen (varlen_attention, flash_attn_varlen_func)"
_KVCACHE = "kv cache (attention_with_kvcache, flash_attn_with_kvcache)"


# --- the library's build ------------------------------------------------------------------------


def _library():
    """build_info() plus the commit and architectures, or {"error": why it did not load}."""
    try:
        info = ops.build_info()
    except _lib.LibraryNotFoundError as e:
        return {"error": str(e)}
    version = info["version"]
    info["commit"] = version.split("+", 1)[1] if "+" in version else "unknown"
    info["architectures"] = fatbin_architectures(info["library"])
    return info


_FATBIN_MAGIC = 0xBA55ED50
_FATBIN_KIND = {1: "compute", 2: "sm"}  # PTX, cubin
_FATBIN_ARCH_SPECIFIC = 0x100000  # entry flag of an arch-specific ('a') target such as sm_90a


def fatbin_architectures(path):
    """The GPU targets compiled into a shared library, e.g. ["sm_90a"], read from its .nv_fatbin
    section (the C ABI does not report them). A list with one "unknown (...)" entry if unreadable."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        section = _elf_section(data, b".nv_fatbin")
        if section is None:
            return ["unknown (no .nv_fatbin section)"]
        return sorted(_fatbin_targets(data, *section))
    except (OSError, struct.error, ValueError) as e:
        return [f"unknown ({e})"]


def _elf_section(data, wanted):
    """(offset, size) of the named section of a 64-bit little-endian ELF file, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset = headers[shstrndx][4]
    for name, _type, _flags, _addr, offset, size in headers:
        start = names_offset + name
        if data[start:data.index(b"\0", start)] == wanted:
            return offset, size
    return None


def _fatbin_targets(data, offset, size):
    """Targets named by the entries of the fatbin containers packed in data[offset:offset+size]."""
    targets = set()
    pos, end = offset, offset + size
    while pos + 16 <= end:
        magic, _version, header_size, body_size = struct.unpack_from("<IHHQ", data, pos)
        if magic != _FATBIN_MAGIC:  # containers are 8-byte aligned; skip padding
            pos += 8
            continue
        entry, body_end = pos + header_size, pos + header_size + body_size
        while entry < body_end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            flags = struct.unpack_from("<Q", data, entry + 40)[0]
            suffix = "a" if flags & _FATBIN_ARCH_SPECIFIC else ""
            targets.add(f"{_FATBIN_KIND.get(kind, f'kind{kind}')}_{arch}{suffix}")
            entry += entry_header + payload
        pos = body_end
    return targets


# --- the GPU ------------------------------------------------------------------------------------


def _device(library_loaded):
    """What GPU there is (torch's view if torch imports, else the CUDA driver's) and whether the
    library can run its sm90 kernels on it."""
    found = _torch_devices() or _driver_devices()
    usable, reason = False, "library not loaded"
    if library_loaded:
        try:
            ops.check_device()
            usable, reason = True, ""
        except _lib.HopattnError as e:
            reason = str(e)
    return {"gpus": found, "usable": usable, "reason": reason}


def _torch_devices():
    torch = _import_torch()
    if torch is None or not torch.cuda.is_available():
        return []
    return [
        f"{torch.cuda.get_device_name(i)} (sm_{''.join(map(str, torch.cuda.get_device_capability(i)))})"
        for i in range(torch.cuda.device_count())
    ]


def _driver_devices():
    """GPU names from the CUDA driver (libcuda) through ctypes; [] without a driver or a GPU."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return []
    count = ctypes.c_int()
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return []
    found = []
    for i in range(count.value):
        device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        name = ctypes.create_string_buffer(256)
        if cuda.cuDeviceGet(ctypes.byref(device), i) != 0:
            continue
        cuda.cuDeviceGetName(name, len(name), device)
        cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device)  # COMPUTE_CAPABILITY_MAJOR
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)  # COMPUTE_CAPABILITY_MINOR
        found.append(f"{name.value.decode(errors='replace')} (sm_{major.value}{minor.value})")
    return found


# --- torch --------------------------------------------------------------------------------------


def _import_torch():
    try:
        import torch
    except Exception:  # noqa: BLE001 - a broken torch install is "no torch" here, not a crash
        return None
    return torch


def _torch():
    torch = _import_torch()
    if torch is None:
        return {"version": None, "cuda": None, "custom_ops": False}
    return {
        "version": torch.__version__,
        "cuda": getattr(torch.version, "cuda", None),
        # torch.library.custom_op (torch 2.4+) is what hopattn::fwd / hopattn::bwd are built on.
        "custom_ops": hasattr(torch.library, "custom_op"),
    }


# --- features -----------------------------------------------------------------------------------


def _features(library, device, torch_info):
    """{feature: availability} for every kernel family in the build, plus the rest."""
    features = {}
    if "error" in library:
        features["sm90 kernels"] = "unknown (library not loaded)"
        features[_VARLEN] = "unknown (library not loaded)"
        features[_KVCACHE] = "unknown (library not loaded)"
    else:
        families = {}
        for family, dtype, head_dim in library["kernels"]:
            families.setdefault(family, {}).setdefault(dtype, []).append(head_dim)
        where = "available" if device["usable"] else "built (no usable GPU here)"
        for family, dtypes in families.items():
            label = _FAMILY_LABELS.get(family, family)
            for dtype, dims in sorted(dtypes.items()):
                features[f"{label} {dtype}"] = f"{where}: head_dim {', '.join(map(str, sorted(dims)))}"
        features["CPU reference (numpy)"] = "available"
        # The varlen forward runs the forward kernels (and the CPU reference for numpy); its backward
        # (torch CUDA tensors, autograd) the backward kernels. numpy stays forward only.
        features[_VARLEN] = ("forward and backward (the forward and backward kernels' dtypes and head dims; "
                             "numpy: forward only)")
        # The decode kernels are built for every dtype and head dim (src/sm90/decode/), forward only.
        features[_KVCACHE] = ("forward: contiguous or paged cache, in-place append, split-KV "
                              f"({'GPU and ' if device['usable'] else ''}CPU reference)")
    if torch_info["custom_ops"]:
        features["torch ops (torch.compile, CUDA graphs)"] = f"available (torch {torch_info['version']})"
    elif torch_info["version"]:
        features["torch ops (torch.compile, CUDA graphs)"] = f"no: torch {torch_info['version']} < 2.4"
    else:
        features["torch ops (torch.compile, CUDA graphs)"] = "no: torch not installed"
    return features


def collect():
    """Every fact `python -m hopattn.info` prints, as a dict (JSON-serialisable)."""
    library = _library()
    device = _device("error" not in library)
    torch_info = _torch()
    return {
        "hopattn": __version__,
        "library": library,
        "device": device,
        "torch": torch_info,
        "features": _features(library, device, torch_info),
    }


def format_text(facts):
    lines = [f"hopattn {facts['hopattn']}"]
    lib = facts["library"]
    if "error" in lib:
        lines.append(f"library: not loaded: {lib['error']}")
    else:
        lines += [
            f"library: {lib['library']}",
            f"  version: {lib['version']} (C ABI {lib['abi_version']})",
            f"  commit: {lib['commit']}",
            f"  architectures: {', '.join(lib['architectures']) or 'none'}",
            f"  instantiations: {', '.join(lib['instantiations']) or 'none'}",
        ]
    device = facts["device"]
    lines.append(f"GPU: {'; '.join(device['gpus']) or 'none found'}")
    lines.append("  hopattn kernels: " + ("usable" if device["usable"] else f"not usable ({device['reason']})"))
    torch_info = facts["torch"]
    lines.append(f"torch: {torch_info['version'] or 'not installed'}" +
                 (f" (CUDA {torch_info['cuda']})" if torch_info["cuda"] else ""))
    lines.append("features:")
    width = max(map(len, facts["features"]))
    lines += [f"  {name:<{width}}  {status}" for name, status in facts["features"].items()]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hopattn.info", description="What this hopattn install can do.")
    parser.add_argument("--json", action="store_true", help="print the facts as one JSON object")
    args = parser.parse_args(argv)
    facts = collect()
    print(json.dumps(facts, indent=2) if args.json else format_text(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
