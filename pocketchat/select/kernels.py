"""The compute side of a decode speed estimate: this machine's own kernels, as plain data.

The kernel probe (engines/llamacpp/kernels.py, run in its own process by the choice path)
measures through the installed llama.cpp, at POCKET's shapes and the plan's thread counts, how
many GB of weights per second this machine decodes, per ggml type and role (the routed
experts' products, the dense ones), how long a layer spends outside its products, and the rest
of a step (`KernelProfile`, in the profile JSON as `kernels`). Here, pure functions turn that
into seconds per token for a build:

    compute = sum over the token's weights of bytes / rate(type, role)
    overhead = layers x their time outside the products + the step's constant

`speed.py` puts them with the bandwidth: a token takes max(bytes / bandwidth, compute) +
overhead. The cache (`load_cached`, `save_cached`) keeps one measurement per machine and
llama.cpp build, as JSON under the cache directory: the best of up to PROBE_TRIES probes where
the first did not scale with its threads (`scales`, `best_of`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pocketchat.errors import HardwareProfileError
from pocketchat.types import ROLES, Build, KernelProfile, KernelRates

FILE_NAME = "kernels.json"
LAYER_KINDS = ("recurrent", "attention")
# ggml type numbers (ggml.h) -> the names the probe and the profile JSON use.
TYPE_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K",
              11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 16: "IQ2_XXS", 17: "IQ2_XS",
              18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS",
              29: "IQ1_M", 30: "BF16"}  # fmt: skip
# A token's weights of types the probe did not measure: up to this share of its bytes they are
# counted at the measured types' mean rate; beyond it the estimate is the bandwidth's alone.
MAX_UNMEASURED_SHARE = 0.1

# Bytes of weights one token of a full-size POCKET build reads, per (type, role), for a build
# whose header is not known: llama.cpp's quantizer rules applied to POCKET's tensor table
# (benchmarks/pocket_gguf.py `tensor_types`; tests/test_estimate.py checks these against it).
# Routed experts: 8 of 256 per layer ("expert"); the output matrix ("output": a prompt's tokens
# but the last skip it); the token embeddings (one row) left out.
POCKET_TOKEN_BYTES: dict[str, dict[tuple[str, str], int]] = {
    "Q2_K": {("F32", "dense"): 87_818_240, ("Q2_K", "dense"): 252_456_960,
        ("Q2_K", "expert"): 220_200_960, ("Q3_K", "dense"): 54_067_200,
        ("Q3_K", "expert"): 144_179_200, ("Q4_K", "dense"): 289_013_760,
        ("Q6_K", "output"): 417_177_600},
    "IQ1_M": {("F32", "dense"): 87_818_240, ("IQ1_M", "dense"): 177_020_928,
        ("IQ1_M", "expert"): 214_695_936, ("IQ2_XXS", "dense"): 21_626_880, ("Q2_K", "dense"): 688_128,
        ("Q2_K", "expert"): 8_257_536, ("Q4_K", "dense"): 289_013_760, ("Q5_K", "output"): 349_634_560},
    "Q3_K_M": {("F32", "dense"): 87_818_240, ("Q3_K", "dense"): 330_598_400,
        ("Q3_K", "expert"): 288_358_400, ("Q4_K", "dense"): 339_738_624,
        ("Q4_K", "expert"): 179_306_496, ("Q5_K", "dense"): 24_510_464, ("Q5_K", "expert"): 11_534_336,
        ("Q6_K", "output"): 417_177_600},
    "Q4_K_M": {("F32", "dense"): 87_818_240, ("Q4_K", "dense"): 645_120_000,
        ("Q4_K", "expert"): 471_859_200, ("Q6_K", "dense"): 215_040_000, ("Q6_K", "output"): 417_177_600,
        ("Q6_K", "expert"): 137_625_600},
}  # fmt: skip
POCKET_LAYER_KINDS = {"recurrent": 30, "attention": 10}


def type_name(ggml_type: int) -> str:
    return TYPE_NAMES.get(ggml_type, f"type{ggml_type}")


def token_bytes(build: Build) -> dict[tuple[str, str], float] | None:
    """Bytes of weights one token reads per (type name, role): the header's, else a catalog
    quant's table; None when neither is known."""
    facts = build.facts
    if facts is not None and getattr(facts, "active_type_bytes", ()):
        out: dict[tuple[str, str], float] = {}
        for t, role, b in facts.active_type_bytes:
            key = (type_name(t), role)
            out[key] = out.get(key, 0.0) + b
        return out
    return pocket_token_bytes(build) if facts is None else None


def pocket_token_bytes(build: Build) -> dict[tuple[str, str], float] | None:
    """A catalog POCKET build's bytes per token per (type, role), from its quant's table (a
    token reads 8 experts per layer however many a pruned build keeps); None for other quants."""
    table = POCKET_TOKEN_BYTES.get(build.quant)
    if table is None or build.facts is not None or build.expert_fraction <= 0 or build.format != "gguf":
        return None
    return {k: float(v) for k, v in table.items()}


