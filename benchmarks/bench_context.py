"""Drafts and flash attention at long contexts: what a token costs after 2,000, 8,000 and 32,000
tokens of context, plain and while verifying drafts, with flash attention off and on.

    python benchmarks/bench_context.py --model PATH/TO/POCKET-35B-Q2_K-synthetic.gguf
        [--contexts 2000,8000,32000] [--tokens 12] [--steps 6] [--k 4] [--m 3] [--threads 2]

Reading 32,000 tokens of prompt at full size takes a 2-core CPU about half an hour, so the
context is not read: a real prompt of `--seed` tokens is, and its state (llama.cpp's sequence
state: the KV cells, then the recurrent state) is tiled to the context's length, cell after
cell with rising positions, and loaded back. A decode step's cost depends on how many cells it
attends over, not on what they hold; the recurrent state is the seed's.
One model loaded, three contexts over it (llama.cpp's context holds the flash-attention choice
and the snapshots, the model the weights), at each context in turn for `--rounds` rounds, so
that a moment of another process on the machine falls on all three alike:
- `off`: the engine's CPU plan with `--draft off` (no flash attention, no snapshots);
- `drafts, flash on`: `--draft auto` as it loaded before (flash attention, 8 snapshots);
- `drafts, flash off`: the same drafts without flash attention (the CPU plan now).
Per context: ms a plain token takes (prose: drafts are tried and refused, so `auto` runs plain
steps), and ms a kept token takes when every step verifies `--k` drafted tokens and keeps `--m`
(edits: the verdict forced, the rest rolled back as a rejection is), medians. The table then
says, against `off`, what each drafting load costs on prose and gains on edits.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "tests")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from pocketchat.engines.llamacpp.load import new_llama  # noqa: E402
from pocketchat.engines.llamacpp.rollback import Rollback  # noqa: E402
from support.rawdecode import RawSeq  # noqa: E402

RS = 8  # recurrent snapshots a drafting load keeps
LOADS = (("off", False, 0), ("drafts, flash on", True, RS), ("drafts, flash off", False, RS))


def tile_state(blob: bytes, cells: int, n_attn_layers: int) -> bytearray:
    """A sequence state of `cells` KV cells from one of fewer: the cells' rows repeated, their
    positions 0..cells-1; the recurrent state after the KV cache kept, at the last one (the layout of
    llama.cpp's `state_seq_get_data`: a magic and the sequence id, then the KV cache's
    `state_write`: streams, cells, each cell's position and sequence, the K rows per layer, the
    V rows, or with V transposed its elements per cell)."""
    at = 0

    def take(fmt: str):
        nonlocal at
        out = struct.unpack_from(fmt, blob, at)
        at += struct.calcsize(fmt)
        return out

    head = blob[:8]  # llama.cpp's sequence-state magic and the sequence id
    at = 8
    (n_stream,) = take("<I")
    (have,) = take("<I")
    if n_stream != 1 or have == 0:
        raise ValueError(f"a state of one stream with cells, not {n_stream} streams, {have} cells")
    meta_at = at
    for ext in (0, 12):  # llama_kv_cell_ext (x, y, tok) where the model has M-RoPE
        end = meta_at + have * (12 + ext)
        v_trans, n_layer = struct.unpack_from("<II", blob, end)
        if v_trans in (0, 1) and n_layer == n_attn_layers:
            break
    else:
        raise ValueError("the state's cells are of an unknown layout")
    cell = 12 + ext
    meta = bytearray()
    for i in range(cells):
        src = blob[meta_at + (i % have) * cell: meta_at + (i % have + 1) * cell]
        meta += struct.pack("<i", i) + src[4:]
    at = end + 8
    out = bytearray(head) + struct.pack("<II", 1, cells) + meta + struct.pack("<II", v_trans, n_layer)

    def rows(size: int) -> None:
        nonlocal at
        block = blob[at:at + have * size]
        at += have * size
        reps, rest = divmod(cells, have)
        out.extend(block * reps + block[:rest * size])

    for _ in range(n_layer):  # K: per layer a type, a row size, a row per cell
        k_type, k_row = take("<iQ")
        out.extend(struct.pack("<iQ", k_type, k_row))
        rows(k_row)
    for _ in range(n_layer):
        if not v_trans:
            v_type, v_row = take("<iQ")
            out.extend(struct.pack("<iQ", v_type, v_row))
            rows(v_row)
        else:  # per layer a type, an element size, the width; then per element a value per cell
            v_type, el, width = take("<iII")
            out.extend(struct.pack("<iII", v_type, el, width))
            for _ in range(width):
                rows(el)
    # the recurrent state: its cells (one a sequence), each a position and no sequence ids, then
    # its rows: the one cell's position moved to the tiled context's end
    (n_rs,) = struct.unpack_from("<I", blob, at)
    if n_rs != 1:
        raise ValueError(f"a recurrent state of one cell, not {n_rs}")
    out.extend(blob[at:at + 4] + struct.pack("<i", cells - 1) + blob[at + 8:])
    return out


def new_context(lib, llm, n_ctx: int, threads: int, flash: bool, rs: int):
    """Another llama.cpp context over the same loaded model (its weights held once)."""
    params = lib.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, 512, 512
    params.n_threads = params.n_threads_batch = threads
    params.flash_attn_type = 1 if flash else 0
    params.n_rs_seq = rs
    ctx = lib.llama_init_from_model(llm._model.model, params)
    if not ctx:
        raise RuntimeError("llama.cpp made no second context")
    return ctx


def seq_state(lib, ctx) -> bytes:
    size = lib.llama_state_seq_get_size(ctx, 0)
    buf = (ctypes.c_uint8 * size)()
    got = lib.llama_state_seq_get_data(ctx, buf, size, 0)
    return bytes(buf)[:got]


def at_context(seq: RawSeq, seed_state: bytes, cells: int, n_attn: int) -> None:
    lib = seq.lib
    blob = tile_state(seed_state, cells, n_attn)
    buf = (ctypes.c_uint8 * len(blob)).from_buffer(blob)  # no copy of a 0.7 GB state
    if lib.llama_state_seq_set_data(seq.ctx, buf, len(blob), 0) != len(blob):
        raise RuntimeError(f"llama.cpp did not take the tiled state of {cells} cells")
    if lib.llama_memory_seq_pos_max(seq.mem, 0) != cells - 1:
        raise RuntimeError(f"the tiled state ends at {lib.llama_memory_seq_pos_max(seq.mem, 0)}, not {cells - 1}")
    seq.pos = cells


def plain_times(seq: RawSeq, n: int) -> list[float]:
    """Seconds of each of n one-token steps."""
    token = seq.argmax(-1)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        seq.decode([token])
        token = seq.argmax(-1)
        times.append(time.perf_counter() - t)
    return times


def verify_times(seq: RawSeq, rollback: Rollback, steps: int, k: int, m: int) -> list[float]:
    """Seconds per kept token of each step that verifies k drafted tokens and keeps m (and the
    batch's token after them), the rest rolled back."""
    last = seq.argmax(-1)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        start = seq.pos
        proposal = [(last + 1 + j) % seq.n_vocab for j in range(k)]
        rollback.prepare(start)
        seq.decode([last] + proposal, all_logits=True)
        last = seq.argmax(m)
        undo = rollback.roll_back(start + 1 + m)
        seq.pos = undo.redo_from
        if undo.redo_from < start + 1 + m:  # the snapshot kind decodes the kept tokens again
            seq.decode(([0] + proposal)[undo.redo_from - start:m + 1])
        times.append((time.perf_counter() - t) / (m + 1))
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True, help="a .gguf (the full-size synthetic POCKET)")
    p.add_argument("--contexts", default="2000,8000,32000")
    p.add_argument("--seed", type=int, default=256, help="prompt tokens really read")
    p.add_argument("--tokens", type=int, default=4, help="plain tokens a load decodes in a round")
    p.add_argument("--steps", type=int, default=2, help="verifying steps a load takes in a round")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--m", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5, help="rounds over the three loads at each context")
    a = p.parse_args()
    import llama_cpp as lib

    from pocketchat.modelfile.facts import facts_of
    from pocketchat.modelfile.gguf import check_gguf

    path = Path(a.model)
    contexts = [int(c) for c in a.contexts.split(",") if c.strip()]
    n_attn = len(facts_of(check_gguf(path)).kv_layers)
    print(f"{path.name}: {a.threads} threads; contexts {contexts} (a {a.seed}-token prompt's state "
          f"tiled); edits: {a.m} of {a.k} drafted tokens kept a step", flush=True)
    with open(path, "rb") as f:  # the file's pages in first: the first load must not pay for them
        while f.read(1 << 24):
            pass
    t0 = time.perf_counter()
    llm = new_llama(path, n_ctx=max(contexts) + 64, n_batch=512, n_ubatch=512, n_threads=a.threads,
                    n_threads_batch=a.threads, flash_attn=False, verbose=False)
    print(f"loaded in {time.perf_counter() - t0:.0f} s", flush=True)
    loads = []
    for name, flash, rs in LOADS:  # one model, a context of its own for each load
        seq = RawSeq(llm)
        if (flash, rs) != (False, 0):
            seq.ctx = new_context(lib, llm, max(contexts) + 64, a.threads, flash, rs)
            seq.mem = lib.llama_get_memory(seq.ctx)
        rollback = Rollback(seq.ctx, seq.model) if rs else None
        seq.decode([(i * 7919) % seq.n_vocab for i in range(a.seed)])
        loads.append((name, seq, rollback, seq_state(lib, seq.ctx)))
    runs: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
    for n in contexts:
        for _name, seq, _, seed_state in loads:
            at_context(seq, seed_state, n, n_attn)
            seq.decode([seq.argmax(-1)])  # the first step after a load of the state: not timed
        for _ in range(a.rounds):  # in turn, so a moment of another process falls on all three
            for name, seq, rollback, _ in loads:
                plain, edit = runs.setdefault((name, n), ([], []))
                plain += plain_times(seq, a.tokens)
                if rollback is not None:
                    edit += verify_times(seq, rollback, a.steps, a.k, a.m)
        print(f"  {n:>6}: " + "; ".join(f"{name} {statistics.median(runs[(name, n)][0]) * 1000:.1f} ms"
                                        for name, *_ in loads), flush=True)
    for _, seq, _, _ in loads:
        seq.close()
        if seq.ctx is not llm._ctx.ctx:
            lib.llama_free(seq.ctx)
    llm.close()
    got = {key: (statistics.median(p) * 1000, statistics.median(e) * 1000 if e else None)
           for key, (p, e) in runs.items()}
    print()
    print(f"{'context':>8} {'off ms':>7} | {'flash on: prose':>15} {'edits':>6} | {'flash off: prose':>16} {'edits':>6}")
    for n in contexts:
        off = got[("off", n)][0]
        cells = []
        for name in ("drafts, flash on", "drafts, flash off"):
            plain, edit = got[(name, n)]
            cells.append(f"{off / plain:>15.3f}x {off / edit:>5.2f}x" if edit else "-")
        print(f"{n:>8} {off:>7.1f} | {cells[0]} | {cells[1]}")
    print("(prose: off's ms / the load's plain ms, what `auto` runs where drafts are refused; "
          "edits: off's ms / the load's ms per kept token)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
