"""`pocketchat bench`: prompt processing (pp512) and generation (tg128) speed, like llama-bench.

Headless, through the same worker engine the chat uses, at the chat's chunk pace (the worker
sends text at most `ui.streaming.CHUNK_INTERVAL` apart: this process wakes as seldom as the
chat's does), so the figures are what the chat gets. pp: a fresh prompt of about N tokens (a
random word list, so no cache reuse), tok/s = prompt tokens / prompt time from llama.cpp's
counters. tg: N tokens generated past end-of-text, tok/s = generated tokens / decode time;
with drafts (`--draft auto|ngram`), its rows also say the tokens each step that verified a
draft emitted and how many drafted tokens were accepted.
Each test runs `-r` times after one warm-up; the table shows mean and standard deviation. On a
terminal's stderr (not with --json), one line shows the model loading and each pp prompt
being read.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from dataclasses import dataclass, field, replace

from pocketchat.commands.mdtable import markdown_table
from pocketchat.commands.statusline import StatusLine
from pocketchat.commands.turns import WORDS
from pocketchat.commands.turns import final_chunk as _last
from pocketchat.engines.types import tokens_per_step
from pocketchat.textsafe import visible


@dataclass
class Result:
    test: str
    tokens: int
    tok_s: list[float]
    threads: list[str] = field(default_factory=list)  # how the CPU threads moved, in order
    # Drafts (`--draft`), over the runs: steps that verified a draft, tokens drafted, accepted.
    draft_steps: int = 0
    drafted: int = 0
    accepted: int = 0

    @property
    def tokens_per_step(self) -> float:
        """Tokens a verifying step emitted on average (accepted drafts + one); 0: none ran."""
        return tokens_per_step(self.draft_steps, self.accepted)

    def draft_cell(self) -> str:
        """The table's draft figure: '2.40/step (96/130 accepted)'; '-' when no step drafted."""
        if not self.draft_steps:
            return "-"
        return f"{self.tokens_per_step:.2f}/step ({self.accepted}/{self.drafted} accepted)"

    def draft_json(self) -> dict:
        return {"steps": self.draft_steps, "drafted_tokens": self.drafted,
                "accepted_tokens": self.accepted, "tokens_per_step": round(self.tokens_per_step, 2)}

    @property
    def mean(self) -> float:
        return statistics.fmean(self.tok_s) if self.tok_s else 0.0

    @property
    def stdev(self) -> float:
        return statistics.stdev(self.tok_s) if len(self.tok_s) > 1 else 0.0


def configure(p: argparse.ArgumentParser) -> None:
    from pocketchat.choose.selection import add_selection_args

    add_selection_args(p)
    p.description = "Measure prompt (pp) and generation (tg) speed of a model, like llama-bench."
    p.add_argument("-p", "--n-prompt", type=int, default=512, metavar="N", help="prompt tokens (default 512)")
    p.add_argument("-n", "--n-gen", type=int, default=128, metavar="N", help="generated tokens (default 128)")
    p.add_argument("-r", "--repetitions", type=int, default=3, metavar="N", help="runs per test (default 3)")
    p.add_argument("--turns", type=int, metavar="N",
                   help="instead: a conversation of N turns, per turn the tokens reused and evaluated")
    from pocketchat.commands.think import add_think_args

    add_think_args(p, default_help="on: this machine's default budget")
    p.add_argument("--thinking", choices=("on", "off"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--template-kwarg", action="append", default=[], metavar="KEY=VALUE",
                   help="a chat template kwarg for the --turns conversation (VALUE as JSON, else "
                        "text); repeat for more")
    p.add_argument("--preserve-thinking", action="store_true",
                   help="with --turns: the conversation without and with the template's "
                        "preserve_thinking, side by side")
    p.add_argument("--in-process", action="store_true", help="run the engine in this process, not a worker")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--forget", action="store_true",
                   help="forget the speeds measured on this machine (of --model only, when given) "
                        "that --recommend uses, and exit")


def _forget(model: str | None) -> int:
    from pocketchat.paths import settings
    from pocketchat.select import measured

    gone = measured.forget(settings().cache_dir, model)
    what = f" of {model}" if model else ""
    print(visible(f"Forgot {gone} measured speed{'' if gone == 1 else 's'}{what}; --recommend "
                  "uses estimates for them again."))
    return 0


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(1, n)))


