"""Shared fixtures: every test runs with its own data, cache and Hugging Face directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from pocketchat import paths

# The modules of the support package that define fixtures (hub, tiny_moe, tiny_qwen35...).
pytest_plugins = ["support.hubserver", "support.tinymoe", "support.tinyqwen35"]


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory, monkeypatch):
    """Redirect every directory pocketchat and huggingface-hub use; no real network."""
    root = tmp_path_factory.mktemp("home")
    for var, sub in [
        ("POCKETCHAT_DATA_DIR", "data"),
        ("POCKETCHAT_CACHE_DIR", "cache"),
        ("POCKETCHAT_CONFIG_DIR", "config"),
        ("HF_HOME", "hf"),
        ("HF_HUB_CACHE", "hf/hub"),
    ]:
        (root / sub).mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(var, str(root / sub))
    # Anything that forgets to use the test server gets a refused connection, not the internet.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("POCKETCHAT_DEBUG", raising=False)
    monkeypatch.delenv("POCKETCHAT_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("POCKETCHAT_API_KEY", raising=False)
    paths.reset()
    yield root
    paths.reset()


@pytest.fixture(scope="session")
def starter_gguf() -> Path:
    from pocketchat.store.starter import starter_path

    return starter_path()
