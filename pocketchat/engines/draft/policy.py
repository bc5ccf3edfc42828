"""Whether drafting pays here, and how many tokens to draft: the policy measures itself.

Two figures decide it:
- the cost of a step that verifies k drafted tokens (a batch of k + 1 tokens with logits at
  every position) against a plain step, in seconds, learned per machine and model from the
  steps the loop runs (`CostLearner`) and kept across runs like the measured speeds that feed
  the ranking (`CostStore`: JSON under the cache directory, keyed by machine and model);
- the running acceptance of this conversation: the chance that a drafted token is accepted
  given that the ones before it were (`Acceptance`, decayed so that it follows the text).

A step drafting k tokens with per-token acceptance a emits E(k) = 1 + a + ... + a^k tokens in
cost(k) seconds; plain decoding emits 1 in cost(0). `DraftPolicy` drafts the k that maximizes
E(k) * cost(0) / cost(k) while that beats plain decoding by `on_margin`, stops when it falls
under `off_margin`, and while off keeps learning the acceptance for free from drafts it did not
verify (`shadow`: a prompt-lookup draft costs nothing to make) or, for a drafter that costs
compute, probes now and then (every `probe_every` steps, the interval doubling up to
`probe_max` while probes keep failing).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

K_MAX = 8  # the most drafted tokens one step verifies
FILE_NAME = "draft-costs.json"
PRIOR_SLOPE = 0.25  # before any figure: verifying k tokens costs 1 + 0.25 k plain steps
# The least a verified token is taken to cost, in plain steps (its logits row, its sampling, the
# rollback): a figure below it is timing noise (steps of a few microseconds), and a draft that
# looked free would stay on at any acceptance above zero.
MIN_SLOPE = 0.02
MIN_SAMPLES = 3  # steps at one k before its own figure replaces the fitted one
COST_DECAY = 0.9  # weight of the old figure per new step (a moving average of seconds)


# -- pure functions ----------------------------------------------------------------------------

@dataclass(frozen=True)
class CostCurve:
    """Seconds per step verifying k drafted tokens: `seconds[k]`, `seconds[0]` a plain step."""

    seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.seconds or any(not s > 0 for s in self.seconds):
            raise ValueError(f"a cost curve needs positive seconds, got {self.seconds}")

    @property
    def k_max(self) -> int:
        return len(self.seconds) - 1

    def ratio(self, k: int) -> float:
        """cost(k) / cost(0)."""
        return self.seconds[k] / self.seconds[0]

    @classmethod
    def linear(cls, plain: float, slope: float, k_max: int = K_MAX) -> "CostCurve":
        """cost(k) = plain * (1 + slope * k)."""
        return cls(tuple(plain * (1 + slope * k) for k in range(k_max + 1)))


def expected_tokens(a: float, k: int) -> float:
    """Tokens a step emits on average: k drafts, each accepted with probability a given the
    ones before it, plus the correction or bonus token: 1 + a + ... + a^k."""
    a = min(max(a, 0.0), 1.0)
    if a >= 1.0:
        return float(k + 1)
    return (1 - a ** (k + 1)) / (1 - a)


def speedup(a: float, k: int, curve: CostCurve) -> float:
    """Expected tokens per second drafting k, over plain decoding's."""
    return expected_tokens(a, k) / curve.ratio(k) if k > 0 else 1.0


def best_k(a: float, curve: CostCurve, limit: int = K_MAX) -> tuple[int, float]:
    """The k in 1..limit with the best expected speed-up, and that speed-up ((0, 1.0): none)."""
    best = (0, 1.0)
    for k in range(1, min(limit, curve.k_max) + 1):
        s = speedup(a, k, curve)
        if s > best[1] + 1e-12:
            best = (k, s)
    return best


# -- learned figures -----------------------------------------------------------------------------

