"""Make a folder read-only for a test, even as root (a read-only bind mount), or skip."""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from pathlib import Path

import pytest


def _writable(folder: Path) -> bool:
    probe = folder / f".probe-{uuid.uuid4().hex[:6]}"
    try:
        probe.write_bytes(b"")
    except OSError:
        return False
    probe.unlink()
    return True


@contextlib.contextmanager
def read_only(folder: Path):
    """`folder` cannot be written to inside the block (chmod; as root a read-only bind mount)."""
    folder.mkdir(parents=True, exist_ok=True)
    mode = folder.stat().st_mode
    os.chmod(folder, 0o555)
    mounted = False
    try:
        if _writable(folder):  # root ignores the mode
            done = subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(folder)],
                                  capture_output=True, timeout=10)
            mounted = done.returncode == 0
            if not mounted or _writable(folder):
                pytest.skip("cannot make a folder read-only here (root without mount)")
        yield folder
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], capture_output=True, timeout=10)
        os.chmod(folder, mode)
