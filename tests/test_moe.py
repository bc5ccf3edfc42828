"""Experts on the CPU: the override array, its patterns, and llama.cpp applying it."""

from __future__ import annotations

import ctypes

import pytest

from support.engine_makers import llama_plan
from pocketchat.engines.llamacpp import moe
pytestmark = pytest.mark.slow  # real models or processes: the second CI lane

POCKET_NAMES = [
    "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight", "blk.0.ffn_gate_exps.weight",
    "blk.12.ffn_gate_up_exps.weight", "blk.3.ffn_up_shexp.weight", "blk.3.ffn_gate_inp.weight",
    "blk.3.ffn_gate_inp_shexp.weight", "blk.3.attn_q.weight", "token_embd.weight", "output.weight",
]


def test_all_experts_match_and_nothing_else():
    got = moe.matching(POCKET_NAMES, moe.expert_patterns())
    assert got == POCKET_NAMES[:4]


def test_first_n_layers_only():
    names = [f"blk.{i}.ffn_up_exps.weight" for i in range(12)]
    got = moe.matching(names, moe.expert_patterns(2))
    assert got == ["blk.0.ffn_up_exps.weight", "blk.1.ffn_up_exps.weight"]  # not blk.10, blk.11
    assert moe.expert_patterns(0) == []
    with pytest.raises(ValueError):
        moe.expert_patterns(-1)


def test_override_array_is_null_terminated_and_points_at_the_buffer_type():
    ov = moe.build_overrides(["a", "b"], 0xABC0, "CPU")
    arr = (moe.TensorBuftOverride * 3).from_address(ov.address)
    assert [arr[0].pattern, arr[1].pattern, arr[2].pattern] == [b"a", b"b", None]
    assert arr[0].buft == arr[1].buft == 0xABC0 and not arr[2].buft
    assert len(ov) == 2
    assert ctypes.sizeof(moe.TensorBuftOverride) == 2 * ctypes.sizeof(ctypes.c_void_p)
    with pytest.raises(ValueError):
        moe.build_overrides(["a"] * 5, 0xABC0, limit=4)
    with pytest.raises(ValueError):
        moe.build_overrides(["a"], 0)


def test_cpu_buffer_type_from_the_device_registry():
    buft, name = moe.cpu_buffer_type()
    assert buft and name == "CPU"


def test_log_parser():
    lines = ["junk", "tensor blk.0.ffn_up_exps.weight (0 MiB f32) buffer type overridden to CPU"]
    assert moe.overridden_tensors(lines) == {"blk.0.ffn_up_exps.weight": "CPU"}


@pytest.mark.parametrize("cpu_moe", [True, False])
def test_tiny_moe_loads_generates_and_the_override_is_applied(tiny_moe, cpu_moe):
    from dataclasses import replace

    from pocketchat.engines.types import ChatOptions, Message
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine

    plan = replace(llama_plan(256), cpu_moe=cpu_moe, placement="gpu+cpu-experts" if cpu_moe else "cpu")
    eng = LlamaCppEngine(plan, tiny_moe, name="tiny-moe")
    try:
        experts = {f"blk.{i}.ffn_{k}_exps.weight" for i in range(2) for k in ("up", "down", "gate")}
        if cpu_moe:
            assert eng.overrides is not None and eng.overrides.patterns == moe.expert_patterns()
            assert set(eng.overridden) == experts  # llama.cpp placed every expert tensor by it
            assert set(eng.overridden.values()) == {"CPU"}
        else:
            assert eng.overrides is None and eng.overridden == {}
        chunks = list(eng.chat([Message("user", "hello")], ChatOptions(max_tokens=8, ignore_eos=True)))
        final = chunks[-1]
        assert final.finish_reason == "length" and final.stats.generated_tokens == 8
        assert "".join(c.text + c.thinking for c in chunks)
    finally:
        eng.close()


def test_n_cpu_moe_keeps_only_the_first_layers_experts_in_ram(tiny_moe):
    """--n-cpu-moe 1: llama.cpp places the experts of layer 0 by the override, layer 1's not."""
    from dataclasses import replace

    from pocketchat.engines.llamacpp.load import load_llama
    from pocketchat.modelfile.gguf import check_gguf

    plan = replace(llama_plan(256), placement="gpu+cpu-experts", n_cpu_moe=1)
    loaded = load_llama(plan, tiny_moe, check_gguf(tiny_moe))
    try:
        assert loaded.overrides is not None and loaded.overrides.patterns == moe.expert_patterns(1)
        assert set(loaded.overridden) == {f"blk.0.ffn_{k}_exps.weight" for k in ("up", "down", "gate")}
        out = loaded.llm.create_completion("hello", max_tokens=4)
        assert out["choices"][0]["text"] is not None
    finally:
        loaded.llm.close()
