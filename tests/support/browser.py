"""A real headless Chromium (Debian's `chromium`) driven by Playwright, for the web chat's tests.

`chromium()` skips the test, saying why, when Playwright or the browser is missing (.ci/run
installs both). The browser starts with the flags this closed network needs (no background
requests to other hosts). `Shots` keeps a screenshot of each step under test-artifacts/web/,
and `Console` collects the page's console errors and failed requests.
"""

from __future__ import annotations

import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

from support import REPO

ARTIFACTS = REPO / "test-artifacts" / "web"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


def executable() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (a Playwright `Browser`), closed after the block."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed")
    path = executable()
    if path is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, headless=True, args=FLAGS)
        try:
            yield browser
        finally:
            browser.close()


class Shots:
    """Screenshots of one test's steps: test-artifacts/web/<test>/<n>-<step>.png."""

    def __init__(self, name: str) -> None:
        self.folder = ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.n = 0

    def take(self, page: Any, step: str) -> Path:
        self.n += 1
        path = self.folder / f"{self.n:02d}-{step}.png"
        page.screenshot(path=str(path), full_page=True)
        return path


class Console:
    """The page's console errors, uncaught exceptions and failed requests."""

    def __init__(self, page: Any) -> None:
        self.errors: list[str] = []
        self.requests: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.on("request", lambda r: self.requests.append(r.url))
