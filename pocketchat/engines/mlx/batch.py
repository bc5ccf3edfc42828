"""Several MLX sequences decoded together: their caches merged into one batch, one MLX thread.

`MlxBatch` holds the merged caches of one model's decoding sequences (mlx-lm's `BatchKVCache`,
`ArraysCache` with a batch axis; `merge`, `extend`, `extract`, `filter`) and which sequence's
state (`cache.MlxState`) each row is. `decode(states, tokens)` feeds one token to each state in
one model call ([B, 1]): rows whose sequence is not in this step leave first (their caches
extracted back into their states), states not in the batch join it (their caches lent and
merged), then the model runs once and each state gets its row of the logits. A state in the
batch is lent: reading its `layers` takes its row back (`give_back`), setting them drops the
row (`drop`).

All MLX work of the batched sequences runs on one thread (`MlxThread`; `MlxBatch.call`). MLX
binds a stream to the thread that made it: an array built lazily in one thread cannot be
evaluated in another, and each new thread that computes gets a stream of its own that is never
freed. The sequences answer in threads of their own (one per request), so their model calls,
cache operations and sampling all go to that thread, in turn. It is one thread for the whole
process and never ends: when a thread that ran MLX ends, MLX frees its thread-local compile
cache, which takes the GIL, and a thread ending while Python exits aborts the process
(measured: `terminate called without an active exception`).

`batchable(layers)` says whether a model's caches can be merged at all (None), or why not.
"""

from __future__ import annotations

import copy
import threading
from concurrent.futures import Future
from queue import SimpleQueue
from typing import Any, Callable, Sequence

from pocketchat.errors import EngineClosed

CLEAR_EVERY = 256  # batch steps between two `mx.clear_cache()`


def batchable(layers: Sequence[Any]) -> str | None:
    """None when mlx-lm can merge these (fresh) per-layer caches into a batch and take rows
    back out of it; else why not, in words."""
    for layer in layers:
        kind = type(layer).__name__
        merge = getattr(type(layer), "merge", None)
        if merge is None:
            return f"its {kind} cache cannot be batched"
        try:
            merged = merge([layer, copy.deepcopy(layer)])
        except Exception as exc:  # noqa: BLE001 - a cache mlx-lm cannot merge (e.g. quantized)
            return f"its {kind} cache cannot be batched ({type(exc).__name__}: {exc})"
        if not all(callable(getattr(merged, m, None)) for m in ("extract", "filter", "extend")):
            return f"its {kind} cache cannot be batched"
    return None


def _wire() -> int | None:
    from mlx_lm.utils import maybe_set_recommended_wired_limit

    return maybe_set_recommended_wired_limit()


