"""Check a GGUF file before llama.cpp touches it, and read the metadata the engine needs.

llama.cpp trusts the file: a truncated download or a damaged header can end in an abort or a
segfault deep inside the loader. This module walks the whole header (magic, version, every
key/value, every tensor's shape, type and data range) through a read-only memory map and
raises `CorruptModel` with one clear sentence when anything is off.

It reads only the header, never the weights, so it takes a fraction of a second even on a
13 GB file. The constants (magic, value types, block sizes of every quantization type) come
from the `gguf` package; the walk itself is done here rather than with `gguf.GGUFReader`,
which builds a numpy view for every element of every array: 1.5 s for SmolLM2's 49k-token
vocabulary and several seconds for POCKET's 248k tokens plus merges.
"""

from __future__ import annotations

import mmap
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pocketchat.errors import CorruptModel, ModelNotFound

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SCALARS: dict[int, struct.Struct] = {
    0: struct.Struct("<B"), 1: struct.Struct("<b"), 2: struct.Struct("<H"),
    3: struct.Struct("<h"), 4: struct.Struct("<I"), 5: struct.Struct("<i"),
    6: struct.Struct("<f"), 7: struct.Struct("<?"), 10: struct.Struct("<Q"),
    11: struct.Struct("<q"), 12: struct.Struct("<d"),
}  # fmt: skip
_STRING, _ARRAY = 8, 9
SUPPORTED_VERSIONS = (2, 3)
MAX_DIMS = 4  # GGML_MAX_DIMS
EXPERT_TENSOR = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch)?exps\b")
# Numeric arrays up to this length are kept (per-layer head counts, layer patterns); longer
# ones (token scores, types) are skipped.
KEEP_ARRAY = 4096


class HeaderShort(CorruptModel):
    """The buffer ends inside the header: a prefix read (HTTP Range) needs more bytes."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as the header lists it."""

    name: str
    shape: tuple[int, ...]
    type: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class GGUFInfo:
    """What the header says: enough to load, template and describe the model."""

    path: Path
    size_bytes: int
    version: int
    arch: str
    n_tensors: int
    tensor_bytes: int
    name: str = ""
    context_length: int | None = None
    block_count: int | None = None
    expert_count: int = 0
    expert_used_count: int = 0
    expert_tensors: int = 0
    vocab_size: int = 0
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    chat_template: str | None = None
    file_type: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict, repr=False)
    arrays: dict[str, tuple[Any, ...]] = field(default_factory=dict, repr=False)
    tensors: tuple[TensorInfo, ...] = field(default=(), repr=False)
    header_bytes: int = 0
    merge_count: int = 0

    @property
    def is_moe(self) -> bool:
        return self.expert_count > 1 or self.expert_tensors > 0

    @property
    def mtp_layers(self) -> int:
        """Multi-token-prediction blocks counted in `block_count` (after the trunk's layers)."""
        n = self.metadata.get(f"{self.arch}.nextn_predict_layers", 0)
        return n if isinstance(n, int) and 0 < n < (self.block_count or 0) else 0


