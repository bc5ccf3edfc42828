"""The prompt cache's disk tier with real llama.cpp: a prompt with a long system message answered
in one process, the same prompt in a new process evaluates only what follows the system message
(read back from disk) and the greedy answer is the cold one, token for token. On the tiny
`qwen35moe` (hybrid: attention KV and recurrent state, which cannot be cut back) and on the
starter (attention only). A file with bytes flipped or cut short, another model's file and a
budget of 0 are never loaded (or never written); the budget is honoured."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pocketchat.engines.state.prompt_disk import SUFFIX, key_digest

pytestmark = pytest.mark.slow

TESTS = Path(__file__).parent
DISK = 64 * 1024**2
SLACK = 64  # role headers and the generation prompt
SYSTEM = ("You are the build assistant of a small bakery's web shop. Answer in one short "
          "sentence; name the file you would change. ") * 24  # ~700 tokens on the starter
USER = "Where is the price of sourdough set?"


def lifetime(model: Path, disk: int = DISK, system: str = SYSTEM, user: str = USER) -> dict:
    """One engine in a new process: load, answer greedily, close; its figures."""
    text = Path(os.environ["POCKETCHAT_CACHE_DIR"]) / "system.txt"
    text.write_text(system)
    run = subprocess.run([sys.executable, "-m", "support.prompt_disk_run", str(model), str(disk),
                          str(text), user], cwd=TESTS, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def folder_files() -> list[Path]:
    from pocketchat.paths import settings

    return sorted(settings().prompt_cache_dir.rglob("*" + SUFFIX))


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory) -> Path:
    pytest.importorskip("llama_cpp")
    from support import tinyqwen35

    return tinyqwen35.write_tiny_qwen35moe(tmp_path_factory.mktemp("pd") / "q35.gguf",
                                           chat_template=tinyqwen35.QWEN35_TEMPLATE)


def _real(tmp_path_factory, which: str) -> Path:
    pytest.importorskip("llama_cpp")
    from support import tinyqwen35

    return tinyqwen35.write_tiny_qwen35moe(tmp_path_factory.mktemp("pdreal") / "q35.gguf",
                                           chat_template=tinyqwen35.REAL_TEMPLATES[which])


@pytest.fixture(scope="module")
def real_qwen35(tmp_path_factory) -> Path:
    """The tiny qwen35moe with Qwen3.5's real chat template (support/templates)."""
    return _real(tmp_path_factory, "qwen3.5")


@pytest.fixture(scope="module")
def real_qwen36(tmp_path_factory) -> Path:
    """The same with Qwen3.6's (POCKET's)."""
    return _real(tmp_path_factory, "qwen3.6")


@pytest.fixture
def starter(starter_gguf) -> Path:
    pytest.importorskip("llama_cpp")
    return starter_gguf


@pytest.mark.parametrize("which", ["qwen35", "real_qwen35", "real_qwen36", "starter"])
def test_after_a_restart_only_the_tokens_after_the_system_message_are_evaluated(which, request):
    model = request.getfixturevalue(which)
    cold = lifetime(model)
    assert cold["reused"] == 0 and cold["evaluated"] == cold["prompt_length"]
    disk = cold["status"]["disk"]
    assert disk["writes"] == 1 and 0 < disk["bytes"] <= DISK and len(folder_files()) == 1
    warm = lifetime(model)  # a new process: nothing in RAM
    assert warm["answer"] == cold["answer"]  # greedy: the state read back is the state written
    assert warm["status"]["disk"]["hits"] == 1 and warm["status"]["disk"]["writes"] == 0
    shared = warm["reused"]
    assert shared > 256 and warm["evaluated"] == warm["prompt_length"] - shared
    assert warm["evaluated"] <= len(USER.encode()) + SLACK  # the user message, no more
    other = lifetime(model, user="And the price of rye?")  # another conversation, same system
    assert other["reused"] == shared and other["status"]["disk"]["hits"] == 1


