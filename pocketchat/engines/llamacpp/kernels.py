"""This machine's matrix kernels at POCKET's shapes, measured through the installed llama.cpp.

The kernel probe. A small synthetic `qwen35moe` is written to a temporary folder: POCKET's
layer shapes (hidden 2048, routed experts 2048x512 with all 8 of 8 active, the DeltaNet and
attention projections, the shared expert), one layer per weight type, so each type is read in
both roles. It is loaded as the engine loads a model (`load.new_llama`: the same guards, the
same repacked or plain weight buffers) and decodes a few tokens with llama.cpp's per-operation
callback (`cb_eval`), which runs the token's graph one operation at a time and times each:

- the matrix products give, per weight type and role (`MUL_MAT_ID`: the routed experts;
  `MUL_MAT`: the dense weights), the bytes they read and the seconds they took: a rate, GB/s;
- the other operations give the time a layer spends outside its products, per layer kind;
- a step without the callback is what the graph really takes: where the timed operations add up
  to more, every figure is scaled by its share; the step less the (scaled) sum is the per-token
  constant of the decode call;
- at the most threads, a batch of `PROMPT_TOKENS` tokens read as a prompt is read: each expert
  then multiplies as many tokens as POCKET's do in a 512-token batch (512 x 8 of 256), so the
  same figures per token of the batch are the prompt's (`"prompt"` in the result).

Each figure is the best of a few tokens (a moment of another process on a core is not this
machine's kernel), at each thread count asked for (`llama_set_n_threads`, one load).

Run in its own process, so the caller never imports llama.cpp and a crash in a kernel cannot
take it down: `python -m pocketchat.engines.llamacpp.kernels --threads 2,1` prints JSON lines,
`{"progress": [done, total, what]}` while it works and `{"result": {...}}` at the end (the
`KernelProfile` JSON form, `pocketchat.types`).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from pocketchat.modelfile.qwen35 import POCKET, Qwen35Shape, add_hparams, tensor_table

# ggml types (ggml.h) measured: every type the catalog's GGUF builds use for their matrices.
F32, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ1_M = 0, 10, 11, 12, 13, 14, 16, 29
TYPES = (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ1_M, IQ2_XXS)
TYPE_NAMES = {Q2_K: "Q2_K", Q3_K: "Q3_K", Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K",
              IQ1_M: "IQ1_M", IQ2_XXS: "IQ2_XXS", F32: "F32"}
N_VOCAB = 8192  # the output product: 2048 x 8192, Q6_K as in most builds
OUTPUT_TYPE = Q6_K
EMBED_TYPE = Q4_K
ROUNDS = 10  # tokens timed per thread count and mode; each figure is the best of them
BUDGET_S = 3.5  # the probe's time from the model's writing to its last token
NOOP_OPS = ("NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE")
# Tokens of the prompt batch: what each routed expert multiplies in one of POCKET's 512-token
# batches (512 tokens x 8 experts a token / 256 experts), here where all 8 experts are active.
PROMPT_TOKENS = 16
PROMPT_ROUNDS = 3


def probe_shape(n_types: int = len(TYPES)) -> Qwen35Shape:
    """POCKET's layers, one per measured type, 8 routed experts all active."""
    return replace(POCKET, n_layer=n_types, n_expert=8, n_expert_used=8)


def layer_types(shape: Qwen35Shape, types: tuple[int, ...] = TYPES) -> dict[int, int]:
    """Layer -> the type of every matrix in it."""
    return {i: types[i % len(types)] for i in range(shape.n_layer)}


def _kept_f32(name: str, ne: tuple[int, ...]) -> bool:
    return (len(ne) < 2 or not name.endswith("weight") or name.endswith("_norm.weight")
            or "ffn_gate_inp" in name or "ssm_conv1d" in name)


