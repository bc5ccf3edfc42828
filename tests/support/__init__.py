"""What the tests share: small models they write, a local Hub, engines scripted or real, the
app and terminal drivers. A pytest plugin package: `tests/conftest.py` registers the modules
that define fixtures, so a test names a fixture as a parameter and imports nothing for it."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "tests" / "profiles"
