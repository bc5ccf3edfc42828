"""The Python time per generated token, path by path, against a bare llama-cpp-python loop.

Every path runs the starter (SmolLM2-135M, or --model) on one plan (the starter's, `--ctx`
tokens of context, the plan's n_batch and threads (pinned: --adaptive leaves them to the engine's
policy), the starter's sampling, seed 1, ignore_eos:
each answer is exactly --tokens tokens), and each of its answers is paired with one answer of
the bare loop right before it (median of --pairs alternating pairs, so both see the same load):
  bare     llama_decode + the same llama.cpp sampler chain, in this process: no pocketchat
  engine   LlamaCppEngine.chat in this process (the backend alone)
  bench    what `pocketchat bench`'s tg test runs: commands.bench.bench_tg on its worker engine
  bench30  the same on a worker at child.FLUSH_SECONDS (30 ms) apart, as `bench` opened it before
  worker   WorkerEngine at the chat's chunk pace (ui.streaming.CHUNK_INTERVAL): the chat's path
  tmux     `pocketchat --model starter --bench-tokens N` in a tmux pane: the tok/s on the line
           under the answer (the whole answer's, as the others are)
  serve4   `pocketchat serve --parallel 4`, one streaming client (the `openai` client)
  serve1   the same with --parallel 1
  serve4http  serve4 read by a plain HTTP client (http.client, the SSE lines parsed by hand):
           the server's own cost, without the `openai` client's parsing beside it
  serve4@MS   any serve path at `serve --stream-interval MS` (default 100: an event every 100 ms)
  web      the web chat in a headless Chromium (Playwright) on `serve --parallel 4`: a message
           sent in the page, its answer streamed and rendered there; tok/s is the decode rate
           the answer's figures give (its length is the model's own: no ignore_eos in the page)
tok/s is the consumer's wall clock: tokens decoded after the first token arrived / seconds from
then to the last chunk (the engine decodes the last sampled token too, as the bare loop does);
tmux's is the one the screen prints under the answer.
`shown` is the figure the path prints (bench: its tg figure, from llama.cpp's counters; the
worker and tmux: the status bar's, the last seconds' rate; serve: the response's
predicted_per_second). `decode` is llama_decode's own time per token (llama.cpp's counters of
the same answer); `py` = wall per token - decode per token: the Python (and waiting) per token.
`+us` is the time per token over the paired bare run (median of the pairs). `host` is the CPU per
token (us) of what runs beside the model's process on the same cores: the benchmark process as
the worker's reader (bench, worker), the chat's UI process (tmux), the server's process and
the client (serve): on a machine whose cores all decode, it is taken from llama.cpp's threads.

    env PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_overhead.py
    ... [--tokens 128] [--pairs 5] [--adaptive] [--paths engine,bench,worker,tmux,serve4,serve1] [--profile]

Goals: bench >= 0.97 of bare; the chat in tmux and serve4 >= 0.97 of bench (`--against bench`
pairs each run with a `bench` run instead of the bare loop: that ratio, measured directly).
`--profile` instead runs the in-process engine under cProfile and prints where the Python goes.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from rawdecode import decode_run  # noqa: E402

PROMPT = "Write a long story about a lighthouse keeper and a storm."
PATHS = ("engine", "bench", "worker", "tmux", "serve4", "serve1")  # and "bench30" when asked


@dataclass
class Run:
    """One answer: wall tok/s, llama_decode's seconds per token (None: not known), the path's
    own figure (None: it shows none)."""

    tok_s: float
    decode_s: float | None = None
    shown: float | None = None
    host_cpu: float | None = None  # CPU seconds per token of the process(es) around the model's


@dataclass
class Series:
    path: str
    runs: list[Run] = field(default_factory=list)
    bare: list[Run] = field(default_factory=list)
    note: str = ""

    def row(self) -> str:
        med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
        ratios = [r.tok_s / b.tok_s for r, b in zip(self.runs, self.bare, strict=False)]
        shown = [r.shown for r in self.runs if r.shown]
        shown_s = f"{med(shown):7.1f}" if shown else f"{'-':>7}"
        return (f"{self.path:<8} {med([r.tok_s for r in self.runs]):7.1f} "
                f"{med([b.tok_s for b in self.bare]):7.1f} {med(ratios):6.3f} "
                f"{_num(med([(1 / r.tok_s - 1 / b.tok_s) * 1e6 for r, b in zip(self.runs, self.bare, strict=False)]), '+'):>7} "
                f"{_num(_decode_us(self.runs)):>7} {_num(_decode_us(self.bare)):>7} "
                f"{_num(_py_us(self.runs)):>6} {_num(_py_us(self.bare)):>6} {shown_s} "
                f"{_num(_host_us(self.runs)):>5}  "
                f"pairs {' '.join(f'{x:.2f}' for x in ratios)} {self.note}")


def _decode_us(runs: list[Run]) -> float:
    known = [r.decode_s * 1e6 for r in runs if r.decode_s]
    return statistics.median(known) if known else float("nan")


def _host_us(runs: list[Run]) -> float:
    known = [r.host_cpu * 1e6 for r in runs if r.host_cpu is not None]
    return statistics.median(known) if known else float("nan")


def _py_us(runs: list[Run]) -> float:
    """Wall per token less llama_decode's own time per token (median of the runs)."""
    known = [1e6 / r.tok_s - r.decode_s * 1e6 for r in runs if r.decode_s]
    return statistics.median(known) if known else float("nan")


