"""Downloads that go wrong: dropped connections, stalls, wrong bytes, Ctrl-C, a full disk, a killed
process, two processes at once. Each against the real local Hub server."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.hubserver import blob

from pocketchat.errors import ChecksumMismatch, DiskFull, DownloadError, DownloadInterrupted
from pocketchat.store import cache, download, inventory, api as store
from pocketchat.store.download import DownloadOptions

REPO = "tester/Faulty-GGUF"
NAME = "Faulty-Q4_K_M.gguf"
SIZE = 3_000_000
FAST = DownloadOptions(stall_timeout_s=0.5, backoff_s=0.05, max_retries=4)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def data(hub):
    content = blob(SIZE, 7)
    hub.add_repo(REPO, {NAME: content})
    return content


def _partials() -> list[Path]:
    return list((cache.repo_dir(REPO) / "blobs").glob("*.incomplete"))


def _snapshot_files() -> list[Path]:
    root = cache.repo_dir(REPO) / "snapshots"
    return [p for p in root.rglob("*") if p.is_file() or p.is_symlink()] if root.exists() else []


def test_dropped_connection_resumes_within_one_call(hub, data):
    hub.faults.drop_after, hub.faults.drop_count = 700_000, 3
    events = []
    path = store.ensure(f"{REPO}:Q4_K_M", options=FAST, progress=events.append)
    assert path.read_bytes() == data
    ranges = [h.get("Range") for m, p, h in hub.requests if m == "GET" and "/resolve/" in p]
    assert ranges[0] is None and ranges[1] == "bytes=700000-" and ranges[2] == "bytes=1400000-"
    assert hub.bytes_served == SIZE  # nothing fetched twice
    assert sum(e.phase == "retrying" for e in events) == 3
    downloading = [e for e in events if e.phase == "downloading"]
    assert downloading[-1].bytes_done == SIZE and downloading[-1].bytes_total == SIZE


def test_stall_is_detected_and_the_download_recovers(hub, data):
    hub.faults.stall_after, hub.faults.stall_s = 1_000_000, 5.0
    events = []
    t0 = time.monotonic()
    path = store.ensure(f"{REPO}:Q4_K_M", options=FAST, progress=events.append)
    elapsed = time.monotonic() - t0
    assert path.read_bytes() == data
    assert elapsed < 4.0  # it did not sit out the server's 5 s silence
    assert any("stalled: no data for 0.5 s" in e.message for e in events)
    assert hub.bytes_served < 1.3 * SIZE


def test_transient_503_is_retried(hub, data):
    hub.faults.fail_503 = 2
    assert store.ensure(f"{REPO}:Q4_K_M", options=FAST).read_bytes() == data


def test_retries_give_up_with_the_partial_kept(hub, data):
    hub.faults.drop_after, hub.faults.drop_count = 0, -1
    with pytest.raises(DownloadError, match="failed after 4 retries") as e:
        store.ensure(f"{REPO}:Q4_K_M", options=FAST)
    assert "resumes" in e.value.hint


# -- a host that lies about the file's size: found at once, no resume advised ------

PATIENT = DownloadOptions(stall_timeout_s=0.5, backoff_s=0.05)  # the default 8 retries


def _no_resume_advice(e) -> None:
    text = e.value.message + " " + e.value.hint
    assert "cannot be completed or resumed" in text and "Nothing was kept" in text, text
    assert "another network" in e.value.hint and "resumes" not in e.value.hint, e.value.hint
    assert _partials() == [] and _snapshot_files() == []


@pytest.mark.parametrize("listed", [SIZE + 1_000_000, SIZE - 1_000_000])
def test_a_file_of_another_size_than_listed_stops_at_once(hub, data, listed):
    """The listing (and HEAD) say `listed`; the server's own headers say the real size."""
    hub.faults.listed_size[NAME] = listed
    events = []
    with pytest.raises(ChecksumMismatch) as e:
        store.ensure(f"{REPO}:Q4_K_M", options=PATIENT, progress=events.append)
    assert f"the Hub lists it as {listed} bytes, but the server sends a file of {SIZE} bytes" \
        in e.value.message, e.value.message
    _no_resume_advice(e)
    assert not [ev for ev in events if ev.phase == "retrying"]
    gets = [h.get("Range") for m, p, h in hub.requests if m == "GET" and "/resolve/" in p]
    assert gets == [None]  # one request: nothing retried


def test_a_host_whose_headers_promise_more_than_it_sends_is_given_up_early(hub, data):
    """Every header claims the whole file, every body stops at the same byte: a network cuts
    at random places, so after a few bodies that end at one byte the file ends there. The
    bytes are kept for a later try (the whole file's SHA-256 is checked at the end)."""
    hub.faults.cut_at[NAME] = 1_200_000
    t0 = time.monotonic()
    with pytest.raises(DownloadError) as e:
        store.ensure(f"{REPO}:Q4_K_M", options=PATIENT)
    assert time.monotonic() - t0 < 5
    assert "3 times in a row it stopped sending at byte 1200000" in e.value.message, e.value.message
    assert "Retrying this server will not get past that byte" in e.value.hint
    assert "another network" in e.value.hint and "resumes where it stopped" not in e.value.hint
    gets = [h.get("Range") for m, p, h in hub.requests if m == "GET" and "/resolve/" in p]
    assert gets == [None, "bytes=1200000-", "bytes=1200000-"]  # not 1 + 8
    assert [p.stat().st_size for p in _partials()] == [1_200_000]
    hub.faults.cut_at.clear()  # the host mends (or another network): the next run completes it
    hub.reset_counters()
    assert store.ensure(f"{REPO}:Q4_K_M", options=PATIENT).read_bytes() == data
    assert hub.bytes_served == SIZE - 1_200_000