def layer_kinds(build: Build) -> dict[str, int]:
    """How many layers of each kind a token runs through (POCKET's when the header is unknown)."""
    facts = build.facts
    if facts is None:
        return dict(POCKET_LAYER_KINDS)
    recurrent = len(facts.recurrent_layers)
    return {"recurrent": recurrent, "attention": max(facts.block_count - recurrent, 0)}


def rates_at(kernels: KernelProfile | None, threads: int) -> KernelRates | None:
    """The rates at `threads`: as measured, else the nearest measured count's scaled by the
    thread ratio (the products split over the threads)."""
    if kernels is None or not kernels.at:
        return None
    near = min(kernels.at, key=lambda k: (abs(k.threads - threads), -k.threads))
    if near.threads == threads:
        return near
    f = threads / near.threads
    return KernelRates(threads=threads, rates=tuple((t, ro, r * f) for t, ro, r in near.rates),
                       layer_seconds=tuple((k, s / f) for k, s in near.layer_seconds),
                       step_seconds=near.step_seconds)


def prompt_rates_at(kernels: KernelProfile | None, threads: int) -> KernelRates | None:
    """The prompt batch's rates at `threads` (scaled from the count measured); None: not measured."""
    if kernels is None or kernels.prompt is None:
        return None
    return rates_at(KernelProfile(at=(kernels.prompt,)), threads)


def compute_seconds(build: Build, rates: KernelRates | None, *, prompt: bool = False) -> float | None:
    """Seconds one token's matrix products take at these rates; None when they say too little
    about this build (no rates, no per-type bytes, or too many bytes of unmeasured types).
    `prompt`: a prompt's token, which skips the output matrix (only the last one's logits)."""
    parts = token_bytes(build) if rates is not None else None
    if rates is None or not parts:
        return None
    known = 0.0
    seconds = 0.0
    unknown = 0.0
    for (t, role), nbytes in parts.items():
        if role == "output" and prompt:  # a prompt's logits: its last token's only
            continue
        rate = rates.rate(t, "dense" if role == "output" else role)
        if rate and rate > 0:
            seconds += nbytes / (rate * 1e9)
            known += nbytes
        else:
            unknown += nbytes
    total = known + unknown
    if total <= 0 or known <= 0 or unknown / total > MAX_UNMEASURED_SHARE:
        return None
    return seconds * total / known


def overhead_seconds(build: Build, rates: KernelRates | None) -> float:
    """Seconds of a token outside its matrix products: each layer's, and the step's own."""
    if rates is None:
        return 0.0
    per_layer = dict(rates.layer_seconds)
    return sum(n * per_layer.get(kind, 0.0) for kind, n in layer_kinds(build).items()) + rates.step_seconds


# A probe whose most threads read no faster than its fewest (by this factor, the types' median)
# may have shared a core with another tenant of the machine (a virtual machine's neighbours):
# two probes in a row on a quiet 2-core EPYC read Q2_K at 2 threads at 13 and 25 GB/s. Such a
# probe is taken again on later runs, up to PROBE_TRIES in all, each rate the best seen (a
# neighbour only ever slows a probe down).
SCALES = 1.25
PROBE_TRIES = 3


