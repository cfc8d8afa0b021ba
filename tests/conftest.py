"""Test-suite conventions.

* ``RUBRICGYM_STRICT_SKIPS=1`` (set by ``.ci/run``) turns every skip into a failure, so CI
  cannot go green by silently skipping the tests that need data, a browser or an extra.
* Tests that need the real ALFWorld games use the ``alfworld_data`` fixture: it finds them
  where users keep them (``$ALFWORLD_DATA``, default ``~/.cache/alfworld``) and otherwise
  skips with the command that installs them.
* Thread pools are limited to one thread (2-core machines; torch is much faster that way).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TOKENIZERS_PARALLELISM"):
    os.environ.setdefault(_var, "1" if _var != "TOKENIZERS_PARALLELISM" else "false")

import pytest

STRICT_SKIPS = os.environ.get("RUBRICGYM_STRICT_SKIPS", "") not in ("", "0", "false")
REPO_ROOT = Path(__file__).resolve().parents[1]
# ../shared beside the checkout, or $RUBRICGYM_SHARED (as .ci/run takes it)
SHARED_DATA = Path(os.environ.get("RUBRICGYM_SHARED") or REPO_ROOT.parent / "shared") / "data"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if STRICT_SKIPS and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under RUBRICGYM_STRICT_SKIPS=1 (CI): {reason}"


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """Accelerate keeps one process-wide state: a test that built an Accelerator (TRL's trainer,
    ours) must not fix the next test's device or mixed precision ("AcceleratorState has already
    been initialized and cannot be changed").  Reset after each test, without importing
    accelerate where no test did."""
    yield
    state = sys.modules.get("accelerate.state")
    if state is not None:
        state.AcceleratorState._reset_state(reset_partial_state=True)


def alfworld_data_dir() -> Path:
    """Where the real ALFWorld games are expected (``$ALFWORLD_DATA`` or ~/.cache/alfworld)."""
    return Path(os.environ.get("ALFWORLD_DATA", Path.home() / ".cache" / "alfworld")).expanduser()


@pytest.fixture(scope="session")
def alfworld_data() -> Path:
    """The ALFWorld data root holding ``json_2.1.1/``; skips (fails in CI) when absent."""
    root = alfworld_data_dir()
    if not (root / "json_2.1.1" / "valid_seen").is_dir():
        pytest.skip(
            f"real ALFWorld games not found under {root}; install them with "
            "`pip install -e '.[alfworld]' && rubricgym data alfworld` (ALFWorld's own "
            "alfworld-download; offline: `rubricgym data alfworld --from json_2.1.1.tar.xz`)"
        )
    return root


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The project's ``../shared/data`` (development and CI data; never committed here)."""
    return SHARED_DATA


# --- WebShop servers on 127.0.0.1 (shared by the server and browser tests) ---------------
@pytest.fixture(scope="module")
def mini_dir(tmp_path_factory) -> str:
    """The hand-checked five-product catalogue, written to a temporary folder."""
    from agent_envs.webshop.testing import write_mini_catalogue

    return str(write_mini_catalogue(tmp_path_factory.mktemp("mini")))


def _background_server(spec):
    from agent_envs.webshop.server import BackgroundServer, create_app

    return BackgroundServer(create_app(spec, tagger="lexicon"))


@pytest.fixture(scope="module")
def mini_server(mini_dir):
    """A loopback WebShop server over the mini catalogue (word-list tagger)."""
    from agent_envs.webshop.catalogue import CatalogueSpec

    with _background_server(CatalogueSpec(source=mini_dir, verify=False)) as srv:
        yield srv


@pytest.fixture(scope="module")
def gen_server():
    """A loopback WebShop server over the generated 1000-product catalogue."""
    from agent_envs.webshop.catalogue import CatalogueSpec

    with _background_server(CatalogueSpec(num_products=1000)) as srv:
        yield srv
