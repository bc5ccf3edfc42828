"""What a model spec names: the one classifier behind every command's MODEL and --model.

    starter              the embedded starter model (SmolLM2-135M-Instruct)
    POCKET-35B-Q2_K      a catalog build (any case)
    REPO:QUANT           one quantization in a Hub repository
    REPO/PATH.gguf       one file in a Hub repository
    REPO                 the single model a Hub repository holds
    PATH                 a local .gguf file or MLX folder

A spec is a local path when it exists on this machine (a file, or a folder: MLX), or when it is written as one (absolute,
`./` or `../`, `~`, a drive letter, or a bare `NAME.gguf`); else it is read as a Hub name. So
`org/repo/file.gguf` is the Hub's file unless a file of that relative path is here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pocketchat.errors import ModelNotFound
from pocketchat.types import Build

STARTER = "starter"
SpecKind = Literal["starter", "build", "quant", "file", "repo", "local"]
_PATH_PREFIXES = ("/", "./", "../", "~", ".\\", "..\\", "\\")
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


@dataclass(frozen=True)
class ModelSpec:
    """One classified spec: what kind of name it is and its parts."""

    kind: SpecKind
    text: str
    build: Build | None = None  # kind "build"
    repo_id: str | None = None  # kinds "quant", "file", "repo" (and "build": the build's repo)
    quant: str | None = None  # kind "quant"
    path: str | None = None  # kind "file": the file inside the repository
    local: Path | None = None  # kinds "local" and "starter": the path on this machine

    @property
    def starter(self) -> bool:
        """The embedded starter model."""
        return self.kind == "starter"

    @property
    def on_hub(self) -> bool:
        """A name the Hub (or the model cache) resolves, not a path on this machine."""
        return self.local is None

    @property
    def folder(self) -> bool:
        """A local MLX model folder (not a GGUF file)."""
        return self.local is not None and self.local.is_dir()


def parse_spec(spec: str | Build) -> ModelSpec:
    """Classify `spec`; ModelNotFound (with what to give instead) when it names nothing."""
    from pocketchat.select import catalog

    if isinstance(spec, Build):
        return ModelSpec("build", spec.id, build=spec, repo_id=spec.repo_id)
    text = str(spec).strip()
    if text == STARTER:
        from pocketchat.store.starter import starter_path

        return ModelSpec("starter", text, local=starter_path())
    local = _local_path(text)
    if local is not None:
        return ModelSpec("local", text, local=local)
    try:
        build = catalog.get(text)
        return ModelSpec("build", text, build=build, repo_id=build.repo_id)
    except ModelNotFound:
        pass
    repo, _, quant = text.partition(":")
    if quant and repo.count("/") == 1 and all(repo.split("/")):
        return ModelSpec("quant", text, repo_id=repo, quant=quant)
    parts = text.split("/")
    if len(parts) >= 3 and all(parts) and not quant:
        return ModelSpec("file", text, repo_id="/".join(parts[:2]), path="/".join(parts[2:]))
    if len(parts) == 2 and all(parts) and not quant:
        return ModelSpec("repo", text, repo_id=text)
    raise ModelNotFound(
        f"{text!r} is not a POCKET build, REPO:QUANT, REPO/FILE.gguf or a local file",
        hint="Known builds: " + ", ".join(b.id for b in catalog.builds())
        + ". Or e.g. --model bartowski/SomeModel-GGUF:Q4_K_M, or --model ./model.gguf",
    )


def _local_path(text: str) -> Path | None:
    """The path `text` names on this machine, or None when it is not a path; ModelNotFound when
    it is written as a path and nothing is there."""
    p = Path(text).expanduser()
    try:
        exists = p.exists()
    except OSError:  # a name too long for a path, say: not a file
        exists = False
    if exists:
        return p.resolve()
    written_as_path = text.startswith(_PATH_PREFIXES) or bool(_DRIVE.match(text)) or (
        "/" not in text and text.lower().endswith(".gguf"))
    if written_as_path:
        raise ModelNotFound(f"no model file at {p.resolve()}: no such file",
                            hint="Give the path of a .gguf file or an MLX model folder.")
    return None
