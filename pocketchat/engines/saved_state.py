"""The model's sequence state saved beside a conversation, so `--continue` does not re-process it.

`<conversation>.state` holds the backend's own file (llama.cpp's `llama_state_seq_save_file`:
the tokens and the state; mlx-lm's `save_prompt_cache`), `<conversation>.state.json` the key
it was made under: the model file (path, size, modification time) and the settings that shape
the state (backend, context size, KV cache type). A state whose key differs from the loaded
model's is ignored with a note, and one larger than MAX_STATE_BYTES is not written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

MAX_STATE_BYTES = 512 * 1024 * 1024

WHAT = {"model": "model file", "size": "model file", "mtime": "model file", "backend": "backend",
        "n_ctx": "context size", "kv_type": "KV cache type"}  # a key's words in a note


def state_key(model_path: str, backend: str, n_ctx: int, kv_type: str) -> dict[str, Any]:
    try:
        st = os.stat(model_path)
        size, mtime = st.st_size, int(st.st_mtime)
    except OSError:
        size, mtime = -1, -1
    return {"model": str(model_path), "size": size, "mtime": mtime, "backend": backend,
            "n_ctx": n_ctx, "kv_type": kv_type}


def meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def write_meta(path: Path, key: dict[str, Any], tokens: int) -> None:
    meta_path(path).write_text(json.dumps({**key, "tokens": tokens}))


def saved_tokens(path: Path) -> int:
    """How many tokens the state at `path` holds, by its key file (0 when unknown)."""
    try:
        return max(int(json.loads(meta_path(path).read_text()).get("tokens", 0)), 0)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


def check_meta(path: Path, key: dict[str, Any]) -> str | None:
    """None when the state at `path` was made under `key`; else why it is ignored."""
    try:
        meta = json.loads(meta_path(path).read_text())
    except (OSError, ValueError):
        return "the saved model state has no readable key; the conversation is processed again"
    differs = list(dict.fromkeys(WHAT[k] for k in key if meta.get(k) != key[k]))
    if differs:
        return (f"the saved model state was made with another {' and '.join(differs)}; "
                "the conversation is processed again")
    return None



def make_private(path: Path) -> None:
    """Readable by the owner only (the state and its key)."""
    for p in (path, meta_path(path)):
        try:
            p.chmod(0o600)
        except OSError:
            pass


def remove(path: Path) -> None:
    for p in (path, meta_path(path)):
        try:
            p.unlink()
        except OSError:
            pass
