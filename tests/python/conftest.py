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