class MlxThread:
    """The process's one thread for the MLX work of batched sequences (a stream per device)."""

    _shared: "MlxThread | None" = None
    _made = threading.Lock()

    @classmethod
    def shared(cls) -> "MlxThread":
        with cls._made:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def __init__(self) -> None:
        self._tasks: SimpleQueue = SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="pocketchat-mlx", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import mlx.core as mx

        streams: dict[str, Any] = {}
        while True:
            device, fn, args, done = self._tasks.get()
            try:
                key = str(device)
                if key not in streams:
                    streams[key] = mx.new_stream(device)
                with mx.stream(streams[key]):
                    done.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
                done.set_exception(exc)
            del device, fn, args, done  # hold nothing between tasks

    def on_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def call(self, device: Any, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` run on this thread on `device`'s stream (in place when called from
        it); its result, or its exception raised here."""
        if self.on_thread():
            return fn(*args)
        done: Future = Future()
        self._tasks.put((device, fn, args, done))
        return done.result()


class MlxBatch:
    """The merged caches of the sequences decoding together (see the module docstring)."""

    def __init__(self, model: Any, device: Any) -> None:
        self._model = model
        self._device = device
        self.rows: list[Any] = []  # the MlxState of each row
        self._layers: list[Any] = []  # the merged caches, one per layer
        self.steps = 0  # model calls over the batch, for tests and figures
        self.max_rows = 0  # the most rows one call carried
        self._runner = MlxThread.shared()
        self._closed = False
        # Metal: the model's memory wired while the engine lives (mlx-lm's generation loops do it
        # per answer; None where the device names no recommended size, e.g. the CPU)
        self._wired = self.call(_wire)

    def on_thread(self) -> bool:
        """Whether the caller is the MLX thread."""
        return self._runner.on_thread()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` run on the MLX thread (in place when called from it); its result."""
        if self._closed and not self.on_thread():
            raise EngineClosed()
        return self._runner.call(self._device, fn, *args)

    def close(self) -> None:
        """Let go of the rows and the model; later calls are refused."""
        if not self._closed:
            self.call(self._forget)
            self._closed = True

    def _forget(self) -> None:
        import mlx.core as mx

        for state in self.rows:
            state.lender = None
        self.rows, self._layers, self._model = [], [], None
        if self._wired is not None:
            mx.set_wired_limit(self._wired)

    # -- the rows (on the MLX thread) --------------------------------------------------------

    def decode(self, states: Sequence[Any], tokens: Sequence[int]) -> list[Any]:
        """Feed `tokens[i]` to `states[i]` in one model call; the logits row ([1, vocab]) of
        each state, in the order given."""
        return self.call(self._decode, list(states), list(tokens))

    def give_back(self, state: Any) -> None:
        """Take `state`'s row out of the batch into its own layers."""
        self.call(self._give_back, state)

    def drop(self, state: Any) -> None:
        """Remove `state`'s row from the batch without keeping it (its layers are replaced)."""
        self.call(self._drop, state)

    def _decode(self, states: list[Any], tokens: list[int]) -> list[Any]:
        import mlx.core as mx

        wanted = {id(s) for s in states}
        for state in [r for r in self.rows if id(r) not in wanted]:
            self._give_back(state)  # not in this step (done, cancelled, or late): out
        newcomers = [s for s in states if s.lender is not self]
        if newcomers:
            self._join(newcomers)
        at = {id(s): i for i, s in enumerate(self.rows)}
        inputs = [0] * len(self.rows)
        for state, token in zip(states, tokens, strict=False):
            inputs[at[id(state)]] = int(token)
        try:
            logits = self._model(mx.array(inputs)[:, None], cache=self._layers)[:, -1, :]
            mx.eval(logits, [c.state for c in self._layers])
        except BaseException:
            self._fail()
            raise
        self.steps += 1
        self.max_rows = max(self.max_rows, len(self.rows))
        if self.steps % CLEAR_EVERY == 0:  # as mlx-lm's loops: freed buffers back to the system
            mx.clear_cache()
        return [logits[at[id(s)]: at[id(s)] + 1] for s in states]

    def _join(self, states: list[Any]) -> None:
        import mlx.core as mx

        caches = [s.lend(self) for s in states]
        merged = [type(group[0]).merge(list(group)) for group in zip(*caches, strict=False)]
        if self.rows:
            for mine, more in zip(self._layers, merged, strict=False):
                mine.extend(more)
        else:
            self._layers = merged
        self.rows.extend(states)
        mx.eval([c.state for c in self._layers])

    def _index(self, state: Any) -> int:
        for i, row in enumerate(self.rows):
            if row is state:
                return i
        raise AssertionError("the state is not in the batch")

    def _give_back(self, state: Any) -> None:
        import mlx.core as mx

        if state.lender is not self:
            return
        i = self._index(state)
        layers = [c.extract(i) for c in self._layers]
        mx.eval([c.state for c in layers])
        self._remove(i)
        state.receive(layers)

    def _drop(self, state: Any) -> None:
        if state.lender is not self:
            return
        self._remove(self._index(state))
        state.lender = None

    def _remove(self, i: int) -> None:
        import mlx.core as mx

        keep = [j for j in range(len(self.rows)) if j != i]
        if keep:
            for c in self._layers:
                c.filter(keep)
            mx.eval([c.state for c in self._layers])
        else:
            self._layers = []
        del self.rows[i]

    def _fail(self) -> None:
        """A model call failed: its rows' caches are unknown; each state starts from empty
        ones (the answers fail, and their engines reset what their caches say)."""
        rows, self.rows, self._layers = self.rows, [], []
        for state in rows:
            state.receive(None)