def bench_pp(engine, n_prompt: int, reps: int, rng: random.Random,
             status: StatusLine | None = None) -> Result:
    """Prompt speed on fresh prompts of about n_prompt tokens (calibrated on the first run);
    `status` shows each prompt being read (a terminal's stderr only)."""
    from pocketchat.engines.types import ChatOptions, Message

    n_prompt = max(1, min(n_prompt, engine.info.n_ctx - 8))  # the prompt fits the context
    words = max(1, min(32, int(n_prompt / 1.3)))  # a small probe first: tokens per word vary
    speeds: list[float] = []
    tokens = 0
    for i in range(reps + 2):  # two calibration runs, then the measured ones
        text = f"{rng.randrange(10**9)} " + _words(rng, words)
        status = status or StatusLine(quiet=True)
        try:
            final = _last(engine.chat([Message("user", text)], ChatOptions(max_tokens=1)),
                          status.prompt)
        finally:
            status.clear()
        s = final.stats
        if s.prompt_tokens and i < 2:
            words = max(1, round(words * n_prompt / max(1, s.prompt_length or s.prompt_tokens)))
            continue
        if s.prompt_seconds > 0:
            speeds.append(s.prompt_tok_s)
            tokens = s.prompt_tokens
    return Result(f"pp{n_prompt}", tokens, speeds)


def bench_tg(engine, n_gen: int, reps: int, rng: random.Random) -> Result:
    from pocketchat.engines.types import ChatOptions, Message

    result = Result(f"tg{n_gen}", 0, [])
    for _ in range(reps):
        msg = Message("user", f"{rng.randrange(10**9)} Write a long story about a lighthouse.")
        final = _last(_threads_seen(engine.chat(
            [msg], ChatOptions(max_tokens=n_gen, ignore_eos=True, seed=1)), result.threads))
        s = final.stats
        if s.decode_seconds > 0:
            result.tok_s.append(s.decode_tok_s)
            result.tokens = s.generated_tokens
        result.draft_steps += s.draft_steps
        result.drafted += s.drafted_tokens
        result.accepted += s.accepted_tokens
    return result


def _threads_seen(chunks, notes: list[str]):
    """The chunks, each new note of the CPU threads moving added to `notes` on the way."""
    for chunk in chunks:
        note = chunk.stats.threads_note
        if note and (not notes or notes[-1] != note):
            notes.append(note)
        yield chunk


def run(args: argparse.Namespace) -> int:
    from pocketchat.choose.model import choose_model
    from pocketchat.choose.selection import Selection
    from pocketchat.errors import UsageError

    if args.forget:
        return _forget(args.model)
    sel = Selection.from_args(args)
    if args.n_prompt < 1 or args.n_gen < 1 or args.repetitions < 1:
        raise UsageError("--n-prompt, --n-gen and --repetitions must be at least 1")
    if args.turns is not None and args.turns < 1:
        raise UsageError("--turns must be at least 1")
    if (args.template_kwarg or args.preserve_thinking) and not args.turns:
        raise UsageError("--template-kwarg and --preserve-thinking go with --turns N")
    args.template_kwargs = template_kwargs(args.template_kwarg)
    choice = choose_model(sel)
    need = args.n_prompt + args.n_gen + 256
    if args.turns:
        from pocketchat.commands.turns import context_needed

        need = context_needed(args.turns)
    if sel.ctx is None and choice.plan.n_ctx < need:  # a plan for the room the tests need
        choice = choose_model(replace(sel, ctx=need))
    plan = choice.plan
    if not args.json:
        for note in plan.notes:
            print(f"note: {note}", file=sys.stderr)
    if args.turns:
        return _run_turns(plan, choice, args)
    runs = [(plan, *_measure(plan, choice, args))]
    if plan.rpc_servers:  # pooled: the same model alone too, when it fits, for comparison
        from pocketchat.choose.pooling import alone_plan
        from pocketchat.errors import EngineError

        try:
            alone = replace(alone_plan(sel, choice), n_ctx=plan.n_ctx)
        except EngineError as exc:
            print(visible(f"not run alone: {exc.message}"), file=sys.stderr)
        else:
            runs.append((alone, *_measure(alone, choice, args)))
    from pocketchat.choose.model import model_size

    size = model_size(choice.path)
    # The figures first: a save that fails afterwards (a read-only or full cache) loses nothing.
    if args.json:
        print(json.dumps(_json(choice, size, args, runs[0]) | {
            "runs": [_json(choice, size, args, r) for r in runs]}, indent=2), flush=True)
    else:
        print(visible(_table(choice.label, size, runs)), flush=True)
    for _, _, results in runs:
        for r in results:
            if r.threads:
                print(visible(f"{r.test}: the CPU threads moved: " + "; then ".join(r.threads)),
                      file=sys.stderr)
    if not plan.rpc_servers:  # the estimate models this machine alone
        try:
            pp = runs[0][2][0]
            record_speed(choice, sel, runs[0][2][-1].mean,
                         pp.mean if pp.tokens >= MIN_PROMPT_RECORDED else 0.0)
        except OSError as exc:
            print(visible(not_saved(exc)), file=sys.stderr)
    return 0


def not_saved(exc: OSError) -> str:
    """The warning for a measured speed the cache refused: what was not saved, where, what to do."""
    import errno
    from pathlib import Path

    folder = Path(str(exc.filename)).parent if exc.filename else None
    while folder is not None and not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the folder that refused: the nearest one there
    where = f" to {folder}" if folder else ""
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = (f"free some space on the disk of {folder}" if folder else "free some disk space"
               ) + " or set POCKETCHAT_CACHE_DIR to a folder on another disk"
    else:
        fix = (f"make {folder} writable" if folder else "make the cache folder writable"
               ) + " or set POCKETCHAT_CACHE_DIR to a folder you can write to"
    return (f"warning: the measured speed was not saved{where} ({reason}); --recommend keeps "
            f"ranking this model by its estimate.\n  To keep measurements, {fix}.")


def open_for_bench(plan, choice, *, in_process: bool = False, on_progress=None):
    """The engine `bench` measures: the chat's, opened as the chat opens it (its chunk pace)."""
    from pocketchat.engines import open_engine
    from pocketchat.ui.streaming import CHUNK_INTERVAL

    return open_engine(plan, choice.path, name=choice.label, in_process=in_process,
                       chunk_interval=CHUNK_INTERVAL, on_progress=on_progress)


def _measure(plan, choice, args: argparse.Namespace):
    """(EngineInfo, [pp, tg]) for one plan; a helper that goes away ends the bench clearly."""
    from pocketchat.engines.types import ChatOptions, Message
    from pocketchat.errors import HelperGone

    if not args.json:
        print(visible(f"loading {choice.label} ({plan.describe()}) ..."), file=sys.stderr)
    status = StatusLine(quiet=args.json)
    try:
        engine = open_for_bench(plan, choice, in_process=args.in_process, on_progress=status.load)
    finally:
        status.clear()
    try:
        rng = random.Random(1234)
        _last(engine.chat([Message("user", "Hi")], ChatOptions(max_tokens=4)))  # warm-up
        results = [bench_pp(engine, args.n_prompt, args.repetitions, rng, status),
                   bench_tg(engine, args.n_gen, args.repetitions, rng)]
    except HelperGone as exc:
        raise HelperGone(exc.message, endpoint=exc.endpoint, exitcode=exc.exitcode,
                         hint="Start the helper again (pocketchat rpc-server), or run without --rpc.") from None
    finally:
        engine.close()
    return engine.info, results


def _json(choice, size: int, args: argparse.Namespace, run) -> dict:
    plan, info, results = run
    return {
        "model": choice.label, "path": str(choice.path), "size_bytes": size,
        "backend": info.backend, "placement": plan.placement,
        "placement_detail": info.placement,
        "n_threads": plan.n_threads, "n_threads_batch": plan.n_threads_batch,
        "n_gpu_layers": plan.n_gpu_layers, "n_ctx": info.n_ctx, "cpu_moe": plan.cpu_moe,
        "n_cpu_moe": plan.n_cpu_moe, "flash_attn": plan.flash_attn, "kv_type": plan.kv_type,
        "rpc_servers": list(plan.rpc_servers), "rpc_layers": list(plan.rpc_layers),
        "worker": not args.in_process, "draft": plan.draft,
        "results": [{"test": r.test, "tokens": r.tokens, "tok_s": round(r.mean, 2),
                     "stdev": round(r.stdev, 2), "runs": [round(x, 2) for x in r.tok_s]}
                    | ({"draft": r.draft_json()} if _drafts(plan, r) else {})
                    for r in results],
    }


def _drafts(plan, result: Result) -> bool:
    """Whether a row says what drafts did: the tg rows of a plan that drafts."""
    return plan.draft != "off" and result.test.startswith("tg")


# A prompt shorter than this says little of how fast a document is read (it fills no batch's
# experts): its speed is shown, not kept.
MIN_PROMPT_RECORDED = 256


