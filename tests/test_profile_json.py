"""Hardware profiles round-trip through JSON; bad files get one clear message."""

from __future__ import annotations


import pytest

from pocketchat.errors import HardwareProfileError
from pocketchat.select.profile import load_profile, profile_from_json

from support import PROFILES


@pytest.mark.parametrize("path", sorted(PROFILES.glob("*.json")), ids=lambda p: p.stem)
def test_every_shipped_profile_round_trips(path):
    prof = load_profile(path)
    assert profile_from_json(prof.to_json()) == prof


def test_missing_optional_keys_get_stated_defaults():
    prof = profile_from_json({"os": "linux", "arch": "x86_64", "ram_total_bytes": 16 * 1024**3})
    assert prof.ram_available_bytes == int(16 * 1024**3 * 0.85)
    assert prof.cpu_physical_cores == prof.cpu_logical_cores == 1
    assert prof.gpus == () and prof.backends == ("llama.cpp",)
    assert prof.llama_gpu_offload is None and prof.disk_free_bytes is None


@pytest.mark.parametrize(
    "data,needle",
    [
        ({"os": "linux", "arch": "x86_64", "ram_total_bytes": 1, "ram_totl": 2}, "unknown key 'ram_totl'"),
        ({"os": "beos", "arch": "x86_64", "ram_total_bytes": 1}, "'os' must be one of"),
        ({"os": "linux", "arch": "x86_64"}, "missing required key 'ram_total_bytes'"),
        ({"os": "linux", "arch": "x86_64", "ram_total_bytes": "16GB"}, "whole number"),
        ({"os": "linux", "arch": "x86_64", "ram_total_bytes": 1, "gpus": [{"vendor": "3dfx"}]}, "vendor"),
        ({"os": "linux", "arch": "x86_64", "ram_total_bytes": 1, "gpus": [{"vendor": "amd", "vram": 1}]},
         "unknown key 'vram'"),
        ([1, 2], "JSON object"),
    ],
)
def test_bad_profiles_name_the_problem(data, needle):
    with pytest.raises(HardwareProfileError, match=needle.replace("(", r"\(")):
        profile_from_json(data)


def test_malformed_json_file_names_line_and_column(tmp_path):
    f = tmp_path / "hw.json"
    f.write_text('{"os": "linux",\n "arch": }')
    with pytest.raises(HardwareProfileError, match=r"not valid JSON \(line 2"):
        load_profile(f)


def test_missing_file_is_a_profile_error(tmp_path):
    with pytest.raises(HardwareProfileError, match="cannot read"):
        load_profile(tmp_path / "nope.json")
