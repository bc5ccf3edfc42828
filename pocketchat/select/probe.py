"""Read what this machine has. The only hardware I/O in pocketchat; every source may be missing."""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from pocketchat.errors import HardwareProfileError
from pocketchat.rpc.ggml import lib_dir, library_names, rpc_library
from pocketchat.types import GPU, GiB, HardwareProfile, KernelProfile

# The kernel probe, run as a process (it loads llama.cpp; `select` never imports engines).
KERNEL_PROBE_MODULE = "pocketchat.engines.llamacpp.kernels"

GPU_LIB_PATTERN = re.compile(r"ggml-(cuda|hip|vulkan|metal|sycl|musa|opencl|cann)", re.I)
DRM_ROOT = Path("/sys/class/drm")
AMD_VENDOR, INTEL_VENDOR, NVIDIA_VENDOR = "0x1002", "0x8086", "0x10de"
# An AMD GPU with less dedicated VRAM than this is an APU whose carve-out is not its budget.
APU_VRAM_LIMIT = 4 * GiB


ProgressFn = Callable[[int, int, str], None]
KERNEL_TIMEOUT_S = 60.0  # the kernel probe takes a few seconds; past this it is given up
BUSY_WINDOW_S = 0.2  # how long the probe watches the other processes' CPU


def detect(*, disk_path: Path | None = None, measure_bandwidth: bool = True,
           measure_kernels: bool = False, progress: ProgressFn | None = None) -> HardwareProfile:
    """Probe this machine. Never raises for a missing source; problems land in `notes`.

    `measure_kernels`: run the kernel probe when this machine and llama.cpp build have no cached
    measurement (a few seconds, reported to `progress(done, total, what)`); without it, a cached
    one is used when there is one."""
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
    busy = busy_cores()
    bandwidth = None
    if measure_bandwidth:
        from pocketchat.select.bandwidth import cached_bandwidth

        bandwidth = cached_bandwidth(_cpu_name(os_name), vm.total, notes, physical, busy=busy)
    backends = tuple(installed_backends())
    flags = tuple(_cpu_flags(os_name, arch))
    kernels = None
    if "llama.cpp" in backends:
        kernels = cached_kernels(_cpu_name(os_name), physical, logical, flags, notes, measure=measure_kernels,
                                 progress=progress, busy=busy)
    return HardwareProfile(
        os=os_name,
        arch=arch,
        cpu_name=_cpu_name(os_name),
        cpu_physical_cores=physical,
        cpu_logical_cores=logical,
        cpu_flags=flags,
        ram_total_bytes=int(vm.total),
        ram_available_bytes=int(vm.available),
        memory_bandwidth_gbps=bandwidth,
        disk_free_bytes=_disk_free(disk_path),
        gpus=tuple(gpus),
        backends=backends,
        llama_gpu_offload=llama_gpu_offload(),
        llama_rpc=llama_rpc(),
        notes=tuple(notes),
        kernels=kernels,
        cpu_busy_cores=busy,
    )


def busy_cores(window_s: float = BUSY_WINDOW_S) -> float | None:
    """Cores' worth of CPU the other processes use now: their share over a short window, at
    most the load average of the last minute (a burst that is already over, or a job that
    ended seconds ago, is not a busy machine). None where it cannot be read."""
    import psutil

    try:
        me = psutil.Process()
        t0, mine0 = psutil.cpu_times(), me.cpu_times()
        start = time.monotonic()
        time.sleep(window_s)
        t1, mine1 = psutil.cpu_times(), me.cpu_times()
        elapsed = time.monotonic() - start
        busy = sum(t1) - sum(t0) - ((t1.idle - t0.idle) + (getattr(t1, "iowait", 0) - getattr(t0, "iowait", 0)))
        mine = (mine1.user - mine0.user) + (mine1.system - mine0.system)
        now = max(busy - mine, 0.0) / max(elapsed, 1e-3)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else now
        return round(max(min(now, load), 0.0), 2)
    except (OSError, AttributeError, psutil.Error):
        return None


def llama_build() -> str:
    """The installed llama.cpp, as a key for measurements made with it: the package's version
    and a digest of its libraries' names, sizes and times (a rebuild changes it). "" if absent."""
    import hashlib
    from importlib.metadata import PackageNotFoundError, version

    lib = lib_dir()
    if lib is None:
        return ""
    try:
        files = sorted(p for p in lib.iterdir() if p.is_file())
        stamp = ",".join(f"{p.name}:{p.stat().st_size}:{int(p.stat().st_mtime)}" for p in files)
        ver = version("llama_cpp_python")
    except (OSError, PackageNotFoundError):
        return ""
    return f"llama-cpp-python {ver} ({hashlib.sha256(stamp.encode()).hexdigest()[:12]})"