class _Header:
    """A bounds-checked cursor over the memory-mapped header."""

    def __init__(self, buf: Any, path: Path, *, prefix: bool = False) -> None:
        self.buf = buf
        self.size = len(buf)
        self.pos = 0
        self.path = path
        self.prefix = prefix  # the buffer is only the start of the file
        self.arrays: dict[str, tuple[Any, ...]] = {}

    def fail(self, what: str) -> CorruptModel:
        return CorruptModel(f"{self.path.name} is not a valid GGUF file: {what}")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            self.short(what)

    def short(self, what: str) -> None:
        message = f"{self.path.name} is not a valid GGUF file: the header ends early while reading {what}"
        if self.prefix:
            raise HeaderShort(message)
        raise CorruptModel(message + " (file truncated?)")

    def u32(self, what: str) -> int:
        self.need(4, what)
        value = _U32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return value

    def u64(self, what: str) -> int:
        self.need(8, what)
        value = _U64.unpack_from(self.buf, self.pos)[0]
        self.pos += 8
        return value

    def string(self, what: str) -> str:
        n = self.u64(what)
        self.need(n, what)
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def value(self, vtype: int, key: str) -> Any:
        """Read one value; arrays are skipped and returned as ("array", count)."""
        if vtype == _STRING:
            return self.string(key)
        if vtype in _SCALARS:
            s = _SCALARS[vtype]
            self.need(s.size, key)
            v = s.unpack_from(self.buf, self.pos)[0]
            self.pos += s.size
            return v
        if vtype == _ARRAY:
            etype = self.u32(key)
            count = self.u64(key)
            if etype == _STRING:
                unpack, buf, size, pos = _U64.unpack_from, self.buf, self.size, self.pos
                for _ in range(count):  # each string is >= 8 bytes: bounded by the file size
                    if pos + 8 > size:
                        pos = size + 1
                        break
                    pos += 8 + unpack(buf, pos)[0]
                if pos > size:
                    self.short(f"the array {key!r}")
                self.pos = pos
            elif etype in _SCALARS:
                s = _SCALARS[etype]
                self.need(count * s.size, f"the array {key}")
                if count <= KEEP_ARRAY and not key.startswith("tokenizer."):
                    self.arrays[key] = tuple(s.unpack_from(self.buf, self.pos + i * s.size)[0]
                                             for i in range(count))
                self.pos += count * s.size
            elif etype == _ARRAY:
                for _ in range(count):  # nested arrays: rare, walk them
                    self.value(_ARRAY, key)
            else:
                raise self.fail(f"unknown array element type {etype} in {key!r}")
            return ("array", count)
        raise self.fail(f"unknown value type {vtype} for key {key!r}")


def _quant_sizes() -> dict[int, tuple[int, int]]:
    from gguf.constants import GGML_QUANT_SIZES

    return {int(t): sizes for t, sizes in GGML_QUANT_SIZES.items()}




