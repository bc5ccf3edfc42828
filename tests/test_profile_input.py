"""Input checks: hardware profiles that are not what they claim give one clear error."""

from __future__ import annotations

import json

import pytest

from pocketchat import cli

BASE = {"os": "linux", "arch": "x86_64", "ram_total_bytes": 16 * 2**30}


def _recommend(tmp_path, capsys, data: dict | bytes) -> tuple[int, str, str]:
    path = tmp_path / "machine.json"
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    code = cli.main(["--recommend", "--hardware", str(path)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_gpu_without_a_name_is_accepted_as_the_readme_says(tmp_path, capsys):
    gpu = {"vendor": "nvidia", "vram_total_bytes": 12 * 2**30, "vram_free_bytes": 11 * 2**30}
    code, out, err = _recommend(tmp_path, capsys, {**BASE, "gpus": [gpu]})
    assert code == 0, err
    assert cli.main(["--probe", "--hardware", str(tmp_path / "machine.json")]) == 0
    assert "GPU:       nvidia GPU (nvidia)" in capsys.readouterr().out


@pytest.mark.parametrize("data, needle", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe binary", "is not a text (JSON) file"),
    ({**BASE, "ram_available_bytes": 32 * 2**30}, "'ram_available_bytes' (34359738368) is more than 'ram_total_bytes'"),
    ({**BASE, "ram_total_bytes": 10**29}, "'ram_total_bytes' = 100000000000000000000000000000 is impossible"),
    ({**BASE, "cpu_physical_cores": 0}, "'cpu_physical_cores' = 0 is impossible"),
    ({**BASE, "cpu_logical_cores": 0}, "'cpu_logical_cores' = 0 is impossible"),
    ({**BASE, "ram_total_bytes": 0}, "'ram_total_bytes' = 0 is impossible"),
    ({**BASE, "gpus": [{"vendor": "nvidia", "name": 7}]}, "'name' must be a string"),
    ({**BASE, "gpus": [{"vendor": "amd", "vram_total_bytes": 2**30, "vram_free_bytes": 2**31}]},
     "'vram_free_bytes' (2147483648) is more than 'vram_total_bytes'"),
    ({**BASE, "memory_bandwidth_gbps": 1e12}, "'memory_bandwidth_gbps' = 1000000000000.0 is impossible"),
])
def test_impossible_profiles_are_a_clear_hardware_profile_error(tmp_path, capsys, data, needle):
    code, out, err = _recommend(tmp_path, capsys, data)
    assert code == 1
    assert err.startswith("error: ") and needle in err, err
    assert "bug" not in err and "unexpected" not in err


def test_model_of_a_saved_chat(tmp_path):
    from pocketchat.commands.chat import model_of
    from pocketchat.conversations import Conversation

    assert model_of(Conversation(model="SmolLM2-135M-Instruct (starter)")) == "starter"
    assert model_of(Conversation(model="POCKET-35B-Q2_K")) == "POCKET-35B-Q2_K"
    local = tmp_path / "mine.gguf"
    local.write_bytes(b"GGUF")
    assert model_of(Conversation(model="mine.gguf", model_path=str(local))) == str(local)
    assert model_of(Conversation(model="gone.gguf", model_path=str(tmp_path / "gone.gguf"))) is None
    assert model_of(Conversation()) is None


def test_a_chat_remembers_the_file_it_ran_from():
    from support.scripted_engine import Factory, ScriptedEngine
    from support.uitools import SIZE, answered, ready, run, send
    from pocketchat import conversations
    from pocketchat.engines.types import EngineInfo
    from pocketchat.ui.app import create_app

    engine = ScriptedEngine(info=EngineInfo(backend="llama.cpp", model="mine.gguf", placement="CPU, 2 threads",
                                            n_ctx=4096, path="/models/mine.gguf"))

    async def scenario():
        app = create_app(Factory(engine), memory_probe=lambda: 1)
        async with app.run_test(size=SIZE) as pilot:
            await ready(pilot)
            await send(pilot, "hi")
            await answered(pilot)

    run(scenario())
    saved = conversations.last()
    assert saved.model == "mine.gguf" and saved.model_path == "/models/mine.gguf"


def test_a_profile_quoting_escapes_is_shown_harmlessly(tmp_path, capsys):
    code, out, err = _recommend(tmp_path, capsys, {**BASE, "cpu_name": "\x1b]0;HACKED\x07Ryzen",
                                                    "gpus": [{"vendor": "amd", "name": "\x1b[2JRadeon"}]})
    assert "\x1b" not in out + err and "\x07" not in out + err
    code = cli.main(["--probe", "--hardware", str(tmp_path / "machine.json")])
    out = capsys.readouterr().out
    assert code == 0 and "␛]0;HACKED␇Ryzen" in out and "␛[2JRadeon" in out and "\x1b" not in out
