"""Read what this machine has. The only hardware I/O in pocketchat; every source may be missing."""

from __future__ import annotations

import importlib.util
import platform
import re
import shutil
import subprocess
from pathlib import Path

from pocketchat.rpc.ggml import library_names, rpc_library
from pocketchat.types import GPU, GiB, HardwareProfile

GPU_LIB_PATTERN = re.compile(r"ggml-(cuda|hip|vulkan|metal|sycl|musa|opencl|cann)", re.I)
DRM_ROOT = Path("/sys/class/drm")
AMD_VENDOR, INTEL_VENDOR, NVIDIA_VENDOR = "0x1002", "0x8086", "0x10de"
# An AMD GPU with less dedicated VRAM than this is an APU whose carve-out is not its budget.
APU_VRAM_LIMIT = 4 * GiB


def detect(*, disk_path: Path | None = None, measure_bandwidth: bool = True) -> HardwareProfile:
    """Probe this machine. Never raises for a missing source; problems land in `notes`."""
    import psutil

    notes: list[str] = []
    os_name = {"Darwin": "darwin", "Windows": "windows"}.get(platform.system(), "linux")
    arch = _arch()
    vm = psutil.virtual_memory()
    logical = psutil.cpu_count(logical=True) or 1
    physical = psutil.cpu_count(logical=False) or logical
    gpus: list[GPU] = []
    gpus += _nvidia_gpus(notes)
    gpus += _drm_gpus(notes, ram_total=vm.total)
    if os_name == "darwin" and arch == "arm64":
        gpus.append(_apple_gpu(vm.total))
    bandwidth = None
    if measure_bandwidth:
        from pocketchat.select.bandwidth import cached_bandwidth

        bandwidth = cached_bandwidth(_cpu_name(os_name), vm.total, notes, physical)
    return HardwareProfile(
        os=os_name,
        arch=arch,
        cpu_name=_cpu_name(os_name),
        cpu_physical_cores=physical,
        cpu_logical_cores=logical,
        cpu_flags=tuple(_cpu_flags(os_name, arch)),
        ram_total_bytes=int(vm.total),
        ram_available_bytes=int(vm.available),
        memory_bandwidth_gbps=bandwidth,
        disk_free_bytes=_disk_free(disk_path),
        gpus=tuple(gpus),
        backends=tuple(installed_backends()),
        llama_gpu_offload=llama_gpu_offload(),
        llama_rpc=llama_rpc(),
        notes=tuple(notes),
    )


def _arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine or "unknown")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def _cpu_name(os_name: str) -> str:
    if os_name == "linux":
        text = _read(Path("/proc/cpuinfo")) or ""
        for key in ("model name", "Hardware", "Model", "cpu model"):
            m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.M)
            if m:
                return m.group(1).strip()
    if os_name == "darwin":
        name = _sysctl("machdep.cpu.brand_string")
        if name:
            return name
    return platform.processor() or "unknown"


def _cpu_flags(os_name: str, arch: str) -> list[str]:
    wanted = ("avx", "avx2", "avx512f", "avx512_vnni", "avx512_bf16", "fma", "f16c", "amx_int8")
    flags: set[str] = set()
    if os_name == "linux":
        m = re.search(r"^(flags|Features)\s*:\s*(.+)$", _read(Path("/proc/cpuinfo")) or "", re.M)
        have = set(m.group(2).split()) if m else set()
        flags = {f for f in wanted if f in have}
        if "asimd" in have or "neon" in have:
            flags.add("neon")
        if "asimddp" in have:
            flags.add("dotprod")
    elif os_name == "darwin":
        have = (_sysctl("machdep.cpu.features") or "").lower().split()
        flags = {f for f in wanted if f in have}
    if arch == "arm64":
        flags.add("neon")
    return sorted(flags)


