"""The docs site builds with ``mkdocs build --strict`` and reads as a site in a real browser.

The build fails on a broken link, a page missing from the navigation or an API reference
(``::: module``) that mkdocstrings cannot resolve. The built index and one API page are then
opened in headless Chromium, as a reader would open them, and their rendered text is checked:
the API page must show a signature and a docstring summary taken from the code. Screenshots go
to ``$ARTIFACTS_DIR`` (CI) or the test's temporary folder.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS_INSTALL = 'pip install -e ".[docs]"'
BROWSER_INSTALL = "apt-get install -y chromium chromium-driver"

pytestmark = pytest.mark.slow


def _need_mkdocs() -> None:
    missing = [m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
               if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: {DOCS_INSTALL}")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built from this checkout, strictly, into a temporary folder."""
    _need_mkdocs()
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f",
                           str(ROOT / "mkdocs.yml"), "-d", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_the_strict_build_writes_every_page(site: Path) -> None:
    for page in ("index.html", "quickstart/index.html", "estimators/index.html",
                 "estimators/gigpo/index.html", "howto/estimator/index.html",
                 "api/credit/index.html", "search/search_index.json"):
        assert (site / page).is_file(), page
    api = (site / "api/credit/index.html").read_text(encoding="utf-8")
    # mkdocstrings rendered the registry from the code: the function and its docstring summary
    assert 'id="wrappers.credit.base.get_estimator"' in api
    assert "Build the estimator" in api and "keyword parameters" in api


def _browser():
    if importlib.util.find_spec("selenium") is None:
        pytest.skip('selenium not installed: pip install -e ".[browser]"')
    chromium = next((p for p in (os.environ.get("RUBRICGYM_CHROMIUM"), "/usr/bin/chromium",
                                 shutil.which("chromium")) if p and Path(p).exists()), None)
    driver_path = next((p for p in (os.environ.get("RUBRICGYM_CHROMEDRIVER"), "/usr/bin/chromedriver",
                                    shutil.which("chromedriver")) if p and Path(p).exists()), None)
    if chromium is None or driver_path is None:
        pytest.skip(f"headless Chromium not installed: {BROWSER_INSTALL}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,1600", "--allow-file-access-from-files"):
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)


def _screenshot(driver, path: Path) -> None:
    """Save a screenshot; a capture that times out on a loaded machine is tried again."""
    from selenium.common.exceptions import WebDriverException

    for attempt in range(3):
        try:
            driver.save_screenshot(str(path))
            return
        except WebDriverException:
            if attempt == 2:
                raise
            driver.refresh()


@pytest.mark.browser
def test_index_and_an_api_page_render_in_chromium(site: Path, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    shots = Path(os.environ.get("ARTIFACTS_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    driver = _browser()
    try:
        driver.get((site / "index.html").as_uri())
        assert "rubricgym" in driver.title
        body = driver.find_element(By.TAG_NAME, "body").text
        assert "Quickstart" in body and "Credit estimators" in body     # the navigation
        assert "sibling" in body                                        # the page's own text
        _screenshot(driver, shots / "docs_index.png")

        driver.get((site / "api/credit/index.html").as_uri())
        heading = driver.find_element(By.ID, "wrappers.credit.base.get_estimator")
        assert "get_estimator" in heading.text
        signatures = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".doc-signature")]
        # the signature as the code declares it, rendered by mkdocstrings
        assert any(s.startswith("get_estimator(") and "**params" in s for s in signatures), signatures[:5]
        text = driver.find_element(By.TAG_NAME, "body").text
        assert "Build the estimator name with keyword parameters" in text   # its docstring
        assert "CreditResult" in text and "register_estimator" in text
        _screenshot(driver, shots / "docs_api_credit.png")
    finally:
        driver.quit()
    assert (shots / "docs_index.png").stat().st_size > 10_000


def test_every_registered_estimator_has_its_page_and_paper_row() -> None:
    """One page per estimator (paper, equations, call, settings, diagnostics), in the navigation
    and in the paper index; a new estimator without them fails here."""
    import yaml

    from wrappers.credit import available_estimators

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    pages = {p for section in nav for p in _nav_pages(section)}
    index = (ROOT / "docs/estimators/index.md").read_text(encoding="utf-8")
    for name in available_estimators():
        page = ROOT / "docs/estimators" / f"{name}.md"
        assert page.is_file(), f"docs/estimators/{name}.md is missing"
        text = page.read_text(encoding="utf-8")
        assert f'get_estimator("{name}"' in text, f"{page.name} shows no get_estimator call"
        assert "arXiv" in text or "ICLR" in text, f"{page.name} cites no paper"
        assert "Diagnostics" in text, f"{page.name} says nothing of its diagnostics"
        assert f"estimators/{name}.md" in pages, f"{page.name} is not in mkdocs.yml's nav"
        assert f"| `{name}` |" in index, f"{name} has no row in the paper index"


def _nav_pages(entry) -> list[str]:
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, dict):
        return [p for v in entry.values() for p in _nav_pages(v)]
    return [p for v in entry for p in _nav_pages(v)]