def corrupt_flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(len(data) - 4096, len(data), 97):  # bytes of the state itself
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def corrupt_cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("damage", [corrupt_flip, corrupt_cut], ids=["flipped", "truncated"])
def test_a_damaged_file_is_skipped_removed_and_the_answer_is_the_cold_one(qwen35, damage):
    cold = lifetime(qwen35)
    [path] = folder_files()
    damage(path)
    again = lifetime(qwen35)
    assert again["reused"] == 0 and again["evaluated"] == again["prompt_length"]
    assert again["answer"] == cold["answer"]
    assert again["status"]["disk"]["removed"] == 1 and again["status"]["disk"]["hits"] == 0
    assert again["status"]["disk"]["writes"] == 1  # written again, whole
    assert lifetime(qwen35)["reused"] > 256


def test_another_models_file_is_never_loaded(qwen35, tmp_path):
    from support import tinyqwen35

    other = tinyqwen35.write_tiny_qwen35moe(tmp_path / "other.gguf", seed=7,
                                            chat_template=tinyqwen35.QWEN35_TEMPLATE)
    theirs = lifetime(other)
    [path] = folder_files()
    mine_cold = lifetime(qwen35, disk=0)  # nothing written: the answer from scratch
    assert folder_files() == [path]
    # Put the other model's file where this model's would be: the key in its header differs.
    from pocketchat.engines.state.saved_state import state_key
    from pocketchat.paths import settings

    key = state_key(str(qwen35), "llama.cpp", 4096, "f16")
    mine = settings().prompt_cache_dir / key_digest(key)
    mine.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, mine / path.name)
    got = lifetime(qwen35)
    assert got["reused"] == 0 and got["answer"] == mine_cold["answer"] != theirs["answer"]
    assert got["status"]["disk"]["removed"] == 1
    assert path.exists()  # the other model's own file stays, in its own folder


def test_budget_zero_writes_and_reads_nothing(qwen35):
    lifetime(qwen35)
    off = lifetime(qwen35, disk=0)
    assert off["reused"] == 0 and off["status"]["disk"]["budget"] == 0
    assert len(folder_files()) == 1 and off["status"]["disk"]["writes"] == 0


def test_the_budget_is_honoured(qwen35):
    one = lifetime(qwen35)["status"]["disk"]["bytes"]
    budget = one + one // 2  # one state fits, two do not
    for i in range(3):
        got = lifetime(qwen35, disk=budget, system=f"Prompt number {i}. " + SYSTEM)
        assert got["status"]["disk"]["used"] <= budget and len(folder_files()) == 1
    last = lifetime(qwen35, disk=budget, system="Prompt number 2. " + SYSTEM)
    assert last["reused"] > 256  # the newest stayed


def test_mlx_states_go_through_mlx_lms_prompt_cache_file():
    """MLX (its tiny llama, in this process: new engine objects): the state written as mlx-lm's
    prompt-cache file is read back by a new engine, which evaluates only the user message."""
    pytest.importorskip("mlx_lm")
    from support.mlx_fixture import shared_model
    from support.prompt_disk_run import wire
    from pocketchat.engines.mlx.engine import MlxEngine
    from pocketchat.engines.types import ChatOptions, Message
    from pocketchat.types import LoadPlan

    plan = LoadPlan(backend="mlx", placement="cpu", n_gpu_layers=0, n_ctx=4096, n_threads=1,
                    n_threads_batch=1, prompt_cache_bytes=DISK, prompt_cache_disk_bytes=DISK)
    options = ChatOptions(temperature=0, max_tokens=6, ignore_eos=True, thinking=False)
    runs = []
    for _ in range(2):
        engine = MlxEngine(plan, shared_model(), name="tiny-llama")
        wire(engine)
        try:
            chunks = list(engine.chat([Message("system", SYSTEM), Message("user", USER)], options))
        finally:
            engine.close()
        assert chunks[-1].error is None
        runs.append(("".join(c.text for c in chunks), chunks[-1].stats,
                     engine.prompt_cache.status()["disk"]))
    (cold, cold_stats, cold_disk), (warm, warm_stats, warm_disk) = runs
    assert cold_stats.reused_tokens == 0 and cold_disk["writes"] == 1
    assert warm == cold and warm_disk["hits"] == 1 and warm_stats.reused_tokens > 256
    assert warm_stats.evaluated_tokens == warm_stats.prompt_length - warm_stats.reused_tokens
    assert warm_stats.evaluated_tokens <= len(USER.encode()) + SLACK
