"""Does the installed llama.cpp know a model architecture? Asked of the runtime itself.

No list is kept here: a header-only GGUF naming the architecture is loaded with `vocab_only`
in a child process (a loader that trips on a bare header must not take the caller down).
llama.cpp maps the name through its own architecture table first and says "unknown model
architecture" when the name is not there; anything else it says afterwards (a missing key of a
known architecture) means it knows the name. Answers are cached per llama-cpp-python version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pocketchat.paths import settings

CHECK_TIMEOUT_S = 60.0

_CHILD = r"""
import ctypes, sys, tempfile, os
import gguf, llama_cpp
arch = sys.argv[1]
lines = []
@llama_cpp.llama_log_callback
def on_log(level, text, user):
    lines.append(text.decode("utf-8", "replace"))
llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "arch.gguf")
    w = gguf.GGUFWriter(path, arch)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(path.encode(), params)
    if model:
        llama_cpp.llama_model_free(model)
log = "".join(lines).lower()
print("UNKNOWN" if "unknown model architecture" in log else "KNOWN")
"""


def _version() -> str | None:
    try:
        from importlib.metadata import version

        return version("llama_cpp_python")
    except Exception:  # noqa: BLE001 - not installed, or installed oddly
        return None


def _cache_file(version: str) -> Path:
    return settings().cache_dir / f"llama-archs-{version}.json"


def knows_arch(arch: str) -> bool | None:
    """True/False: whether this llama.cpp can load `arch`; None when it cannot be asked."""
    version = _version()
    if version is None:
        return None
    cache = _cache_file(version)
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if arch in known:
        return bool(known[arch])
    try:
        out = subprocess.run([sys.executable, "-c", _CHILD, arch], capture_output=True, text=True,
                             timeout=CHECK_TIMEOUT_S, env=dict(os.environ))
    except (OSError, subprocess.TimeoutExpired):
        return None
    answer = out.stdout.strip().splitlines()[-1:] if out.returncode == 0 else []
    if answer not in (["KNOWN"], ["UNKNOWN"]):
        return None
    known[arch] = answer == ["KNOWN"]
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(known, indent=1, sort_keys=True))
    except OSError:
        pass
    return known[arch]