@dataclass
class CostLearner:
    """The cost curve learned from the steps run: a moving average of seconds per k."""

    k_max: int = K_MAX
    mean: list[float] = field(default_factory=list)  # seconds per k (0: unknown)
    count: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = self.k_max + 1
        self.mean = (list(self.mean) + [0.0] * n)[:n]
        self.count = (list(self.count) + [0] * n)[:n]

    def add(self, k: int, seconds: float) -> None:
        """One step that verified k drafted tokens (0: a plain step) took `seconds`."""
        if not 0 <= k <= self.k_max or not seconds > 0 or not math.isfinite(seconds):
            return
        if self.count[k] == 0:
            self.mean[k] = seconds
        else:
            n = self.count[k]
            w = min(COST_DECAY, n / (n + 1))  # a plain mean over the first steps
            self.mean[k] = w * self.mean[k] + (1 - w) * seconds
        self.count[k] += 1

    @property
    def known(self) -> bool:
        """Whether a plain step's cost is known (nothing to compare against before)."""
        return self.count[0] > 0

    def curve(self, slope: float = PRIOR_SLOPE) -> CostCurve | None:
        """Measured figures where there are `MIN_SAMPLES`, a line through the measured ones
        elsewhere (the prior slope while fewer than two k are measured); None before any
        plain step."""
        if not self.known:
            return None
        plain = self.mean[0]
        pts = [(k, self.mean[k] / plain) for k in range(1, self.k_max + 1) if self.count[k] > 0]
        fitted_slope = slope
        if pts:
            # least squares through (0, 1): ratio = 1 + s k
            num = sum(k * (r - 1) for k, r in pts)
            den = sum(k * k for k, _ in pts)
            fitted_slope = max(num / den, MIN_SLOPE)
        out = [plain]
        for k in range(1, self.k_max + 1):
            cost = self.mean[k] if self.count[k] >= MIN_SAMPLES else plain * (1 + fitted_slope * k)
            # verifying more tokens never costs less than fewer, nor less than MIN_SLOPE each
            out.append(max(cost, out[-1] + plain * MIN_SLOPE))
        return CostCurve(tuple(out))

    def to_json(self) -> dict[str, Any]:
        return {"k_max": self.k_max, "mean": self.mean, "count": self.count}

    @classmethod
    def from_json(cls, data: Any) -> "CostLearner":
        return cls(int(data["k_max"]), [float(x) for x in data["mean"]],
                   [int(x) for x in data["count"]])


class CostStore:
    """Learned cost curves kept across runs, one per machine and model (`key`), as JSON."""

    def __init__(self, cache_dir: Path) -> None:
        self.path = cache_dir / FILE_NAME

    @staticmethod
    def key(machine: str, model: str, threads: int) -> str:
        """What the figures depend on: this machine, this model file, the thread count."""
        return f"{machine}|{model}|{threads}t"

    def _all(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def load(self, key: str, k_max: int = K_MAX) -> CostLearner:
        """The figures kept for `key`, or none yet; a damaged entry is none."""
        raw = self._all().get(key)
        try:
            learner = CostLearner.from_json(raw)
        except (KeyError, TypeError, ValueError):
            return CostLearner(k_max)
        return CostLearner(k_max, learner.mean, learner.count)

    def save(self, key: str, learner: CostLearner) -> None:
        data = self._all()
        data[key] = learner.to_json()
        tmp = self.path.with_suffix(".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.path)


@dataclass
class Acceptance:
    """The per-token acceptance of drafts, decayed per token: each observation of a draft of `proposed`
    tokens of which the first `accepted` were right counts `accepted` successes and, when one
    was wrong, one failure (a geometric model's estimate). A prior of `prior` over
    `prior_weight` trials keeps the first steps from swinging to 0 or 1."""

    prior: float = 0.5
    prior_weight: float = 2.0
    decay: float = 0.93  # per token observed: the estimate follows about the last 14
    successes: float = field(init=False)
    trials: float = field(init=False)
    observed: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.successes = self.prior * self.prior_weight
        self.trials = self.prior_weight

    def observe(self, proposed: int, accepted: int) -> None:
        if proposed <= 0:
            return
        accepted = min(max(accepted, 0), proposed)
        trials = accepted + (1 if accepted < proposed else 0)
        keep = self.decay ** trials
        self.successes = keep * self.successes + accepted
        self.trials = keep * self.trials + trials
        self.observed += 1

    @property
    def rate(self) -> float:
        return self.successes / self.trials if self.trials > 0 else 0.0


def agreed(proposed: Sequence[int], actual: Sequence[int]) -> int:
    """How many leading tokens of a draft the tokens that came next confirm."""
    n = 0
    for p, a in zip(proposed, actual, strict=False):
        if p != a:
            break
        n += 1
    return n


# -- the stateful policy ----------------------------------------------------------------------

class DraftPolicy:
    """Per conversation: how many tokens to draft at each step (0: a plain step)."""

    def __init__(self, costs: CostLearner | None = None, *, k_max: int = K_MAX,
                 on_margin: float = 1.05, off_margin: float = 1.0,
                 probe_every: int = 64, probe_max: int = 1024,
                 acceptance: Acceptance | None = None) -> None:
        self.costs = costs if costs is not None else CostLearner(k_max)
        self.k_max = min(k_max, self.costs.k_max)
        self.on_margin = on_margin
        self.off_margin = off_margin
        self.acceptance = acceptance if acceptance is not None else Acceptance()
        self.probe_every = probe_every
        self.probe_max = probe_max
        self.enabled = True  # on until the figures say otherwise
        self._interval = probe_every
        self._since = 0  # plain steps since drafting went off (or since the last probe)
        self._shadowed = False  # acceptance observed for free since drafting went off
        self.switches = 0  # times it turned off or on

    # what the loop asks --------------------------------------------------------------------
    def estimate(self, limit: int | None = None) -> tuple[int, float]:
        """(k, expected speed-up) from the figures now; (0, 1.0) when drafting does not pay."""
        curve = self.costs.curve()
        if curve is None:  # no plain step measured yet: try the smallest draft
            return (1, 1.0)
        return best_k(self.acceptance.rate, curve, self.k_max if limit is None else limit)

    def choose(self, available: int) -> int:
        """Drafted tokens to verify this step, given that the drafter offers `available`."""
        available = min(available, self.k_max)
        if available <= 0:
            return 0
        if not self.enabled:
            if self._shadowed or self._since < self._interval:
                return 0
            self._since = 0  # a probe: the smallest draft, to observe acceptance
            self._interval = min(self._interval * 2, self.probe_max)
            return 1
        k, gain = self.estimate(available)
        return k if gain >= self.off_margin or not self.costs.known else 0

    # what the loop tells it ------------------------------------------------------------------
    def record(self, k: int, accepted: int, seconds: float) -> None:
        """A step ran: it verified `k` drafted tokens (0: a plain step), `accepted` of them kept,
        in `seconds` (the batch's decode and sampling)."""
        self.costs.add(k, seconds)
        if k > 0:
            self.acceptance.observe(k, accepted)
        else:
            self._since += 1
        self._update()

    def shadow(self, proposed: Sequence[int], actual: Sequence[int]) -> None:
        """A draft that was not verified, against the tokens that came after it: acceptance
        learned at no cost (call only with as many actual tokens as were proposed)."""
        if not proposed or len(actual) < len(proposed):
            return
        self.acceptance.observe(len(proposed), agreed(proposed, actual))
        if not self.enabled:
            self._shadowed = True
        self._update()

    def _update(self) -> None:
        if not self.costs.known:
            return
        k, gain = self.estimate()
        if self.enabled and (k == 0 or gain < self.off_margin):
            self.enabled = False
            self.switches += 1
            self._since = 0
            self._shadowed = False
        elif not self.enabled and k > 0 and gain >= self.on_margin:
            self.enabled = True
            self.switches += 1
            self._interval = self.probe_every