def cached_kernels(cpu_name: str, physical: int, logical: int, flags: tuple[str, ...], notes: list[str], *,
                   measure: bool, progress: ProgressFn | None = None, busy: float | None = None
                   ) -> KernelProfile | None:
    """This machine's kernel rates (`select.kernels`): the cached measurement for this CPU and
    llama.cpp build, else (with `measure`) a new one from the kernel probe, run in its own
    process (engines/llamacpp/kernels.py: it needs llama.cpp, which this process does not
    import), and cached unless other programs were busy meanwhile (then measured again next
    time: a busy core slows llama.cpp's threads, not its kernels). A cached probe whose threads
    did not scale (`kernels.scales`) is taken again on the next quiet runs, up to
    `kernels.PROBE_TRIES` probes, keeping the best of them (`kernels.best_of`)."""
    from pocketchat.paths import settings
    from pocketchat.select import defaults
    from pocketchat.select import kernels as kern

    build = llama_build()
    if not build:
        return None
    threads = kern.probe_threads(defaults.cpu_threads(physical, logical))
    key = kern.cache_key(cpu_name, physical, flags, build, threads)
    cache_dir = settings().cache_dir
    cached = kern.load_cached(cache_dir, key)
    found, tries = cached if cached is not None else (None, 0)
    settled = found is not None and (kern.scales(found) or tries >= kern.PROBE_TRIES)
    if settled or not measure:
        return found
    if busy is not None and busy >= defaults.BUSY_SHARE:  # a busy core would slow the larger counts
        if found is not None:
            return found  # measured again on a quieter run
        free = max(physical - defaults.busy_cores_of(busy), 1)
        threads = [n for n in threads if n <= free] or [free]
    measured = run_kernel_probe(threads, notes, progress)
    if measured is None:
        return found
    measured = replace(measured, build=build)
    if found is not None:  # the earlier probe did not scale with its threads: the best of both
        measured = kern.best_of(found, measured)
    during = busy_cores(0.05)
    if max(busy or 0.0, during or 0.0) < defaults.BUSY_SHARE:
        kern.save_cached(cache_dir, key, measured, tries + 1)
    else:
        notes.append("kernel speeds measured while other programs kept the CPU busy; measured "
                     "again next time")
    return measured


def run_kernel_probe(threads: list[int], notes: list[str], progress: ProgressFn | None = None
                     ) -> KernelProfile | None:
    """Run the kernel probe in its own process; its result, or None (with a note) when it fails."""
    import json
    import sys

    from pocketchat.select.kernels import kernels_from_json

    cmd = [sys.executable, "-m", KERNEL_PROBE_MODULE, "--threads", ",".join(map(str, threads))]
    result = None
    other: list[str] = []  # what else it wrote (llama.cpp's own lines, a traceback)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=_child_env())
    except OSError as exc:
        notes.append(f"kernel speeds not measured ({exc}); speed estimates use the bandwidth alone")
        return None
    watchdog = threading.Timer(KERNEL_TIMEOUT_S, proc.kill)  # a probe that hangs is given up
    watchdog.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                other = (other + [line.strip()])[-5:]
                continue
            if isinstance(event, dict) and "progress" in event and progress is not None:
                done, total, what = event["progress"]
                progress(int(done), int(total), str(what))
            elif isinstance(event, dict) and "result" in event:
                result = event["result"]
        proc.wait()
    finally:
        watchdog.cancel()
    if result is None:
        why = [x for x in other if x][-1:] or [f"exit status {proc.returncode}"]
        notes.append(f"kernel speeds not measured ({why[0][:200]}); speed estimates use the bandwidth alone")
        return None
    try:
        return kernels_from_json(result, "the kernel probe's result")
    except HardwareProfileError as exc:
        notes.append(f"kernel speeds not measured ({exc}); speed estimates use the bandwidth alone")
        return None


def _child_env() -> dict[str, str]:
    """The environment the kernel probe runs in: this one, with this pocketchat importable."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


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

            from pocketchat.metal import device_info

            info = device_info(mx)
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
