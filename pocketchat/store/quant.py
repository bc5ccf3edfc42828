"""Finding files in a repo listing: GGUF quant names, split files as groups, MLX folders.

Pure functions over repo paths (no I/O), shared by the online resolver (the Hub's listing) and
the offline one (a snapshot folder on disk).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

from pocketchat.errors import AmbiguousModel, ModelNotFound

SPLIT_RE = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
MLX_PATTERNS = ("*.safetensors", "*.json", "tokenizer*", "*.jinja", "*.txt", "*.model")
_EDGE = r"[-./\s]"


def is_gguf(path: str) -> bool:
    return path.lower().endswith(".gguf")


def is_mlx_file(path: str) -> bool:
    """Whether an MLX model folder needs this file (weights, config, tokenizer, template)."""
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(name, pat) for pat in MLX_PATTERNS) and not name.startswith(".")


def gguf_groups(paths: Iterable[str]) -> dict[str, list[str]]:
    """GGUF files keyed by model: a plain file maps to itself, split parts to their shared stem."""
    groups: dict[str, list[str]] = {}
    for p in paths:
        if not is_gguf(p):
            continue
        m = SPLIT_RE.match(p)
        key = f"{m['stem']}.gguf" if m else p
        groups.setdefault(key, []).append(p)
    return {k: sorted(v) for k, v in sorted(groups.items())}


def split_complete(parts: list[str]) -> bool:
    """Whether a group holds every part its names announce (a plain file always does)."""
    m = SPLIT_RE.match(parts[0])
    if not m:
        return len(parts) == 1
    count = int(m["count"])
    have = {int(SPLIT_RE.match(p)["part"]) for p in parts if SPLIT_RE.match(p)}
    return have == set(range(1, count + 1))


def _matches(key: str, quant: str, *, prefix: bool) -> bool:
    tail = r"($|[-./\s_])" if prefix else rf"($|{_EDGE})"
    return re.search(rf"(^|{_EDGE}){re.escape(quant)}{tail}", key, re.IGNORECASE) is not None


def _label(key: str, parts: list[str]) -> str:
    return key if len(parts) == 1 else f"{key} ({len(parts)} parts)"


def find_quant(paths: Iterable[str], quant: str, *, repo_id: str) -> list[str]:
    """The files (one GGUF, or every part of a split one) whose name carries this quant.

    An exact token match (`Q4_K_M` in `x-Q4_K_M.gguf`) wins over a prefix match (`Q4_K` in
    `x-Q4_K_M.gguf`); none or several candidates raise an error that lists what the repo has.
    """
    paths = list(paths)
    groups = gguf_groups(paths)
    candidates = {k: v for k, v in groups.items() if "mmproj" not in k.lower() or "mmproj" in quant.lower()}
    hits = [k for k in candidates if _matches(k, quant, prefix=False)]
    if not hits:
        hits = [k for k in candidates if _matches(k, quant, prefix=True)]
    if not candidates:
        raise no_gguf(repo_id, paths)
    listing = ", ".join(_label(k, v) for k, v in candidates.items())
    if not hits:
        raise AmbiguousModel(
            f"{repo_id} has no GGUF file for quant {quant!r}; it has: {listing}",
            hint=f"Pick one of those, e.g. --model {repo_id}:{_quant_of(next(iter(candidates), '')) or 'Q4_K_M'}",
        )
    if len(hits) > 1:
        raise AmbiguousModel(
            f"{repo_id}:{quant} matches several files: " + ", ".join(_label(k, groups[k]) for k in hits),
            hint="Name the file instead: --model " + f"{repo_id}/{hits[0]}",
        )
    parts = groups[hits[0]]
    if not split_complete(parts):
        raise ModelNotFound(f"{repo_id}: the split file {hits[0]} is missing parts (has {len(parts)})")
    return parts


def single_model(paths: Iterable[str], *, repo_id: str) -> tuple[str, list[str]]:
    """For a bare repo id: ("gguf", its one GGUF group) or ("mlx", its MLX files); else an error."""
    paths = list(paths)
    groups = {k: v for k, v in gguf_groups(paths).items() if "mmproj" not in k.lower()}
    if len(groups) == 1:
        return "gguf", next(iter(groups.values()))
    if len(groups) > 1:
        raise AmbiguousModel(
            f"{repo_id} holds several GGUF files: " + ", ".join(_label(k, v) for k, v in groups.items()),
            hint=f"Pick one with --model {repo_id}:QUANT, e.g. {repo_id}:{_quant_of(next(iter(groups)))}",
        )
    mlx = [p for p in paths if is_mlx_file(p)]
    if any(p.endswith(".safetensors") for p in mlx):
        return "mlx", sorted(mlx)
    raise no_gguf(repo_id, paths)


def no_gguf(repo_id: str, paths: Iterable[str]) -> ModelNotFound:
    """A repo that holds no GGUF file (and no MLX weights): say what it holds and where to look."""
    paths = list(paths)
    shown = ", ".join(paths[:8]) + (f" and {len(paths) - 8} more" if len(paths) > 8 else "") if paths else "no files"
    weights = any(p.endswith((".safetensors", ".bin")) for p in paths)
    return ModelNotFound(
        f"{repo_id} holds no GGUF files (it has: {shown})",
        hint=("It holds the original weights: look for a GGUF conversion of it on the Hub (often a repo "
              "named ...-GGUF) and pass that with --model." if weights else
              "Pass a repo that holds .gguf files (often named ...-GGUF), or a local .gguf with --model."),
    )


def _quant_of(key: str) -> str:
    """A best guess at the quant token of a file name, for hints."""
    m = re.search(r"(?:^|[-.])((?:UD-)?I?Q\d[\w]*|F16|BF16|F32)(?:\.gguf)?$", key.rsplit("/", 1)[-1], re.I)
    return m.group(1) if m else ""


def matches_quant(name: str, quant: str) -> bool:
    """Whether a file name carries exactly this quant token (`Q2_K` in `x-Q2_K.gguf`, not `IQ2_K`)."""
    return _matches(name, quant, prefix=False)
