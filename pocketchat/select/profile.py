"""Hardware profiles as JSON: strict loading (unknown keys name themselves), stated defaults."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from pocketchat.errors import HardwareProfileError
from pocketchat.types import GPU, HardwareProfile

OS_VALUES = ("linux", "darwin", "windows")
ARCH_VALUES = ("x86_64", "arm64")
VENDORS = ("nvidia", "amd", "intel", "apple")
REQUIRED = ("os", "arch", "ram_total_bytes")

_INT_KEYS = {"cpu_physical_cores", "cpu_logical_cores", "ram_total_bytes", "ram_available_bytes",
             "disk_free_bytes", "vram_total_bytes", "vram_free_bytes"}
_FLOAT_KEYS = {"memory_bandwidth_gbps", "bandwidth_gbps"}
_STR_KEYS = {"cpu_name", "name"}
# The most a real machine has; beyond that a value is a typo (1e29 bytes of RAM, 0 cores).
_LIMITS: dict[str, tuple[float, float]] = {
    "cpu_physical_cores": (1, 4096), "cpu_logical_cores": (1, 8192),
    "ram_total_bytes": (1, 2**50), "ram_available_bytes": (0, 2**50),
    "vram_total_bytes": (0, 2**46), "vram_free_bytes": (0, 2**46), "disk_free_bytes": (0, 2**60),
    "memory_bandwidth_gbps": (0.01, 100_000), "bandwidth_gbps": (0.01, 100_000),
}


def load_profile(path: str | Path) -> HardwareProfile:
    """Read a profile written by `pocketchat --probe --json` (or by hand)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise HardwareProfileError(f"hardware profile {p} is not a text (JSON) file",
                                   hint="Pass a file written by `pocketchat --probe --json`.") from None
    except OSError as exc:
        raise HardwareProfileError(f"cannot read hardware profile {p}: {exc.strerror or exc}",
                                   hint="Pass a file written by `pocketchat --probe --json`.") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HardwareProfileError(
            f"hardware profile {p} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
            hint="Fix the file, or write a fresh one with `pocketchat --probe --json > FILE`.",
        ) from None
    return profile_from_json(data, source=str(p))


def _check(value: Any, key: str, where: str) -> Any:
    if key in _INT_KEYS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise HardwareProfileError(f"{where}: {key!r} must be a whole number >= 0, not {value!r}")
    elif key in _FLOAT_KEYS:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise HardwareProfileError(f"{where}: {key!r} must be a positive number or null, not {value!r}")
    elif key in _STR_KEYS and not isinstance(value, str):
        raise HardwareProfileError(f"{where}: {key!r} must be a string, not {value!r}")
    low, high = _LIMITS.get(key, (None, None))
    if low is not None and value is not None and not low <= value <= high:
        raise HardwareProfileError(f"{where}: {key!r} = {value!r} is impossible (a real machine has "
                                   f"{low:g} to {high:g})", hint="Fix the value in the file.")
    return value


def _not_above(data: dict, part: str, whole: str, where: str) -> None:
    if data.get(part) is not None and data.get(whole) and data[part] > data[whole]:
        raise HardwareProfileError(f"{where}: {part!r} ({data[part]}) is more than {whole!r} ({data[whole]})",
                                   hint="Fix the values in the file: the free part cannot exceed the total.")


def _unknown(data: dict, allowed: set[str], where: str) -> None:
    extra = sorted(set(data) - allowed)
    if extra:
        raise HardwareProfileError(
            f"{where}: unknown key {extra[0]!r}" + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""),
            hint="Known keys: " + ", ".join(sorted(allowed)),
        )


def _gpu(data: Any, where: str) -> GPU:
    if not isinstance(data, dict):
        raise HardwareProfileError(f"{where}: each gpu must be an object")
    _unknown(data, {f.name for f in fields(GPU)}, where)
    if data.get("vendor") not in VENDORS:
        raise HardwareProfileError(f"{where}: 'vendor' must be one of {', '.join(VENDORS)}, "
                                   f"not {data.get('vendor')!r}")
    for key, value in data.items():
        _check(value, key, where)
    _not_above(data, "vram_free_bytes", "vram_total_bytes", where)
    data = {"name": f"{data['vendor']} GPU", **data}  # the name is optional
    return GPU(**data)


def profile_from_json(data: Any, *, source: str = "hardware profile") -> HardwareProfile:
    """A HardwareProfile from parsed JSON; unknown or malformed keys raise HardwareProfileError."""
    if not isinstance(data, dict):
        raise HardwareProfileError(f"{source}: the profile must be a JSON object")
    _unknown(data, {f.name for f in fields(HardwareProfile)}, source)
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise HardwareProfileError(f"{source}: missing required key {missing[0]!r}",
                                   hint="Required keys: " + ", ".join(REQUIRED))
    if data["os"] not in OS_VALUES:
        raise HardwareProfileError(f"{source}: 'os' must be one of {', '.join(OS_VALUES)}, not {data['os']!r}")
    if data["arch"] not in ARCH_VALUES:
        raise HardwareProfileError(f"{source}: 'arch' must be one of {', '.join(ARCH_VALUES)}, not {data['arch']!r}")
    for key, value in data.items():
        _check(value, key, source)
    _not_above(data, "ram_available_bytes", "ram_total_bytes", source)
    _not_above(data, "cpu_physical_cores", "cpu_logical_cores", source)
    kwargs = dict(data)
    for key in ("cpu_flags", "backends", "notes"):
        if key in kwargs:
            if not isinstance(kwargs[key], list) or not all(isinstance(x, str) for x in kwargs[key]):
                raise HardwareProfileError(f"{source}: {key!r} must be a list of strings")
            kwargs[key] = tuple(kwargs[key])
    gpus = kwargs.get("gpus", [])
    if not isinstance(gpus, list):
        raise HardwareProfileError(f"{source}: 'gpus' must be a list")
    kwargs["gpus"] = tuple(_gpu(g, f"{source}: gpus[{i}]") for i, g in enumerate(gpus))
    if kwargs.get("kernels") is not None:
        from pocketchat.select.kernels import kernels_from_json

        kwargs["kernels"] = kernels_from_json(kwargs["kernels"], f"{source}: kernels")
    busy = kwargs.get("cpu_busy_cores")
    if busy is not None and (isinstance(busy, bool) or not isinstance(busy, (int, float)) or not 0 <= busy <= 8192):
        raise HardwareProfileError(f"{source}: 'cpu_busy_cores' must be a number of cores >= 0 or null, "
                                   f"not {busy!r}")
    for flag in ("llama_gpu_offload", "llama_rpc"):
        if flag in kwargs and kwargs[flag] not in (True, False, None):
            raise HardwareProfileError(f"{source}: {flag!r} must be true, false or null")
    # Stated defaults: physical cores = logical cores (or 1); available RAM = 85% of total.
    kwargs.setdefault("cpu_logical_cores", kwargs.get("cpu_physical_cores", 1))
    kwargs.setdefault("cpu_physical_cores", kwargs["cpu_logical_cores"])
    kwargs.setdefault("ram_available_bytes", int(kwargs["ram_total_bytes"] * 0.85))
    if kwargs["os"] == "darwin" and kwargs["arch"] == "arm64" and "backends" not in kwargs:
        kwargs["backends"] = ("llama.cpp", "mlx")
    return HardwareProfile(**kwargs)
