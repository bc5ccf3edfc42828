"""The one classifier of a failed load, for every backend."""

from __future__ import annotations

from pocketchat.errors import CorruptModel, EngineError, ModelTooLarge, PocketchatError


def load_error(backend: str, name: str, why: str, exc: BaseException | None = None
               ) -> PocketchatError:
    """A failed load as the user's error: memory, an architecture the runtime does not know,
    custom model code, or (the rest) a file the runtime could not read."""
    low = why.lower()
    if (isinstance(exc, MemoryError) or "out of memory" in low or "failed to allocate" in low
            or "unable to allocate" in low):
        return ModelTooLarge(f"not enough memory to load {name}: {why}",
                             hint="Pick a smaller build, a smaller --ctx, or close other programs.")
    if "unknown model architecture" in low or ("not supported" in low and "model type" in low):
        update = ("Update llama-cpp-python to a version that knows this architecture."
                  if backend == "llama.cpp" else
                  "Update mlx-lm (pip install -U mlx-lm), or use a GGUF build.")
        return EngineError(f"this {backend} cannot run {name}: {why}", hint=update)
    if "trust_remote_code" in low:
        return EngineError(f"{name} needs custom model code, which pocketchat does not run: {why}")
    if backend == "mlx":
        return CorruptModel(f"{name} is not a loadable MLX model: {why}")
    return EngineError(
        f"llama.cpp could not load {name}: {why}",
        hint="Run with POCKETCHAT_DEBUG=1 for llama.cpp's log; try another build if it persists.",
    )
