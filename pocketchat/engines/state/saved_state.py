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
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

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


@contextmanager
def _idle(engine: Any) -> Iterator[None]:
    """Hold the engine between answers (state files are written under its busy lock)."""
    from pocketchat.errors import EngineClosed, EngineError

    if engine._closed:
        raise EngineClosed()
    if not engine._busy.acquire(blocking=False):
        raise EngineError("the engine is answering; save or load its state after the answer")
    try:
        yield
    finally:
        engine._busy.release()


def engine_key(engine: Any) -> dict[str, Any]:
    plan = getattr(engine, "plan", None)
    return state_key(engine.info.path, engine.info.backend, engine.n_ctx,
                     getattr(plan, "kv_type", "") or "")


def save(engine: Any, path: Path) -> int:
    """Write what `engine`'s state holds beside a conversation; the bytes written (0: nothing
    to save, or too large). A state that cannot be cut back and does not end where the next
    prompt goes on (an answer stopped, or all reasoning) is first brought back to its newest
    checkpoint, the end of the last user message."""
    with _idle(engine):
        remove(path)  # no key beside a half-written file: never loaded
        cache = engine.cache
        newest = cache.checkpoint_tokens
        if (not engine._settled and newest and not cache.trimmable
                and cache.tokens[: len(newest)] == newest):
            cache.truncate(len(newest))
        if not cache.tokens:
            return 0
        written = engine._save_file(path, MAX_STATE_BYTES)
        if written:
            write_meta(path, engine_key(engine), len(cache.tokens))
            make_private(path)  # it holds the conversation, as its JSON does
        else:
            remove(path)
        return written


def load(engine: Any, path: Path) -> str | None:
    """Restore a state `save` wrote; None when it loaded, else a note saying why not."""
    with _idle(engine):
        if not path.exists():
            return "no saved model state"
        why = check_meta(path, engine_key(engine))
        if why is not None:
            return why
        engine.cache.reset()
        tokens = engine._load_file(path)
        if tokens is None:
            engine.cache.reset()
            return "the saved model state did not load; the conversation is processed again"
        engine.cache.tokens = tokens
        return None
