"""The GGUF header check: valid files give their metadata, broken ones a clear CorruptModel."""

from __future__ import annotations

import struct
import time

import pytest

from pocketchat.errors import CorruptModel, ModelNotFound
from pocketchat.modelfile.gguf import check_gguf
def copy_prefix(src, dst, n):
    with open(src, "rb") as f:
        data = f.read(n)
    dst.write_bytes(data)
    return dst


def test_starter_metadata(starter_gguf):
    t = time.perf_counter()
    info = check_gguf(starter_gguf)
    assert time.perf_counter() - t < 1.0
    assert info.arch == "llama" and info.version == 3
    assert info.n_tensors == 272 and info.context_length == 8192 and info.block_count == 30
    assert info.vocab_size == 49152 and info.eos_token_id == 2
    assert "<|im_start|>" in info.chat_template
    assert not info.is_moe and info.expert_tensors == 0
    assert 0 < info.tensor_bytes < info.size_bytes
    assert info.metadata["general.architecture"] == "llama"


def test_tiny_moe_metadata(tiny_moe):
    info = check_gguf(tiny_moe)
    assert info.arch == "qwen3moe" and info.is_moe
    assert info.expert_count == 4 and info.expert_used_count == 2
    assert info.expert_tensors == 6  # up, gate, down in two layers


@pytest.mark.parametrize("fraction", [0.999, 0.5, 0.02])
def test_truncated_file(starter_gguf, tmp_path, fraction):
    size = starter_gguf.stat().st_size
    bad = copy_prefix(starter_gguf, tmp_path / "cut.gguf", int(size * fraction))
    with pytest.raises(CorruptModel) as info:
        check_gguf(bad)
    assert "truncated" in info.value.message
    assert "cut.gguf" in info.value.message
    assert info.value.hint


def test_header_cut_inside_the_vocabulary(starter_gguf, tmp_path):
    bad = copy_prefix(starter_gguf, tmp_path / "cut.gguf", 300_000)
    with pytest.raises(CorruptModel, match="ends early"):
        check_gguf(bad)


def test_not_gguf(tmp_path):
    bad = tmp_path / "page.gguf"
    bad.write_bytes(b"<html><body>404 Not Found</body></html>" * 4)
    with pytest.raises(CorruptModel, match="not a GGUF file"):
        check_gguf(bad)


def test_empty_and_missing(tmp_path):
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(CorruptModel, match="0 bytes"):
        check_gguf(tmp_path / "empty.gguf")
    with pytest.raises(ModelNotFound):
        check_gguf(tmp_path / "nope.gguf")


def test_unsupported_version(starter_gguf, tmp_path):
    data = bytearray(starter_gguf.read_bytes()[:4096])
    data[4:8] = struct.pack("<I", 7)
    (tmp_path / "v7.gguf").write_bytes(bytes(data))
    with pytest.raises(CorruptModel, match="version 7"):
        check_gguf(tmp_path / "v7.gguf")


def test_corrupt_value_type_in_header(starter_gguf, tmp_path):
    data = bytearray(starter_gguf.read_bytes())
    # the first key starts at byte 24: u64 length, the key, then its u32 value type
    klen = struct.unpack_from("<Q", data, 24)[0]
    struct.pack_into("<I", data, 24 + 8 + klen, 99)
    (tmp_path / "bad.gguf").write_bytes(bytes(data))
    with pytest.raises(CorruptModel, match="unknown value type 99"):
        check_gguf(tmp_path / "bad.gguf")


def test_corrupt_tensor_type(tiny_moe, tmp_path):
    data = bytearray(tiny_moe.read_bytes())
    name = b"token_embd.weight"
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    n_dims = struct.unpack_from("<I", data, at)[0]
    struct.pack_into("<I", data, at + 4 + 8 * n_dims, 250)
    (tmp_path / "bad.gguf").write_bytes(bytes(data))
    with pytest.raises(CorruptModel, match="unknown type 250"):
        check_gguf(tmp_path / "bad.gguf")


def test_engine_refuses_a_truncated_file_before_llama_cpp_sees_it(starter_gguf, tmp_path):
    from support.engine_makers import llama_plan
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine

    bad = copy_prefix(starter_gguf, tmp_path / "cut.gguf", starter_gguf.stat().st_size - 1000)
    with pytest.raises(CorruptModel, match="truncated"):
        LlamaCppEngine(llama_plan(256), bad)