def scales(kernels: KernelProfile) -> bool:
    """Whether the most threads measured read faster than the fewest by SCALES (True when
    only one count was measured: nothing to compare)."""
    if len(kernels.at) < 2:
        return True
    few, most = min(kernels.at, key=lambda k: k.threads), max(kernels.at, key=lambda k: k.threads)
    ratios = sorted(r / f for t, ro, r in most.rates
                    if (f := few.rate(t, ro)) and ro != "output")
    return not ratios or ratios[len(ratios) // 2] >= SCALES


def best_of(a: KernelProfile, b: KernelProfile) -> KernelProfile:
    """The two probes' best figures: per thread count, the higher rate of each type and role and
    the shorter times outside the products; `b`'s build and time."""
    def best(x: KernelRates | None, y: KernelRates | None) -> KernelRates | None:
        if x is None or y is None:
            return x or y
        rates = {(t, ro): r for t, ro, r in x.rates}
        for t, ro, r in y.rates:
            rates[(t, ro)] = max(r, rates.get((t, ro), 0.0))
        layers = dict(x.layer_seconds)
        for k, sec in y.layer_seconds:
            layers[k] = min(sec, layers.get(k, sec))
        return KernelRates(y.threads, tuple((t, ro, r) for (t, ro), r in rates.items()),
                           tuple(layers.items()), min(x.step_seconds, y.step_seconds))

    ours = {k.threads: k for k in a.at}
    at = tuple(best(ours.get(k.threads), k) for k in b.at)
    same_prompt = a.prompt is not None and b.prompt is not None and a.prompt.threads == b.prompt.threads
    prompt = best(a.prompt, b.prompt) if same_prompt else (b.prompt or a.prompt)
    return KernelProfile(at=tuple(k for k in at if k is not None), build=b.build, seconds=b.seconds,
                         measured_at=b.measured_at, prompt=prompt)


def probe_threads(cores: int) -> list[int]:
    """The thread counts the probe measures: all the plan may use, and half of them."""
    n = max(cores, 1)
    return sorted({n, max(n // 2, 1)}, reverse=True)


# -- the JSON form (the profile's `kernels`, the probe's result, the cache) -----------------


def _number(value: Any, where: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (positive and value == 0):
        raise HardwareProfileError(f"{where} must be a {'positive' if positive else 'non-negative'} "
                                   f"number, not {value!r}")
    return float(value)


def _rates_from_json(entry: Any, here: str, threads: int, extra: tuple[str, ...] = ()) -> KernelRates:
    """One thread count's (or the prompt's) figures from their JSON form."""
    if not isinstance(entry, dict) or not isinstance(entry.get("rates", {}), dict):
        raise HardwareProfileError(f"{here}: must be an object with 'rates'")
    known = {"rates", "layer_s", "step_s", *extra}
    bad = sorted(set(entry) - known)
    if bad:
        raise HardwareProfileError(f"{here}: unknown key {bad[0]!r}", hint=f"Known keys: {', '.join(sorted(known))}")
    rates = []
    for t, roles in entry.get("rates", {}).items():
        if not isinstance(roles, dict) or not set(roles) <= set(ROLES):
            raise HardwareProfileError(f"{here}.rates[{t!r}]: must map 'expert' and/or 'dense' to GB/s")
        for role, gbps in roles.items():
            rates.append((str(t), role, _number(gbps, f"{here}.rates[{t!r}][{role!r}]", positive=True)))
    layers = entry.get("layer_s", {})
    if not isinstance(layers, dict) or not set(layers) <= set(LAYER_KINDS):
        raise HardwareProfileError(f"{here}.layer_s: must map 'recurrent' and/or 'attention' to seconds")
    return KernelRates(
        threads=threads, rates=tuple(rates),
        layer_seconds=tuple((k, _number(v, f"{here}.layer_s[{k!r}]")) for k, v in layers.items()),
        step_seconds=_number(entry.get("step_s", 0.0), f"{here}.step_s"))


def _threads_key(count: Any, here: str) -> int:
    if isinstance(count, bool) or not str(count).isdigit() or not 1 <= int(count) <= 4096:
        raise HardwareProfileError(f"{here}: the key must be a thread count (1 to 4096)")
    return int(count)


def kernels_from_json(data: Any, where: str = "kernels") -> KernelProfile:
    """A KernelProfile from its JSON form; HardwareProfileError naming what is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("threads"), dict) or not data["threads"]:
        raise HardwareProfileError(f"{where}: must be an object with 'threads' "
                                   '({"2": {"rates": {"Q2_K": {"expert": 9.0}}}})')
    extra = sorted(set(data) - {"build", "seconds", "measured_at", "threads", "prompt"})
    if extra:
        raise HardwareProfileError(f"{where}: unknown key {extra[0]!r}",
                                   hint="Known keys: build, measured_at, prompt, seconds, threads")
    at = [_rates_from_json(entry, f"{where}.threads[{count!r}]", _threads_key(count, f"{where}.threads[{count!r}]"))
          for count, entry in data["threads"].items()]
    prompt = None
    if data.get("prompt") is not None:
        entry = data["prompt"]
        here = f"{where}.prompt"
        n = _threads_key(entry.get("threads") if isinstance(entry, dict) else None, f"{here}.threads")
        prompt = _rates_from_json(entry, here, n, extra=("threads", "tokens"))
    return KernelProfile(at=tuple(sorted(at, key=lambda k: -k.threads)), build=str(data.get("build", "")),
                         seconds=_number(data.get("seconds", 0.0), f"{where}.seconds"),
                         measured_at=_number(data.get("measured_at", 0.0), f"{where}.measured_at"),
                         prompt=prompt)


PROBE_VERSION = 2  # what the probe measures (2: a prompt's batch too); a cache of another is stale


def cache_key(cpu_name: str, cores: int, flags: tuple[str, ...], build: str, threads: list[int]) -> str:
    """What a cached measurement must match: the CPU, the llama.cpp build, the thread counts,
    the probe's version."""
    return (f"{cpu_name}|{cores}|{','.join(flags)}|{build}|threads {','.join(map(str, threads))}"
            f"|probe {PROBE_VERSION}")


def load_cached(cache_dir: Path, key: str) -> tuple[KernelProfile, int] | None:
    """The cached measurement for `key` and how many probes made it; None when there is none
    or it is of another key."""
    try:
        data = json.loads((cache_dir / FILE_NAME).read_text())
        if data.get("key") != key:
            return None
        return kernels_from_json(data["kernels"]), max(int(data.get("tries", 1)), 1)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, HardwareProfileError):
        return None


def save_cached(cache_dir: Path, key: str, kernels: KernelProfile, tries: int = 1) -> None:
    """Keep the measurement for `key`, the best of `tries` probes (a failed write only means
    measuring again next time)."""
    path = cache_dir / FILE_NAME
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "tries": tries, "kernels": kernels.to_json()}, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass
