"""What MLX says of the Metal device: one reader for the probe and the MLX engine."""

from __future__ import annotations

from typing import Any


def device_info(mx: Any) -> dict[str, Any]:
    """`mx.device_info()` (mlx >= 0.29), else `mx.metal.device_info()`: the device's
    `max_recommended_working_set_size` and `memory_size` among others. `mx` is `mlx.core`."""
    read = getattr(mx, "device_info", None) or mx.metal.device_info
    return dict(read())
