# pytest setup for the Python binding tests: makes the source-tree package importable and adds
# --require-library (or HOPATTN_REQUIRE_LIBRARY=1), which turns "library not found" skips into
# failures so CI, which always sets HOPATTN_LIBRARY, cannot pass by silently skipping everything;
# the module-scoped fixture lib (the library, or the module skipped).
import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

# An installed hopattn wins; otherwise use python/ from this checkout (the library then comes
# from $HOPATTN_LIBRARY).
try:
    import hopattn  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO_ROOT / "python"))
# bench/ helpers are plain modules, not a package.
sys.path.insert(0, str(REPO_ROOT / "bench"))

REQUIRE_ENV = "HOPATTN_REQUIRE_LIBRARY"


def pytest_addoption(parser):
    parser.addoption(
        "--require-library",
        action="store_true",
        default=False,
        help=f"fail (instead of skip) when libhopattn.so cannot be loaded; same as {REQUIRE_ENV}=1",
    )


@pytest.fixture(scope="module")
def lib():
    """The library loaded, or the calling module skipped (failed under --require-library): name it
    in the tests that need the library (hopattn_test_support.require_library_or_skip_module)."""
    from hopattn_test_support import require_library_or_skip_module

    require_library_or_skip_module()


def pytest_configure(config):
    # Test modules decide at import time, before fixtures exist, so pass the flag via the env.
    if config.getoption("--require-library"):
        os.environ[REQUIRE_ENV] = "1"



# HOPATTN_PY_SHARD=i/N keeps every N-th collected test starting at the i-th (0 <= i < N), so that N
# pytest processes (scripts/gpu-phases.sh, PY_SHARDS=N) split the suite between them. Test by test
# rather than file by file: the parametrised cases of one slow test spread over all the shards.
SHARD_ENV = "HOPATTN_PY_SHARD"


def _shard_from_env():
    text = os.environ.get(SHARD_ENV, "").strip()
    if not text:
        return None
    index, _, count = text.partition("/")
    try:
        index, count = int(index), int(count)
    except ValueError:
        index, count = -1, 0
    if count < 1 or not 0 <= index < count:
        raise pytest.UsageError(f"{SHARD_ENV} must be i/N with 0 <= i < N, got {text!r}")
    return index, count


def pytest_collection_modifyitems(config, items):
    shard = _shard_from_env()
    if shard is None:
        return
    index, count = shard
    keep = [item for n, item in enumerate(items) if n % count == index]
    dropped = [item for n, item in enumerate(items) if n % count != index]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep
