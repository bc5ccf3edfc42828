"""One Selection, parsed and checked once: the same flags give the same message from every command."""

from __future__ import annotations

from pathlib import Path

import pytest

from pocketchat import cli
from pocketchat.choose.selection import Selection
from pocketchat.errors import UsageError
from pocketchat.select import fit

PROFILES = Path(__file__).parent / "profiles"
MACHINE = str(PROFILES / "linux-16gb.json")


class PrepareInline:
    """The chat app, minus the screen: runs the start-up step the real app runs in its thread."""

    def __init__(self, factory, *, prepare, **kwargs):
        self.prepare, self.fatal_error = prepare, None

    def run(self):
        class Hooks:
            def confirm(self, question):
                return False

            def status(self, text):
                pass

            def note(self, text):
                pass

            def progress(self, *a, **k):
                pass

        try:
            self.prepare(Hooks())
        except Exception as exc:  # the app hands start-up errors to the CLI the same way
            self.fatal_error = exc
            return 1
        return 0


def _error_line(capsys, argv: list[str]) -> str:
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip()


@pytest.mark.parametrize("flags", [
    ["--ctx", "-5"], ["--ctx", "100"], ["--lang", "xx"], ["--threads", "0"],
    ["--ctx", "9999999"],  # too large for this machine's memory
])
def test_chat_bench_and_recommend_say_the_same_thing(flags, capsys, monkeypatch):
    monkeypatch.setattr("pocketchat.ui.app.create_app", PrepareInline)
    common = [*flags, "--hardware", MACHINE, "--offline"]
    recommend = _error_line(capsys, ["--recommend", *common])
    chat = _error_line(capsys, common)
    bench = _error_line(capsys, ["bench", *common])
    assert recommend.startswith("error: ")
    assert chat == recommend and bench == recommend


def test_bench_lang_is_checked_before_anything_loads(capsys):
    line = _error_line(capsys, ["bench", "--model", "starter", "--lang", "xx"])
    assert "unknown --lang 'xx'" in line and "--lang en or --lang ko" in line


def test_starter_ctx_above_what_it_was_trained_for_is_lowered_with_a_note(starter_gguf):
    choice = __import__("pocketchat.choose.model", fromlist=["x"]).choose_model(
        Selection(model="starter", ctx=100_000, offline=True))
    assert choice.plan.n_ctx == 8192  # SmolLM2's context_length
    assert choice.plan.notes == ("--ctx 100000 is more than the model was trained for; using 8192",)


def test_backend_mlx_with_a_gguf_is_refused(starter_gguf):
    from pocketchat.choose.model import choose_model

    with pytest.raises(UsageError, match="runs on llama.cpp, not on --backend mlx"):
        choose_model(Selection(model=str(starter_gguf), backend="mlx"))


def test_threads_flag_reaches_the_plan_on_every_path(starter_gguf):
    from pocketchat.choose.model import choose_model, recommend

    assert choose_model(Selection(model="starter", threads=1, offline=True)).plan.n_threads == 1
    rec = recommend(Selection(hardware=Path(MACHINE), threads=3))
    assert rec.recommended.plan.n_threads == 3
    assert recommend(Selection(hardware=Path(MACHINE))).recommended.plan.n_threads == 8


@pytest.mark.parametrize("requested,model_max,steps,noted", [
    (None, None, [8192, 6144, 4096, 3072, 2048], False),
    (None, 4096, [4096, 3072, 2048], False),
    (32768, None, [32768], False),
    (32768, 8192, [8192], True),
    (1024, 8192, [1024], False),
])
def test_context_steps_one_owner(requested, model_max, steps, noted):
    got, note = fit.context_steps(requested, model_max)
    assert got == steps and (note is not None) == noted


def test_selection_from_args_takes_only_its_flags():
    args = cli._root_parser().parse_args(["--model", "starter", "--ctx", "4096", "-t", "2", "--no-think"])
    assert Selection.from_args(args) == Selection(model="starter", ctx=4096, threads=2)