def record_speed(choice, sel, tok_s: float, pp_tok_s: float = 0.0) -> None:
    """Keep the measured generation and prompt speeds next to the estimates, for --recommend's
    ranking and the prompt speed it tells."""
    from pocketchat.choose.model import gguf_facts
    from pocketchat.paths import settings
    from pocketchat.select import estimate as est
    from pocketchat.select import fit, measured

    if tok_s <= 0 or sel.hardware is not None:
        return
    plan = choice.plan
    build = choice.build
    if build is None:
        facts = gguf_facts(choice.path)
        if facts is None:
            return
        build = est.build_from_facts(facts, choice.label)  # recorded as shown
    profile = sel.profile()
    estimate = fit.estimate_speed(build, profile, plan.placement, plan.n_threads, plan.n_cpu_moe)
    arch, read_bytes = measured.kind_of(build)
    pp_estimate = fit.estimate_prompt_speed(build, profile, plan.placement, plan.n_threads_batch, plan.n_batch)
    measured.save(settings().cache_dir, measured.SpeedRecord(
        model=build.id, placement=plan.placement, measured_tok_s=round(tok_s, 2),
        estimated_tok_s=round(estimate.tok_s, 2), machine=measured.machine_key(profile),
        n_threads=plan.n_threads, arch=arch, read_bytes=read_bytes, memory_s=estimate.memory_s,
        compute_s=estimate.compute_s, overhead_s=estimate.overhead_s,
        measured_pp_tok_s=round(pp_tok_s, 2),
        estimated_pp_tok_s=round(pp_estimate, 2) if pp_estimate and pp_tok_s > 0 else 0.0))


def _table(name: str, size: int | None, runs) -> str:
    size_s = f"{size / 1024**3:.2f} GiB" if size else "-"
    head = ["model", "size", "backend", "placement", "threads", "test", "t/s"]
    drafting = any(plan.draft != "off" for plan, _, _ in runs)
    if drafting:  # accepted tokens per step that verified a draft, accepted/drafted
        head.append("draft")
    rows = []
    for plan, info, results in runs:
        threads = str(plan.n_threads) if plan.backend == "llama.cpp" else "-"
        where = info.placement if plan.rpc_servers else plan.placement
        rows += [[name, size_s, info.backend, where, threads, r.test, f"{r.mean:.2f} ± {r.stdev:.2f}"]
                 + ([r.draft_cell() if _drafts(plan, r) else "-"] if drafting else [])
                 for r in results]
    return markdown_table(head, rows)


def template_kwargs(pairs: list[str]) -> dict:
    """`--template-kwarg KEY=VALUE` options as a dict (VALUE parsed as JSON, else kept as text)."""
    from pocketchat.errors import UsageError

    out: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--template-kwarg takes KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def bench_thinking(args: argparse.Namespace, choice) -> tuple[bool, int | None]:
    """(thinking, budget) of the --turns conversation: --think (--thinking on|off, its old
    spelling); on: this machine's default budget."""
    from pocketchat.choose.selection import Selection
    from pocketchat.commands.think import resolve, think_of
    from pocketchat.select.thinking import OFF, ON

    think = think_of(args)
    if getattr(args, "think", None) is None and getattr(args, "thinking", None) is not None:
        think = ON if args.thinking == "on" else OFF
    return resolve(think, choice, Selection.from_args(args))


def _run_turns(plan, choice, args: argparse.Namespace) -> int:
    from pocketchat.commands.turns import compare_table, run_turns, table
    from pocketchat.engines.answer.render import PRESERVE_THINKING

    if not args.json:
        print(visible(f"loading {choice.label} ({plan.describe()}) ..."), file=sys.stderr)
    kwargs = args.template_kwargs
    runs = {"": kwargs}
    if args.preserve_thinking:
        runs = {"without": {**kwargs, PRESERVE_THINKING: False},
                "with": {**kwargs, PRESERVE_THINKING: True}}
    thinking, budget = bench_thinking(args, choice)
    engine = open_for_bench(plan, choice, in_process=args.in_process)
    try:
        rows = {label: run_turns(engine, args.turns, thinking=thinking, thinking_budget=budget,
                                 template_kwargs=kw, label=f"Conversation {i + 1}. ")
                for i, (label, kw) in enumerate(runs.items())}
    finally:
        engine.close()
    if args.json:
        body = {
            "model": choice.label, "path": str(choice.path), "backend": engine.info.backend,
            "placement": plan.placement, "n_ctx": engine.info.n_ctx,
            "thinking": "on" if thinking else "off", "thinking_budget": budget,
            "worker": not args.in_process, "template_kwargs": kwargs,
        }
        if args.preserve_thinking:
            body["results"] = [r.as_dict() for r in rows["without"]]
            body["results_preserve_thinking"] = [r.as_dict() for r in rows["with"]]
        else:
            body["results"] = [r.as_dict() for r in rows[""]]
        print(json.dumps(body, indent=2))
    elif args.preserve_thinking:
        print(visible(f"{PRESERVE_THINKING} without | with; kept: prompt tokens the state held "
                      "when the previous answer ended; prepared: evaluated after it"),
              file=sys.stderr)
        print(visible(compare_table(choice.label, rows)))
    else:
        print(visible(table(choice.label, rows[""])))
    return 0
