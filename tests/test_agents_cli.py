"""Claude Code (`claude -p`) and Codex (`codex exec`), the real CLIs from npm at the versions
the issue recorded, each run one turn against `pocketchat serve` on the tiny qwen35moe (a
Qwen3.6-like tools template) on 127.0.0.1 and exit 0 with an answer. Nothing leaves the
machine: each CLI is pointed at the server (Claude Code by ANTHROPIC_BASE_URL, Codex by a
`model_providers` entry with `wire_api = "responses"`), with its home in a temporary folder and
its telemetry and updates off.

The CLIs are not Python packages: .ci/run installs them with npm into a cache folder
(`POCKETCHAT_AGENT_CLIS`, default ~/.cache/pocketchat/agent-clis); without them these tests
skip and say how to install them. The tiny model writes nonsense; what is checked is that each
agent's own requests (Claude Code's tools and system prompt cut down to fit the tiny model's
byte-level context; Codex's whole first request, about 27,000 tokens) are answered in the shape
the CLI accepts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from support import tinyqwen35
from support.serverproc import running

pytestmark = pytest.mark.slow
CLAUDE_CODE = "2.1.332"
CODEX = "0.171.0"
FOLDER = Path(os.environ.get("POCKETCHAT_AGENT_CLIS") or Path.home() / ".cache/pocketchat/agent-clis")
INSTALL = (f"npm install --prefix {FOLDER} @anthropic-ai/claude-code@{CLAUDE_CODE} "
           f"@openai/codex@{CODEX} (what .ci/run does)")
QUIET = {"DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}


def cli(name: str) -> Path:
    path = FOLDER / "node_modules" / ".bin" / name
    if not path.exists():
        pytest.skip(f"{name} is not installed in {FOLDER}: {INSTALL}")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    home = tmp_path_factory.mktemp("agent-clis")
    gguf = tinyqwen35.write_tiny_qwen35moe(home / "tiny-qwen35moe.gguf",
                                           chat_template=tinyqwen35.QWEN35_TOOLS_TEMPLATE)
    with running(["--model", str(gguf), "--ctx", "32768", "--parallel", "1"], home) as srv:
        yield srv


def run(args: list, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    return subprocess.run([str(a) for a in args], env={**base, **QUIET, **env}, cwd=cwd,
                          capture_output=True, text=True, errors="replace", timeout=600,
                          stdin=subprocess.DEVNULL)


@pytest.fixture
def claude():
    return cli("claude")


@pytest.fixture
def codex():
    return cli("codex")


def test_claude_code_answers_one_turn(claude, server, tmp_path):
    # Claude Code takes an answer cut by max_tokens for an error, and it samples at temperature
    # 1: the tiny model's nonsense ends at an end token by chance, so it gets room to find one.
    # Its words may be only blanks, so what is checked is Claude Code's own account of the turn
    # (--output-format json: what it printed as `result`, and the usage it read from us).
    env = {"HOME": str(tmp_path), "ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "unused",
           "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "2048", "MAX_THINKING_TOKENS": "0"}
    done = run([claude, "-p", "Say hello.", "--model", "claude-haiku-4-5", "--tools", "",
                "--system-prompt", "Be brief.", "--output-format", "json"], env, tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    turn = json.loads(done.stdout)
    assert (turn["subtype"], turn["is_error"], turn["num_turns"]) == ("success", False, 1), turn
    assert turn["stop_reason"] == "end_turn" and isinstance(turn["result"], str), turn
    assert turn["usage"]["input_tokens"] + turn["usage"]["cache_read_input_tokens"] > 100, turn


def test_codex_answers_one_turn(codex, server, tmp_path):
    home = tmp_path / "codex"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "pocket"\nmodel_provider = "pocketchat"\nmodel_reasoning_effort = "minimal"\n\n'
        '[model_providers.pocketchat]\nname = "pocketchat"\n'
        f'base_url = "{server.url}/v1"\nwire_api = "responses"\n')
    done = run([codex, "exec", "--skip-git-repo-check", "Say hello."],
               {"HOME": str(tmp_path), "CODEX_HOME": str(home)}, tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip(), done.stderr[-2000:]
    assert "tokens used" in done.stderr, done.stderr[-2000:]  # Codex read our usage