def _num(x: float, sign: str = "") -> str:
    return "-" if x != x else f"{x:{sign}.0f}"


HEADER = (f"{'path':<8} {'tok/s':>7} {'bare':>7} {'ratio':>6} {'+us':>7} {'decode':>7} "
          f"{'(bare)':>7} {'py':>6} {'(bare)':>6} {'shown':>7} {'host':>5}")


# -- the plan, the options ---------------------------------------------------------------------

def choose(model: str, ctx: int, threads: int | None, draft: str | None = None):
    from pocketchat.choose.model import choose_model
    from pocketchat.choose.selection import Selection

    return choose_model(Selection(model=model, ctx=ctx, threads=threads, draft=draft,
                                  offline=True, yes=True))


def options(tokens: int):
    """The answer settings of `bench`'s tg test and of the chat's --bench-tokens."""
    from pocketchat.commands.chat import answer_options

    return answer_options(argparse.Namespace(bench_tokens=tokens))


# -- (a) the bare loop ---------------------------------------------------------------------------

class Bare:
    """llama-cpp-python's low-level calls only: the plan's context, the engine's sampler chain."""

    def __init__(self, plan: Any, path: Path, sampling: Any, thinking: bool = True) -> None:
        import llama_cpp

        from pocketchat.engines.llamacpp.engine import PENALTY_LAST_N, llama_template
        from pocketchat.modelfile.gguf import check_gguf
        from pocketchat.engines.llamacpp.load import KV_TYPES, new_llama

        self.lib = lib = llama_cpp
        n_batch = max(1, min(plan.n_batch, plan.n_ctx))
        kv = KV_TYPES[plan.kv_type.lower()]
        self.llm = new_llama(path, n_ctx=plan.n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                             n_threads=plan.n_threads, n_threads_batch=plan.n_threads_batch,
                             n_gpu_layers=plan.n_gpu_layers, use_mmap=plan.use_mmap,
                             flash_attn=plan.flash_attn, type_k=kv, type_v=kv)
        self.ctx = self.llm.ctx
        self.vocab = lib.llama_model_get_vocab(self.llm.model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        self.batch = lib.llama_batch_init(n_batch, 0, 1)
        self.s, self.penalty_n = sampling, PENALTY_LAST_N
        self.template, _ = llama_template(self.llm, check_gguf(path), path.stem)
        self.thinking = thinking

    def _chain(self) -> Any:
        lib, s = self.lib, self.s
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        add = lambda smpl: lib.llama_sampler_chain_add(chain, smpl)  # noqa: E731
        if s.repeat_penalty != 1.0 or s.presence_penalty or s.frequency_penalty:
            add(lib.llama_sampler_init_penalties(self.n_vocab, self.penalty_n, s.repeat_penalty,
                                                 s.frequency_penalty, s.presence_penalty))
        if s.greedy:
            add(lib.llama_sampler_init_greedy())
        else:
            add(lib.llama_sampler_init_top_k(s.top_k))
            add(lib.llama_sampler_init_top_p(s.top_p, 1))
            add(lib.llama_sampler_init_min_p(s.min_p, 1))
            add(lib.llama_sampler_init_temp(s.temperature))
            add(lib.llama_sampler_init_dist((s.seed if s.seed is not None else 1) & 0xFFFFFFFF))
        return chain

    def _decode(self, tokens: list[int], pos: int) -> None:
        decode_run(self.lib, self.ctx, self.batch, tokens, pos)

    def once(self, i: int, n: int) -> Run:
        from pocketchat.engines.answer.template import thinking_prompt

        lib, ctx = self.lib, self.ctx
        # the prompt the engine decodes: the model's template, its default system prompt too
        # (the starter's adds 21 tokens, which an attention's cost per token grows with)
        text = thinking_prompt(
            self.template.apply([{"role": "user", "content": f"{i} {PROMPT}"}],
                                enable_thinking=self.thinking),
            thinking=self.thinking, knows_switch=self.template.knows_thinking_switch,
            mentions_think=self.template.mentions_think)
        prompt = self.llm.tokenize(text.encode(), add_bos=False, special=True)
        lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
        chain = self._chain()
        lib.llama_synchronize(ctx)
        lib.llama_perf_context_reset(ctx)
        try:
            self._decode(prompt, 0)
            tok = lib.llama_sampler_sample(chain, ctx, -1)
            first = time.perf_counter()
            at = lib.llama_perf_context(ctx)
            mark = at.t_p_eval_ms + at.t_eval_ms
            pos = len(prompt)
            for k in range(n):  # n decodes: n - 1 sampled after the first, then the last one
                self._decode([tok], pos)
                pos += 1
                if k < n - 1:
                    tok = lib.llama_sampler_sample(chain, ctx, -1)
                    lib.llama_token_to_piece(self.vocab, tok, _BUF, 256, 0, False)  # its text
            lib.llama_synchronize(ctx)
            wall = time.perf_counter() - first
            at = lib.llama_perf_context(ctx)
            decode_ms = at.t_p_eval_ms + at.t_eval_ms - mark
        finally:
            lib.llama_sampler_free(chain)
        return Run(n / wall, decode_ms / 1000 / n)

    def close(self) -> None:
        self.lib.llama_batch_free(self.batch)
        self.llm.close()


_BUF = None


# -- (b, c, d) pocketchat engines in this process or its worker ------------------------------------

def timed_chunks(chunks, seen: list) -> Any:
    """The chunks, the time and stats of the first with a token and of the last kept in `seen`."""
    for chunk in chunks:
        now = time.perf_counter()
        if not seen and chunk.stats.generated_tokens >= 0 and (chunk.text or chunk.thinking
                                                               or chunk.finish_reason):
            seen.append((now, chunk.stats))
        if chunk.finish_reason is not None:
            seen.append((now, chunk.stats))
        yield chunk


def engine_run(seen: list) -> Run:
    (t0, s0), (t1, s1) = seen[0], seen[-1]
    n = s1.generated_tokens - s0.generated_tokens
    return Run(n / (t1 - t0), s1.decode_seconds / max(1, s1.generated_tokens),
               s1.recent_tok_s or None)


class EnginePath:
    def __init__(self, engine: Any, tokens: int, how: str) -> None:
        self.engine, self.tokens, self.how = engine, tokens, how
        self.rng = random.Random(1234)
        self.threads: list[str] = []

    def once(self, i: int) -> Run:
        cpu = time.process_time()
        run = self._once(i)
        if self.how == "engine":  # the model's own process: no host around it
            return run
        return replace(run, host_cpu=(time.process_time() - cpu) / self.tokens)

    def _once(self, i: int) -> Run:
        from pocketchat.engines.types import Message

        seen: list = []
        if self.how == "bench":  # `pocketchat bench`'s tg test itself, on this engine
            from pocketchat.commands.bench import bench_tg

            result = bench_tg(_Timed(self.engine, seen), self.tokens, 1, self.rng)
            self.threads += result.threads
            run = engine_run(seen)
            return replace(run, shown=result.mean)
        msg = Message("user", f"{i} {PROMPT}")
        for chunk in timed_chunks(self.engine.chat([msg], options(self.tokens)), seen):
            if chunk.stats.threads_note and chunk.stats.threads_note not in self.threads:
                self.threads.append(chunk.stats.threads_note)
        run = engine_run(seen)
        return run if self.how == "worker" else replace(run, shown=None)

    def close(self) -> None:
        self.engine.close()


class _Timed:
    """An engine whose chat() chunks are timed on their way out (per chunk, not per token)."""

    def __init__(self, engine: Any, seen: list) -> None:
        self.engine, self.seen = engine, seen
        self.info = engine.info

    def chat(self, messages, options):
        return timed_chunks(self.engine.chat(messages, options), self.seen)


# -- (e) the chat in tmux -------------------------------------------------------------------------

class TmuxPath:
    def __init__(self, tokens: int, ctx: int, extra: list[str]) -> None:
        import terminal  # benchmarks/terminal.py: the chat in a tmux pane, its status bar read

        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.app = terminal.TerminalApp(tokens, ctx, env, extra)
        self.expect = 0.0
        self.cpu: list[float] = []

    def once(self, i: int) -> Run:
        rate, shown, cpu = self.app.answer(expect=self.expect)
        self.cpu.append(cpu)
        return Run(rate, None, shown, cpu)  # the answer's own rate (its line), the status bar's

    def close(self) -> None:
        self.app.close()


# -- (f) the server ------------------------------------------------------------------------------

class ServePath:
    def __init__(self, tokens: int, ctx: int, parallel: int, extra: list[str],
                 plain: bool = False) -> None:
        from support.serverproc import ServerProcess

        self.home = Path(tempfile.mkdtemp(prefix="bench-overhead-serve-"))
        self.srv = ServerProcess(["--model", "starter", "--ctx", str(ctx), "--parallel",
                                  str(parallel), *extra], self.home,
                                 env={"POCKETCHAT_CACHE_DIR": _cache_dir()})
        self.srv.wait_ready(180)
        self.client = self.srv.openai()
        self.model = self.client.models.list().data[0].id
        self.tokens = tokens
        self.plain = plain
        self.once(-1)  # warm-up

    def once(self, i: int) -> Run:
        import psutil

        server = psutil.Process(self.srv.pid)
        cpu = sum(server.cpu_times()[:2]) + time.process_time()
        run = self._once(i)
        used = sum(server.cpu_times()[:2]) + time.process_time() - cpu
        return replace(run, host_cpu=used / self.tokens)

    def _once(self, i: int) -> Run:
        if self.plain:
            return self._once_plain(i)
        first = last = None
        used, reported = 0, 0.0
        msgs = [{"role": "user", "content": f"{i} {PROMPT}"}]
        for ev in self.client.chat.completions.create(
                model=self.model, messages=msgs, max_tokens=self.tokens, stream=True, seed=1,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
            if ev.choices and (ev.choices[0].delta.content or ev.choices[0].finish_reason):
                last = time.perf_counter()
                first = first or last
            if ev.choices and ev.choices[0].finish_reason:
                reported = (getattr(ev, "timings", None) or {}).get("predicted_per_second", 0.0)
            if ev.usage:
                used = ev.usage.completion_tokens
        # the first event holds one token (it goes at once); the rest came after it
        return Run((used - 1) / (last - first), None, reported or None)

    def _once_plain(self, i: int) -> Run:
        """`_once` over http.client: the same request, its SSE events read line by line."""
        import http.client
        import json

        body = json.dumps({"model": self.model, "max_tokens": self.tokens, "stream": True,
                           "seed": 1, "ignore_eos": True,
                           "stream_options": {"include_usage": True},
                           "messages": [{"role": "user", "content": f"{i} {PROMPT}"}]})
        conn = http.client.HTTPConnection(self.srv.url.removeprefix("http://"), timeout=300)
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        first = last = None
        used, reported = 0, 0.0
        for line in resp:
            if not line.startswith(b"data: {"):
                continue
            ev = json.loads(line[6:])
            choice = (ev.get("choices") or [{}])[0]
            if choice.get("delta", {}).get("content") or choice.get("finish_reason"):
                last = time.perf_counter()
                first = first or last
            if choice.get("finish_reason"):
                reported = (ev.get("timings") or {}).get("predicted_per_second", 0.0)
            if ev.get("usage"):
                used = ev["usage"]["completion_tokens"]
        conn.close()
        return Run((used - 1) / (last - first), None, reported or None)

    def close(self) -> None:
        self.srv.stop()


class WebPath:
    """The page streaming an answer: what rendering it in a browser costs the model."""

    def __init__(self, ctx: int, extra: list[str]) -> None:
        from playwright.sync_api import sync_playwright
        from support.browser import FLAGS, executable
        from support.serverproc import ServerProcess

        self.home = Path(tempfile.mkdtemp(prefix="bench-overhead-web-"))
        self.srv = ServerProcess(["--model", "starter", "--ctx", str(ctx), "--parallel", "4",
                                  *extra], self.home,
                                 env={"POCKETCHAT_CACHE_DIR": _cache_dir()})
        self.srv.wait_ready(180)
        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=executable(), headless=True,
                                                args=FLAGS)
        self.page = self.browser.new_page()
        self.once(-1)  # warm-up

    def _cpu(self) -> float:
        import psutil

        procs = [psutil.Process(self.srv.pid)]
        procs += [c for c in psutil.Process(os.getpid()).children(recursive=True)
                  if "chrom" in c.name()]
        total = 0.0
        for proc in procs:
            try:
                total += sum(proc.cpu_times()[:2])
            except psutil.Error:
                pass
        return total

    def once(self, i: int) -> Run:
        import re

        page = self.page
        page.goto(self.srv.url + "/")
        page.wait_for_selector("body[data-state='idle']")
        cpu = self._cpu()
        page.fill("#composer", f"{i} {PROMPT}")
        page.press("#composer", "Enter")
        page.wait_for_selector("body[data-state='answering']")
        page.wait_for_selector("body[data-state='idle']", timeout=600_000)
        used = self._cpu() - cpu
        chat_id = page.evaluate("location.hash").split("=", 1)[-1]
        stats = self.srv.get(f"/web/api/chats/{chat_id}")[1]["messages"][-1]["stats"]
        shown = re.search(r"([0-9.]+) tok/s",
                          page.locator(".message.assistant .figures").last.inner_text())
        return Run(stats["decode_tok_s"], None, float(shown.group(1)) if shown else None,
                   used / max(stats["generated_tokens"], 1))

    def close(self) -> None:
        self.browser.close()
        self._pw.stop()
        self.srv.stop()


def _cache_dir() -> str:
    from pocketchat.paths import settings

    return str(settings().cache_dir)


# -- running it ----------------------------------------------------------------------------------

def open_path(name: str, choice: Any, a: argparse.Namespace) -> Any:
    from pocketchat.engines import open_engine

    plan, path = choice.plan, choice.path
    if name == "engine":
        return EnginePath(open_engine(plan, path, name=choice.label, in_process=True), a.tokens, name)
    if name == "bench":  # as `pocketchat bench` opens it
        from pocketchat.commands.bench import open_for_bench

        return EnginePath(open_for_bench(plan, choice), a.tokens, name)
    if name == "bench30":  # the worker's default pace
        return EnginePath(open_engine(plan, path, name=choice.label), a.tokens, "bench")
    if name == "worker":  # as the chat opens it (ui.app: the screen's pace)
        from pocketchat.ui.streaming import CHUNK_INTERVAL

        return EnginePath(open_engine(plan, path, name=choice.label, chunk_interval=CHUNK_INTERVAL),
                          a.tokens, name)
    extra = (["--threads", str(a.threads)] if a.threads else []) + (
        ["--draft", a.draft] if a.draft else [])  # the CLI's flags for what this plan was given
    if name == "tmux":
        return TmuxPath(a.tokens, a.ctx, extra)
    if name == "web":
        return WebPath(a.ctx, extra)
    if name.startswith("serve"):  # serveN[http][@MS]: @MS is `serve --stream-interval MS`
        name, _, pace = name.partition("@")
        width = name[5:].removesuffix("http")
        paced = ["--stream-interval", pace] if pace else []
        return ServePath(a.tokens, a.ctx, int(width), extra + paced, plain=name.endswith("http"))
    raise SystemExit(f"unknown path {name!r}; choose from {', '.join(PATHS)}, web")


def measure(choice: Any, a: argparse.Namespace, names: list[str], out: Callable[[str], None]
            ) -> list[Series]:
    from pocketchat.engines.answer.sampling import merge_sampling

    global _BUF
    import ctypes

    _BUF = ctypes.create_string_buffer(256)
    bare = Bare(choice.plan, choice.path, merge_sampling(choice.plan.sampling, options(a.tokens)),
                options(a.tokens).thinking)
    done: list[Series] = []
    against = open_path(a.against, choice, a) if a.against else None
    try:
        bare.once(-1, 16)
        if against is not None:
            against.once(-1)  # warm-up
        reference = (lambda i: bare.once(i, a.tokens)) if against is None else against.once
        for name in names:
            began = time.monotonic()
            path = open_path(name, choice, a)
            series = Series(name)
            try:
                if isinstance(path, TmuxPath):
                    path.expect = a.tokens / bare.once(-1, a.tokens).tok_s
                elif not isinstance(path, (ServePath, WebPath)):
                    path.once(-1)  # warm-up
                for i in range(a.pairs):
                    series.bare.append(reference(i))
                    series.runs.append(path.once(i))
            finally:
                path.close()
            notes = []
            if getattr(path, "threads", None):
                notes.append("threads moved: " + "; ".join(path.threads))
            if getattr(path, "cpu", None):
                notes.append(f"UI CPU {statistics.median(path.cpu) * 1e6:.0f} us/tok")
            series.note = f"({time.monotonic() - began:.0f} s) " + " ".join(notes)
            out(series.row())
            done.append(series)
        base = Series(a.against or "bare", runs=[b for s in done for b in s.bare],
                      bare=[b for s in done for b in s.bare])
        out(base.row() + f"  (all {a.against or 'bare'} runs above)")
    finally:
        bare.close()
        if against is not None:
            against.close()
    return done


def profile(choice: Any, a: argparse.Namespace) -> None:
    """The in-process engine's answer under cProfile: where its Python goes per token."""
    import cProfile
    import pstats

    from pocketchat.engines import open_engine
    from pocketchat.engines.types import Message

    engine = open_engine(choice.plan, choice.path, name=choice.label, in_process=True)
    try:
        for _ in engine.chat([Message("user", PROMPT)], options(16)):
            pass
        prof = cProfile.Profile()
        prof.enable()
        for _ in engine.chat([Message("user", PROMPT)], options(a.tokens)):
            pass
        prof.disable()
    finally:
        engine.close()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="starter")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--threads", type=int, default=None,
                   help="llama.cpp's threads on every path, pinned (default: the plan's count)")
    p.add_argument("--adaptive", action="store_true",
                   help="leave the thread count to the engine's policy (engines/llamacpp/threads.py) on\n"
                        "the pocketchat paths instead of pinning it (the bare loop keeps the plan's)")
    p.add_argument("--draft", choices=["auto", "off", "ngram"], default=None,
                   help="the pocketchat paths' drafts (default: the plan's, auto; the bare loop\n"
                        "never drafts)")
    p.add_argument("--paths", default=",".join(PATHS),
                   help=f"which paths, in order (default: {','.join(PATHS)})")
    p.add_argument("--against", default=None, metavar="PATH",
                   help="pair each run with a run of PATH (e.g. bench) instead of the bare loop:\n"
                        "the 'bare' columns are then PATH's, each ratio path/PATH")
    p.add_argument("--profile", action="store_true", help="cProfile the in-process engine instead")
    a = p.parse_args()
    os.environ.setdefault("POCKETCHAT_DATA_DIR", tempfile.mkdtemp(prefix="bench-overhead-"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    choice = choose(a.model, a.ctx, a.threads, a.draft)
    if not a.adaptive:  # equal settings: the plan's count everywhere, never moved
        a.threads = choice.plan.n_threads
        choice = choose(a.model, a.ctx, a.threads, a.draft)
    if a.profile:
        profile(choice, a)
        return 0
    plan = choice.plan
    s = merge_sampling_of(plan)
    names = [n.strip() for n in a.paths.split(",") if n.strip()]
    print(f"{choice.label}: ctx {plan.n_ctx}, n_batch {plan.n_batch}, threads {plan.n_threads}"
          f", drafts {plan.draft}"
          f"{' (pinned)' if plan.threads_pinned else ''}, {'greedy' if s.greedy else 'sampled'} "
          f"(temp {s.temperature}, top-k {s.top_k}, top-p {s.top_p}, min-p {s.min_p}, repeat "
          f"{s.repeat_penalty}), seed 1, ignore_eos; {a.tokens} tokens, {a.pairs} pairs each")
    print("tok/s: wall, medians; ratio: median of path/bare per pair; +us: per token over bare; "
          "decode, py: us per token (the path's, its bare runs')"
          + (f"; 'bare' here: {a.against}" if a.against else ""))
    print(HEADER, flush=True)
    began = time.monotonic()
    measure(choice, a, names, lambda line: print(line, flush=True))
    print(f"({time.monotonic() - began:.0f} s)")
    return 0


def merge_sampling_of(plan: Any) -> Any:
    from pocketchat.engines.answer.sampling import merge_sampling

    return merge_sampling(plan.sampling, options(1))


if __name__ == "__main__":
    raise SystemExit(main())
