"""One answer's sampling: the request's fields over the plan's defaults, merged once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from pocketchat.engines.types import ChatOptions
from pocketchat.types import Sampling


@dataclass(frozen=True)
class SamplingSettings:
    """The sampling of one answer: the request's fields over the plan's defaults."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repeat_penalty: float
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias added to its logit)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


def merge_sampling(defaults: Any, opts: ChatOptions, ends: Iterable[int] = ()
                   ) -> SamplingSettings:
    """The one place request options meet the plan's sampling defaults (None: the default);
    `ignore_eos` masks the end-of-generation tokens `ends` (the only way it is done)."""

    defaults = defaults if defaults is not None else Sampling()

    def pick(name: str, fallback: float = 0.0) -> Any:
        value = getattr(opts, name, None)
        return getattr(defaults, name, fallback) if value is None else value

    bias = tuple(opts.logit_bias)
    if opts.ignore_eos:
        bias += tuple((int(t), float("-inf")) for t in sorted(ends))
    return SamplingSettings(
        temperature=float(pick("temperature")), top_p=float(pick("top_p")),
        top_k=int(pick("top_k")), min_p=float(pick("min_p")),
        repeat_penalty=float(pick("repeat_penalty", 1.0)),
        presence_penalty=float(pick("presence_penalty")),
        frequency_penalty=float(pick("frequency_penalty")),
        seed=opts.seed, logit_bias=bias,
    )
