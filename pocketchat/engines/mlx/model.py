"""What the MLX engine checks before it loads anything: the library, the folder, the budget.

- `import_mlx()`: the lazy import of mlx and mlx-lm, `BackendMissing` with an install hint.
- `check_mlx_folder(path)`: a local MLX model folder (config.json, safetensors weights, a
  tokenizer), read without mlx; `CorruptModel` that names what is missing or broken.
- `check_metal_budget(...)`: a pure function. Metal only keeps a model resident up to the
  device's recommended working set (about 2/3 to 3/4 of the RAM; `mx.device_info()`'s
  `max_recommended_working_set_size`); a model past it pages or fails with a GPU timeout. The
  check refuses with the figures and the `sysctl iogpu.wired_limit_mb` that would make room,
  or says that no limit would help when the Mac does not have the memory.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pocketchat.errors import BackendMissing, CorruptModel, MetalBudgetExceeded, ModelNotFound
from pocketchat.modelfile.hfconfig import config_facts, text_config
from pocketchat.paths import settings
from pocketchat.types import GiB, MiB

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tiktoken.model", "vocab.json")
OS_RESERVE_BYTES = 4 * GiB  # what macOS itself needs besides the wired GPU memory
MARGIN_FRACTION = 0.10  # room for activations and MLX's buffers, past weights and KV cache
MIN_MARGIN_BYTES = 1 * GiB


def install_hint() -> str:
    if sys.platform == "darwin":
        return "Install it with: pip install mlx-lm"
    return ("Install it with: pip install 'mlx[cpu]' mlx-lm (MLX runs on the CPU here; "
            "on Linux the llama.cpp backend is usually faster)")


def import_mlx() -> tuple[Any, Any]:
    """(mlx.core, mlx_lm), or BackendMissing when they are absent or cannot load.

    transformers (mlx-lm's tokenizers) prints a notice about PyTorch to stderr when imported;
    in the worker process that would land on the chat's terminal, so it is told to keep quiet
    unless POCKETCHAT_DEBUG is set or the user chose a verbosity.
    """
    if not settings().debug:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import mlx.core as mx
        import mlx_lm
        import mlx_lm.generate  # noqa: F401 - stream_generate, imported now so errors surface here
    except (ImportError, OSError) as exc:  # OSError: a libmlx that cannot be loaded
        raise BackendMissing(f"mlx-lm is not installed or cannot load ({exc})",
                             hint=install_hint()) from exc
    return mx, mlx_lm


@dataclass(frozen=True)
class MlxFolder:
    path: Path
    config: dict
    model_type: str
    weight_files: tuple[Path, ...]
    size_bytes: int  # weights on disk

    @property
    def name(self) -> str:
        return self.path.name

    def text_config(self) -> dict:
        """The language model's part of the config (multimodal configs nest it)."""
        return text_config(self.config)

    @property
    def context_length(self) -> int | None:
        n = self.text_config().get("max_position_embeddings")
        return int(n) if isinstance(n, int) and n > 0 else None


def check_mlx_folder(path: Path) -> MlxFolder:
    """Check that `path` is a complete MLX model folder, without loading it."""
    path = Path(path)
    if not path.exists():
        raise ModelNotFound(f"no MLX model at {path}",
                            hint="Download it with `pocketchat download`, or check the path.")
    if not path.is_dir():
        raise CorruptModel(
            f"{path.name} is a file, but an MLX model is a folder (config.json, *.safetensors,"
            " tokenizer)", hint="Use the llama.cpp backend for GGUF files, or point at the folder.")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CorruptModel(f"{path} is not an MLX model: it has no config.json")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptModel(f"{path.name}/config.json cannot be read: {exc}") from exc
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise CorruptModel(f"{path.name}/config.json does not say which model it is (no model_type)")
    weights = tuple(sorted(path.glob("model*.safetensors")))
    if not weights:
        raise CorruptModel(f"{path} is not an MLX model: it has no model*.safetensors weights")
    index_file = path / "model.safetensors.index.json"
    if index_file.is_file():
        try:
            index = json.loads(index_file.read_text(encoding="utf-8"))
            wanted = set(index.get("weight_map", {}).values())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
            raise CorruptModel(f"{path.name}/model.safetensors.index.json cannot be read: {exc}") from exc
        missing = sorted(w for w in wanted if not (path / w).is_file())
        if missing:
            raise CorruptModel(f"{path.name} is incomplete: {len(missing)} weight file(s) missing"
                               f" ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})",
                               hint="Run the download again: it resumes and fetches the rest.")
    for w in weights:
        _check_safetensors_header(w)
    if not any((path / t).is_file() for t in TOKENIZER_FILES):
        raise CorruptModel(f"{path} has no tokenizer ({' or '.join(TOKENIZER_FILES[:2])})")
    return MlxFolder(path, config, config["model_type"], weights,
                     sum(w.stat().st_size for w in weights))


def _check_safetensors_header(path: Path) -> None:
    """A safetensors file starts with an 8-byte length and that many bytes of JSON; the data
    it describes must all be there (a cut download is caught here, not deep inside MLX)."""
    size = path.stat().st_size
    try:
        with path.open("rb") as f:
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n <= 1 or 8 + n > size or n > 100 * MiB:
                raise ValueError("no valid header")
            header = json.loads(f.read(n))
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"),
                  default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise CorruptModel(f"{path.parent.name}/{path.name} is not a safetensors file ({exc})") from exc
    if 8 + n + end > size:
        raise CorruptModel(f"{path.parent.name}/{path.name} is truncated: {size} bytes of "
                           f"{8 + n + end}", hint="Run the download again: it resumes.")


def kv_cache_bytes(config: dict, n_ctx: int, bytes_per_value: int = 2) -> int:
    """KV cache at `n_ctx` tokens of the model a Hugging Face style config describes; 0 when
    it cannot tell. Which layers hold one (a hybrid's full-attention layers only):
    `modelfile.hfconfig.config_facts`; the bytes: `ModelFacts.kv_cache_bytes`."""
    facts = config_facts(config)
    return facts.kv_cache_bytes(n_ctx, bytes_per_value) if facts is not None else 0


def suggested_wired_limit_mb(need_bytes: int) -> int:
    """A `iogpu.wired_limit_mb` that holds `need_bytes` with a margin, in whole 256 MB steps."""
    want = need_bytes + max(MIN_MARGIN_BYTES, int(need_bytes * MARGIN_FRACTION))
    return int(math.ceil(want / MiB / 256) * 256)


def _gb(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


def check_metal_budget(weights_bytes: int, kv_bytes: int, budget_bytes: int | None,
                       total_bytes: int | None = None) -> None:
    """Refuse (MetalBudgetExceeded) a model whose weights and KV cache exceed the Metal budget.

    `budget_bytes` is the recommended working set (None: not a Metal device, nothing to check);
    `total_bytes` the machine's memory, to tell whether raising the limit can help at all.
    """
    if not budget_bytes or budget_bytes <= 0:
        return
    need = weights_bytes + kv_bytes
    if need <= budget_bytes:
        return
    limit_mb = suggested_wired_limit_mb(need)
    what = f"{_gb(weights_bytes)} of weights" + (f" + {_gb(kv_bytes)} of KV cache" if kv_bytes else "")
    message = (f"the model needs {_gb(need)} ({what}) but Metal's recommended working set on "
               f"this Mac is {_gb(budget_bytes)}")
    if total_bytes and limit_mb * MiB > total_bytes - OS_RESERVE_BYTES:
        hint = (f"This Mac has {_gb(total_bytes)} of memory: raising the GPU limit would leave "
                "macOS too little. Pick a smaller build, a smaller --ctx, or run the GGUF build "
                "on the CPU (--backend llama.cpp).")
        limit_mb = None
    else:
        hint = (f"Raise the GPU memory limit until the next reboot with `sudo sysctl "
                f"iogpu.wired_limit_mb={limit_mb}`, or pick a smaller build or a smaller --ctx.")
    raise MetalBudgetExceeded(message, need_bytes=need, budget_bytes=budget_bytes,
                              total_bytes=total_bytes, suggested_limit_mb=limit_mb, hint=hint)
