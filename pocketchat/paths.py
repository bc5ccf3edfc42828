"""Every environment variable and directory pocketchat uses, read in one place.

Variables:
  POCKETCHAT_DATA_DIR    conversations (default: platformdirs user data dir)
  POCKETCHAT_CACHE_DIR   probe caches such as the bandwidth figure, and the prompt cache's
                         states on disk (default: user cache dir)
  POCKETCHAT_CONFIG_DIR  settings the user writes: mcp.json, the tool servers (default: the
                         platformdirs user config dir)
  POCKETCHAT_DEBUG       1 = show tracebacks
  POCKETCHAT_OFFLINE     1 = never touch the network (same as --offline; HF_HUB_OFFLINE too)
  POCKETCHAT_API_KEY     the key `pocketchat serve` requires (same as --api-key)
  HF_ENDPOINT, HF_TOKEN, HF_HOME, HF_HUB_CACHE: as huggingface-hub reads them; read here too
  and passed to it explicitly, so a change after import (tests) is honoured.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

APP = "pocketchat"

_TRUE = {"1", "true", "yes", "on"}


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    cache_dir: Path
    hf_cache_dir: Path
    hf_endpoint: str
    hf_token: str | None
    debug: bool
    offline: bool
    api_key: str | None = None
    config_dir: Path = Path()

    @property
    def mcp_config(self) -> Path:
        """The tool servers the chat may use (`{"mcpServers": ...}`, pocketchat/tools/)."""
        return self.config_dir / "mcp.json"

    @property
    def conversations_dir(self) -> Path:
        return self.data_dir / "conversations"

    @property
    def screenshots_dir(self) -> Path:
        return self.data_dir / "screenshots"

    @property
    def prompt_cache_dir(self) -> Path:
        """The prompt cache's disk tier (engines/state/prompt_disk.py): one folder per model."""
        return self.cache_dir / "prompt-cache"

    @property
    def bandwidth_cache(self) -> Path:
        return self.cache_dir / "bandwidth.json"


def _hf_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface"
    )
    return Path(home).expanduser() / "hub"


@lru_cache(maxsize=1)
def settings() -> Settings:
    """The environment, read once (call `reset()` after changing it, as tests do)."""
    import platformdirs

    def _dir(var: str, default: str) -> Path:
        value = os.environ.get(var)
        return Path(value).expanduser() if value else Path(default)

    return Settings(
        data_dir=_dir("POCKETCHAT_DATA_DIR", platformdirs.user_data_dir(APP, appauthor=False)),
        cache_dir=_dir("POCKETCHAT_CACHE_DIR", platformdirs.user_cache_dir(APP, appauthor=False)),
        hf_cache_dir=_hf_cache_dir(),
        hf_endpoint=os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/"),
        hf_token=os.environ.get("HF_TOKEN") or None,
        debug=_flag("POCKETCHAT_DEBUG"),
        offline=_flag("POCKETCHAT_OFFLINE") or _flag("HF_HUB_OFFLINE"),
        api_key=os.environ.get("POCKETCHAT_API_KEY") or None,
        config_dir=_dir("POCKETCHAT_CONFIG_DIR", platformdirs.user_config_dir(APP, appauthor=False)),
    )


def reset() -> None:
    """Forget the environment read so far."""
    settings.cache_clear()