def write_probe_model(path: Path, shape: Qwen35Shape | None = None,
                      types: tuple[int, ...] = TYPES) -> Path:
    """The probe's GGUF: each layer's matrices in one type. Every byte of its tensors is zero,
    a valid block of every type (scales 0, grid index 0), so the data is a hole in a sparse
    file: nothing to quantize or write (ggml's quantizer needs seconds to set up its IQ1_M
    tables) and the kernels' speed does not depend on the values."""
    import gguf
    import numpy as np

    from pocketchat.rpc.ggml import binding

    ggml = binding()
    shape = shape or probe_shape(len(types))
    by_layer = layer_types(shape, types)
    symbols = [chr(c) for c in range(ord("!"), ord("~") + 1)]
    tokens = [*symbols, *(f"<probe{i}>" for i in range(N_VOCAB - len(symbols) - 2)),
              "<|endoftext|>", "<|im_end|>"]
    w = gguf.GGUFWriter(str(path), "qwen35moe")
    w.add_name("pocketchat kernel probe")
    add_hparams(w, shape)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([int(gguf.TokenType.NORMAL)] * (len(tokens) - 2) + [int(gguf.TokenType.CONTROL)] * 2)
    w.add_token_merges(["a b"])
    w.add_bos_token_id(len(tokens) - 2)
    w.add_eos_token_id(len(tokens) - 1)
    data_bytes = 0
    for spec in tensor_table(shape, len(tokens)):
        dims = tuple(reversed(spec.ne))
        n = 1
        for d in dims:
            n *= d
        if _kept_f32(spec.name, spec.ne):
            w.add_tensor_info(spec.name, dims, np.dtype(np.float32), n * 4)
            data_bytes += w.ggml_pad(n * 4, w.data_alignment)
            continue
        if spec.name == "output.weight":
            t = OUTPUT_TYPE
        elif spec.name == "token_embd.weight":
            t = EMBED_TYPE
        else:
            t = by_layer[int(spec.name.split(".")[1])]
        row = ggml.row_bytes(t, dims[-1])
        nbytes = row * (n // dims[-1])
        w.add_tensor_info(spec.name, (*dims[:-1], row), np.dtype(np.uint8), nbytes,
                          raw_dtype=gguf.GGMLQuantizationType(t))
        data_bytes += w.ggml_pad(nbytes, w.data_alignment)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    out = w.fout[0]
    out.flush()
    out.truncate(w.ggml_pad(out.tell(), w.data_alignment) + data_bytes)  # the data: one hole
    w.close()
    return path


class _Tensor(ctypes.Structure):
    """The head of ggml's `struct ggml_tensor` (ggml.h), as far as the probe reads it."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10)]


class _Ggml:
    """The few ggml functions that name a tensor and its operation."""

    def __init__(self) -> None:
        from pocketchat.rpc.ggml import lib_dir
        from llama_cpp._ctypes_extensions import load_shared_library

        lib = load_shared_library("ggml-base", lib_dir())
        self.op_desc = lib.ggml_op_desc
        self.op_desc.restype, self.op_desc.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
        self.name = lib.ggml_get_name
        self.name.restype, self.name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
        self.nbytes = lib.ggml_nbytes
        self.nbytes.restype, self.nbytes.argtypes = ctypes.c_size_t, [ctypes.c_void_p]


class _Recorder:
    """llama.cpp's eval callback: when on, each node's compute time in graph order."""

    def __init__(self, ggml: _Ggml) -> None:
        self.ggml = ggml
        self.on = False
        self.last = 0.0
        self.nodes: list[tuple[str, str, float, int, int, str]] = []  # op, name, s, type, bytes, weight
        self._shapes: dict[int, tuple[str, str, int, int, str]] = {}

    def start(self) -> None:
        self.nodes = []
        self.last = time.perf_counter()

    def callback(self, tensor: int, ask: bool, _user: Any) -> bool:
        if ask:
            return self.on
        now = time.perf_counter()
        self.nodes.append((*self._describe(tensor), now - self.last))  # type: ignore[arg-type]
        self.last = now
        return True

    def _describe(self, tensor: int) -> tuple[str, str, int, int, str]:
        g = self.ggml
        t = _Tensor.from_address(tensor)
        op = (g.op_desc(tensor) or b"").decode()
        name = (g.name(tensor) or b"").decode()
        weight_type, nbytes, weight = -1, 0, ""
        if op in ("MUL_MAT", "MUL_MAT_ID") and t.src[0]:
            w = _Tensor.from_address(t.src[0])
            weight = (g.name(t.src[0]) or b"").decode()
            weight_type = int(w.type)
            if op == "MUL_MAT":
                nbytes = int(g.nbytes(t.src[0]))
            elif t.src[2]:
                ids = _Tensor.from_address(t.src[2])
                nbytes = min(int(ids.ne[0] * ids.ne[1]), int(w.ne[2])) * int(w.nb[2])
        return op, name, weight_type, nbytes, weight


def _layer_of(name: str) -> int | None:
    tail = name.rsplit("-", 1)
    return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else None


def summarize(rounds: list[list[tuple]], plain: list[float], shape: Qwen35Shape, tokens: int = 1) -> dict:
    """Per-node best times -> rates per (type, role) in GB/s, the seconds a layer of each kind
    spends outside its products, and the rest of the step (embedding, output norm, the call).
    `tokens`: the step's batch; every figure is then per token of it (a rate: the weights one
    token multiplies, per second of the batch's share of a token)."""
    n = min(len(r) for r in rounds)
    best = [min(r[i][5] for r in rounds) for i in range(n)]
    nodes = rounds[0][:n]
    noop = [s for (op, *_), s in zip(nodes, best, strict=False) if op in NOOP_OPS]
    dispatch = statistics.median(noop) if noop else 0.0  # a node that computes nothing
    moved: dict[tuple[str, str], list[float]] = {}
    kinds = {"recurrent": [0, 0.0], "attention": [0, 0.0]}  # layers, seconds outside products
    for i in range(shape.n_layer):
        kinds["attention" if shape.is_full_attention(i) else "recurrent"][0] += 1
    products = 0.0
    layer: int | None = None
    for (op, name, wtype, nbytes, weight, _), s in zip(nodes, best, strict=False):
        s = max(s - dispatch, 0.0)
        # graph order is layer by layer: an unnamed node belongs to the layer before it
        named = _layer_of(name)
        if named is not None:
            layer = named
        elif name and "(" not in name:
            layer = None  # the embedding, the output norm: the step's
        if tokens > 1 and weight == "output.weight":
            continue  # a batch's logits: its last token's only, as a prompt's
        if nbytes and wtype in TYPE_NAMES and weight.endswith(".weight"):
            role = "expert" if "_exps" in weight else "dense"
            acc = moved.setdefault((TYPE_NAMES[wtype], role), [0.0, 0.0])
            acc[0] += nbytes
            acc[1] += s
            products += s
            continue
        if layer is not None and layer < shape.n_layer and op not in NOOP_OPS:
            kinds["attention" if shape.is_full_attention(layer) else "recurrent"][1] += s
    # The whole step is the truth: an operation timed alone (the callback ends the graph at every
    # node) runs slower than in the graph, where the threads go from one to the next without a
    # stop. Where the timed parts add up to more than a step, each is scaled by the graph's
    # share (on a 2-core AMD EPYC 0.87 at 2 threads, 0.97 at 1).
    layers_s = sum(s for _, s in kinds.values())
    graph = min(1.0, min(plain) / (sum(best) or 1.0))
    rates: dict[str, dict[str, float]] = {}
    for (tname, role), (nbytes, s) in moved.items():
        if s > 0:
            rates.setdefault(tname, {})[role] = round(nbytes * tokens / (s * graph) / 1e9, 3)
    return {"rates": rates,
            "layer_s": {k: round(s * graph / count / tokens, 7) for k, (count, s) in kinds.items() if count},
            "step_s": round(max(min(plain) - graph * (products + layers_s), 0.0) / tokens, 6)}


def measure(threads: list[int], *, rounds: int = ROUNDS, seconds: float = BUDGET_S,
            progress: Callable[[int, int, str], None] | None = None,
            folder: Path | None = None, model: Path | None = None) -> dict:
    """Rates per weight type and role at each thread count (fewest first), from the probe
    model (written in `folder`, else a temporary one; `model`: one written before). Within
    `seconds` in all: a count not started by then is left out (the caller scales the others),
    a count started takes at least one token of each kind."""
    import llama_cpp

    from pocketchat.engines.llamacpp.load import LlamaLog, new_llama

    t0 = time.perf_counter()
    deadline = t0 + seconds
    counts = sorted(set(threads))
    steps = 3 + len(counts)
    say = progress or (lambda *_: None)
    say(0, steps, "writing the probe model")
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        shape = probe_shape()
        path = model or write_probe_model(Path(tmp) / "kernel-probe.gguf", shape)
        say(1, steps, "loading it")
        LlamaLog.install(llama_cpp)  # llama.cpp's log captured, not printed
        rec = _Recorder(_Ggml())
        cb = llama_cpp.ggml_backend_sched_eval_callback(rec.callback)

        def context_setup(params: Any) -> None:
            params.cb_eval = cb
            params.cb_eval_user_data = None

        llm = new_llama(path, n_ctx=64 + 4 * (rounds + 2) * len(counts), n_batch=32, n_ubatch=32,
                        n_threads=max(counts), n_threads_batch=max(counts), context_setup=context_setup)
        ctx = llm._ctx.ctx
        for k, n in enumerate(counts):
            if out and time.perf_counter() > deadline:
                break
            say(2 + k, steps, f"{n} thread{'s' if n > 1 else ''}")
            llama_cpp.llama_set_n_threads(ctx, n, n)
            llm.reset()
            llm.eval([1, 2, 3, 4])  # warm: the weights' pages, the threads
            recorded: list[list[tuple]] = []
            plain: list[float] = []
            while len(plain) < rounds and (not plain or time.perf_counter() < deadline):
                rec.on = True
                rec.start()
                llm.eval([5])
                recorded.append(rec.nodes)
                rec.on = False
                s = time.perf_counter()
                llm.eval([6])
                plain.append(time.perf_counter() - s)
            out[str(n)] = summarize(recorded, plain, shape)
        say(steps - 1, steps, "a prompt's batch")
        prompt = _prompt_pass(llm, rec, shape, max(counts), deadline) if out else None
        del llm
    say(steps, steps, "done")
    result = {"threads": out, "seconds": round(time.perf_counter() - t0, 2), "measured_at": round(time.time())}
    if prompt is not None:
        result["prompt"] = prompt
    return result


def _prompt_pass(llm: Any, rec: _Recorder, shape: Qwen35Shape, threads: int, deadline: float) -> dict | None:
    """The figures of a prompt's batch at `threads`, per token of it; None when the probe's time
    ran out first (one round is taken once started)."""
    import llama_cpp

    if time.perf_counter() > deadline:
        return None
    llama_cpp.llama_set_n_threads(llm._ctx.ctx, threads, threads)
    batch = [7 + i for i in range(PROMPT_TOKENS)]
    llm.reset()
    llm.eval(batch)  # warm: the batch's buffers
    recorded: list[list[tuple]] = []
    plain: list[float] = []
    while len(plain) < PROMPT_ROUNDS and (not plain or time.perf_counter() < deadline):
        llm.reset()  # each batch from position 0: the attention over the same short context
        rec.on = True
        rec.start()
        llm.eval(batch)
        recorded.append(rec.nodes)
        rec.on = False
        llm.reset()
        s = time.perf_counter()
        llm.eval(batch)
        plain.append(time.perf_counter() - s)
    return {"threads": threads, "tokens": PROMPT_TOKENS, **summarize(recorded, plain, shape, PROMPT_TOKENS)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1", help="thread counts, comma-separated")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--seconds", type=float, default=BUDGET_S, help="time budget (a count not started by then is left out)")
    ap.add_argument("--folder", type=Path, help="where the probe model is written (default: temp)")
    ap.add_argument("--model", type=Path, help="a probe model written before (`write_probe_model`)")
    args = ap.parse_args(argv)
    counts = sorted({int(x) for x in args.threads.split(",") if x.strip()})

    def progress(done: int, total: int, what: str) -> None:
        print(json.dumps({"progress": [done, total, what]}), flush=True)

    result = measure(counts, rounds=args.rounds, seconds=args.seconds, progress=progress, folder=args.folder,
                     model=args.model)
    print(json.dumps({"result": result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