def check_gguf(path: Path | str) -> GGUFInfo:
    """Validate the file's structure and return its metadata; raise CorruptModel if broken."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ModelNotFound(f"model file not found: {path}") from None
    if path.is_dir():
        raise CorruptModel(f"{path} is a folder, not a GGUF file")
    if size < 24:
        raise CorruptModel(f"{path.name} is not a GGUF file: only {size} bytes")
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        return _walk(_Header(buf, path), size)


def read_header(prefix: bytes, name: str, file_size: int) -> GGUFInfo:
    """The header from the first bytes of a file of `file_size` bytes (e.g. an HTTP Range read).

    Raises HeaderShort when `prefix` ends inside the header (read more and try again), and
    CorruptModel when what is there is not a valid GGUF header.
    """
    if len(prefix) < 24 and file_size >= 24:
        raise HeaderShort(f"{name}: only {len(prefix)} bytes of the header read")
    if file_size < 24:
        raise CorruptModel(f"{name} is not a GGUF file: only {file_size} bytes")
    return _walk(_Header(prefix, Path(name), prefix=len(prefix) < file_size), file_size)


def _walk(h: _Header, size: int) -> GGUFInfo:
    """Walk magic, version, key/values and tensor infos; check every tensor fits in `size`."""
    from gguf.constants import GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC

    path, buf = h.path, h.buf
    magic = h.u32("the magic number")
    if magic != GGUF_MAGIC:
        raise CorruptModel(f"{path.name} is not a GGUF file (it starts with {bytes(buf[:4])!r}, not b'GGUF')")
    version = h.u32("the version")
    if version not in SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and (version >> 24) in SUPPORTED_VERSIONS:
            raise CorruptModel(f"{path.name} is a big-endian GGUF file; llama.cpp needs little-endian")
        raise CorruptModel(f"{path.name} has GGUF version {version}; llama.cpp reads versions 2 and 3")
    n_tensors = h.u64("the tensor count")
    n_kv = h.u64("the key count")
    if n_tensors > size // 24 or n_kv > size // 12:
        raise h.fail(f"impossible counts ({n_tensors} tensors, {n_kv} keys)")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = h.string("a metadata key")
        vtype = h.u32(f"the type of {key!r}")
        meta[key] = h.value(vtype, key)
    alignment = meta.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise h.fail(f"bad general.alignment {alignment!r}")
    tensors = _tensor_infos(h, n_tensors, alignment)
    data_start = -(-h.pos // alignment) * alignment
    data_size = size - data_start
    tensor_bytes = 0
    for t in tensors:
        tensor_bytes += t.nbytes
        if t.offset + t.nbytes > data_size:
            missing = t.offset + t.nbytes - data_size
            raise CorruptModel(
                f"{path.name} is truncated: tensor {t.name!r} needs {missing:,} bytes past the"
                f" end of the file ({size:,} bytes)"
            )
    return _info(path, size, version, meta, h.arrays, tensors, tensor_bytes, h.pos)


def _tensor_infos(h: _Header, n_tensors: int, alignment: int) -> list[TensorInfo]:
    path = h.path
    sizes = _quant_sizes()
    tensors: list[TensorInfo] = []
    seen: set[str] = set()
    for i in range(n_tensors):
        name = h.string(f"the name of tensor {i}")
        if name in seen:
            raise h.fail(f"tensor {name!r} appears twice")
        seen.add(name)
        n_dims = h.u32(f"the shape of {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise h.fail(f"tensor {name!r} has {n_dims} dimensions")
        dims = tuple(h.u64(f"the shape of {name!r}") for _ in range(n_dims))
        ttype = h.u32(f"the type of {name!r}")
        offset = h.u64(f"the offset of {name!r}")
        if ttype not in sizes:
            raise CorruptModel(
                f"{path.name}: tensor {name!r} has unknown type {ttype}; the file is damaged"
                " or needs a newer llama.cpp",
                hint="Update llama-cpp-python, or delete the file and download it again.",
            )
        block, type_size = sizes[ttype]
        if dims[0] % block:
            raise h.fail(f"tensor {name!r} row of {dims[0]} is not a multiple of {block}")
        if offset % alignment:
            raise h.fail(f"tensor {name!r} data is not aligned to {alignment} bytes")
        count = 1
        for d in dims:
            count *= d
        tensors.append(TensorInfo(name, dims, ttype, offset, count // block * type_size))
    return tensors


def _info(path: Path, size: int, version: int, meta: dict[str, Any], arrays: dict[str, tuple[Any, ...]],
          tensors: list[TensorInfo], tensor_bytes: int, header_bytes: int) -> GGUFInfo:
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise CorruptModel(f"{path.name} has no general.architecture: not a model file")

    def num(key: str) -> int | None:
        v = meta.get(key)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    tokens = meta.get("tokenizer.ggml.tokens")
    merges = meta.get("tokenizer.ggml.merges")
    template = meta.get("tokenizer.chat_template")
    scalars = {k: v for k, v in meta.items() if not isinstance(v, tuple)}
    return GGUFInfo(
        path=path,
        size_bytes=size,
        version=version,
        arch=arch,
        n_tensors=len(tensors),
        tensor_bytes=tensor_bytes,
        name=str(meta.get("general.name") or ""),
        context_length=num(f"{arch}.context_length"),
        block_count=num(f"{arch}.block_count"),
        expert_count=num(f"{arch}.expert_count") or 0,
        expert_used_count=num(f"{arch}.expert_used_count") or 0,
        expert_tensors=sum(1 for t in tensors if EXPERT_TENSOR.search(t.name)),
        vocab_size=tokens[1] if isinstance(tokens, tuple) else 0,
        bos_token_id=num("tokenizer.ggml.bos_token_id"),
        eos_token_id=num("tokenizer.ggml.eos_token_id"),
        chat_template=template if isinstance(template, str) and template.strip() else None,
        file_type=num("general.file_type"),
        metadata=scalars,
        arrays=arrays,
        tensors=tuple(tensors),
        header_bytes=header_bytes,
        merge_count=merges[1] if isinstance(merges, tuple) else 0,
    )