def _sysctl(key: str) -> str | None:
    exe = shutil.which("sysctl")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "-n", key], capture_output=True, text=True, timeout=2)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _nvidia_gpus(notes: list[str]) -> list[GPU]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        # No driver is the normal case on a machine without an NVIDIA GPU.
        if not isinstance(exc, (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded)):
            notes.append(f"NVIDIA driver found but NVML failed ({exc}); NVIDIA GPUs ignored.")
        return []
    except Exception as exc:  # a broken binding must not break the probe
        notes.append(f"NVML failed ({exc}); NVIDIA GPUs ignored.")
        return []
    gpus: list[GPU] = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(GPU("nvidia", name.decode() if isinstance(name, bytes) else str(name),
                            int(mem.total), int(mem.free)))
    except Exception as exc:
        notes.append(f"NVML failed while reading a GPU ({exc}); some NVIDIA GPUs ignored.")
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return gpus


def _drm_gpus(notes: list[str], *, ram_total: int, root: Path = DRM_ROOT) -> list[GPU]:
    """AMD and Intel GPUs from sysfs (NVIDIA is read through NVML)."""
    gpus: list[GPU] = []
    try:
        cards = sorted(p for p in root.glob("card*") if re.fullmatch(r"card\d+", p.name))
    except OSError:
        return []
    for card in cards:
        dev = card / "device"
        vendor = _read(dev / "vendor")
        if vendor == AMD_VENDOR:
            total = _read_int(dev / "mem_info_vram_total")
            used = _read_int(dev / "mem_info_vram_used")
            name = _read(dev / "product_name") or "AMD GPU"
            if total is None:
                notes.append(f"{card.name}: AMD GPU without readable VRAM figures; ignored.")
                continue
            if total < APU_VRAM_LIMIT:
                gtt = _read_int(dev / "mem_info_gtt_total") or ram_total // 2
                gpus.append(GPU("amd", f"{name} (integrated)", gtt, gtt, unified_memory=True))
            else:
                gpus.append(GPU("amd", name, total, max(total - (used or 0), 0)))
        elif vendor == INTEL_VENDOR:
            gpus.append(GPU("intel", "Intel integrated graphics", ram_total // 2, ram_total // 2,
                            unified_memory=True))
    return gpus


def _read_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def apple_metal_budget(ram_total: int) -> int:
    """macOS's recommended Metal working set without asking Metal: ~2/3 of RAM to 36 GB, 3/4 above."""
    return int(ram_total * (2 / 3 if ram_total <= 36 * GiB else 3 / 4))


def _apple_gpu(ram_total: int) -> GPU:
    budget = apple_metal_budget(ram_total)
    if importlib.util.find_spec("mlx") is not None:
        try:
            import mlx.core as mx

            info = mx.device_info() if hasattr(mx, "device_info") else mx.metal.device_info()
            budget = int(info.get("max_recommended_working_set_size", budget))
        except Exception:
            pass
    chip = _sysctl("machdep.cpu.brand_string") or "Apple Silicon"
    return GPU("apple", chip, budget, budget, unified_memory=True)


def _disk_free(path: Path | None) -> int | None:
    if path is None:
        from pocketchat.paths import settings

        path = settings().hf_cache_dir
    path = Path(path)
    while not path.exists() and path.parent != path:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def installed_backends() -> list[str]:
    """Backends importable here, found without importing them."""
    found = []
    if importlib.util.find_spec("llama_cpp") is not None:
        found.append("llama.cpp")
    if importlib.util.find_spec("mlx_lm") is not None:
        found.append("mlx")
    return found


def llama_rpc() -> bool | None:
    """Whether the installed llama.cpp has the RPC backend (libggml-rpc); None if not installed."""
    return None if library_names() is None else rpc_library() is not None


def llama_gpu_offload() -> bool | None:
    """Whether the installed llama.cpp was built with a GPU backend; None if not installed.

    Read from the shared libraries it ships (libggml-cuda, -hip, -vulkan, -metal ...), which
    answers what `llama_supports_gpu_offload()` would without loading the native library.
    """
    names = library_names()
    return None if names is None else any(GPU_LIB_PATTERN.search(n) for n in names)
