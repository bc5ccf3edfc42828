"""Issue 15, input checks: hardware profiles that are not what they claim give one clear error."""

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
    assert "nvidia GPU" in out


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