def test_server_ignoring_range_restarts_cleanly(hub, data):
    hub.faults.drop_after, hub.faults.ignore_range = 1_000_000, True
    assert store.ensure(f"{REPO}:Q4_K_M", options=FAST).read_bytes() == data


def test_wrong_bytes_are_rejected_and_never_put_in_place(hub, data):
    hub.faults.corrupt = True
    with pytest.raises(ChecksumMismatch, match="arrived corrupt") as e:
        store.ensure(f"{REPO}:Q4_K_M", options=FAST)
    assert "not used" in e.value.message
    assert _snapshot_files() == [] and _partials() == []
    assert not list((cache.repo_dir(REPO) / "blobs").glob("[0-9a-f]*[0-9a-f]"))
    assert store.list_models() == []
    hub.faults.corrupt = False
    assert store.ensure(f"{REPO}:Q4_K_M").read_bytes() == data


def test_ctrl_c_keeps_the_partial_and_the_next_run_resumes(hub, data):
    def interrupt(p):
        if p.phase == "downloading" and p.bytes_done > 1_000_000:
            raise KeyboardInterrupt

    hub.faults.rate_bps = 20_000_000
    with pytest.raises(DownloadInterrupted, match="next run resumes") as e:
        store.ensure(f"{REPO}:Q4_K_M", options=FAST, progress=interrupt)
    assert "partial file is kept" in e.value.message
    [partial] = _partials()
    kept = partial.stat().st_size
    assert 1_000_000 < kept < SIZE
    [info] = inventory.partials()
    assert info["path"] == NAME and info["bytes_done"] == kept
    hub.faults.rate_bps = None
    path = store.ensure(f"{REPO}:Q4_K_M", options=FAST)
    assert path.read_bytes() == data and hub.bytes_served < 1.3 * SIZE
    assert _partials() == [] and inventory.partials() == []


def test_disk_full_mid_transfer_keeps_the_partial(hub, data, monkeypatch):
    real_open = download._open_partial

    class FillingFile:
        def __init__(self, f, room):
            self.f, self.room = f, room

        def write(self, b):  # like a real disk: a short write, then ENOSPC
            fits = self.room - self.f.tell()
            if fits <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.f.write(b[:fits])

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(download, "_open_partial", lambda p: FillingFile(real_open(p), 1_200_000))
    with pytest.raises(DiskFull, match="partial file is kept") as e:
        store.ensure(f"{REPO}:Q4_K_M", options=FAST)
    assert "resumes" in e.value.hint
    [partial] = _partials()
    assert partial.stat().st_size == 1_200_000
    kept = partial.stat().st_size
    monkeypatch.setattr(download, "_open_partial", real_open)
    hub.reset_counters()
    assert store.ensure(f"{REPO}:Q4_K_M", options=FAST).read_bytes() == data
    assert hub.bytes_served == SIZE - kept  # resumed exactly where the disk filled up


def _cli(*args: str) -> subprocess.Popen:
    """The CLI as a terminal starts it: Ctrl-C (SIGINT) at its default, even where this test
    runs in a background job of a script, whose children ignore it from the start (POSIX)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "pocketchat", "download", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for(cond, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out")
        time.sleep(0.02)


def _held_mid_transfer() -> None:
    """Wait until the transfer is under way and held there: the server stops sending at
    1.5 MB for a minute (longer than any test waits), and the first MiB is on disk. A
    signal sent now always finds the download running, however loaded the machine is."""
    _wait_for(lambda: any(p.stat().st_size >= 1024 * 1024 for p in _partials()), timeout=60)


def test_killed_process_resumes_on_the_next_run(hub, data):
    hub.faults.stall_after, hub.faults.stall_s = 1_500_000, 60.0
    proc = _cli(f"{REPO}:Q4_K_M", "--yes")
    _held_mid_transfer()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    [partial] = _partials()
    assert partial.stat().st_size < SIZE and _snapshot_files() == []
    path = store.ensure(f"{REPO}:Q4_K_M")
    assert path.read_bytes() == data
    assert hub.bytes_served < 1.3 * SIZE, hub.bytes_served


def test_ctrl_c_in_the_cli_says_the_next_run_resumes(hub, data):
    hub.faults.stall_after, hub.faults.stall_s = 1_500_000, 60.0
    proc = _cli(f"{REPO}:Q4_K_M", "--yes")
    _held_mid_transfer()
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 1, err
    assert "the next run resumes" in err and "Traceback" not in err
    # Every byte received is kept: the MiB written, and the rest the Ctrl-C flushed.
    assert _partials() and 1024 * 1024 < _partials()[0].stat().st_size < SIZE


@pytest.mark.slow
def test_two_processes_fetching_the_same_file_make_one_good_file(hub, data):
    hub.faults.rate_bps = 2_000_000  # 1.5 s: both start while the first is still at it
    procs = [_cli(f"{REPO}:Q4_K_M", "--yes") for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert any("another process is downloading this file" in e for _o, e in outs), outs
    paths = {Path(o.strip().splitlines()[-1]) for o, _e in outs}
    [path] = paths
    assert path.read_bytes() == data
    assert hub.bytes_served < 1.3 * SIZE  # the second waited for the first, then reused its file
    assert _partials() == []
