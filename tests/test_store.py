"""The model store against a real local Hub server: resolve, download, reuse, offline, listing."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.hubserver import blob, HubServer
from pocketchat import paths
from pocketchat.errors import (
    AmbiguousModel,
    ChecksumMismatch,
    DiskFull,
    DownloadDeclined,
    GatedRepo,
    ModelNotFound,
    OfflineError,
    RepoNotFound,
)
from pocketchat.store import cache, api as store
from pocketchat.select import catalog

REPO = "tester/Tiny-GGUF"


@pytest.fixture
def tiny(hub):
    files = {
        "Tiny-Q4_K_M.gguf": blob(1_500_000, 1),
        "Tiny-Q4_K_S.gguf": blob(400_000, 2),
        "Tiny-IQ2_M.gguf": blob(300_000, 3),
        "mmproj-Tiny-F16.gguf": blob(1000, 4),
        "README.md": b"# tiny\n",
    }
    hub.add_repo(REPO, files)
    return files


def test_fresh_download_is_byte_identical_and_in_the_hf_layout(hub, tiny):
    path = store.ensure(f"{REPO}:Q4_K_M")
    assert path.read_bytes() == tiny["Tiny-Q4_K_M.gguf"]
    assert path.is_symlink() and path.resolve().parent.name == "blobs"
    assert path.resolve().name == hashlib.sha256(tiny["Tiny-Q4_K_M.gguf"]).hexdigest()
    commit = hub.repos[REPO].commit
    assert path.parent.name == commit and cache.read_ref(REPO) == commit
    assert hub.bytes_served == len(tiny["Tiny-Q4_K_M.gguf"])
    [m] = store.list_models()
    assert (m.repo_id, m.filename, m.size_bytes, m.path, m.verified) == (
        REPO, "Tiny-Q4_K_M.gguf", 1_500_000, path, True)
    assert not list(path.resolve().parent.glob("*.incomplete"))


def test_hf_hub_download_entry_is_reused_with_zero_bytes(hub, tiny):
    from huggingface_hub import hf_hub_download

    s = paths.settings()
    theirs = hf_hub_download(REPO, "Tiny-Q4_K_M.gguf", cache_dir=s.hf_cache_dir, endpoint=s.hf_endpoint)
    hub.reset_counters()
    ours = store.ensure(f"{REPO}:q4_k_m")
    assert ours == Path(theirs)
    assert hub.bytes_served == 0 and hub.requests == []  # local-first: not even a HEAD
    assert store.list_models()[0].verified  # hashed once against the blob's name (the sha256)


def test_pocketchat_download_is_reused_by_hf_hub_download(hub, tiny):
    from huggingface_hub import hf_hub_download

    ours = store.ensure(f"{REPO}/Tiny-IQ2_M.gguf")
    hub.reset_counters()
    s = paths.settings()
    theirs = hf_hub_download(REPO, "Tiny-IQ2_M.gguf", cache_dir=s.hf_cache_dir, endpoint=s.hf_endpoint)
    assert Path(theirs) == ours and hub.bytes_served == 0


def test_corrupt_file_in_the_cache_is_refused(hub, tiny):
    path = store.ensure(f"{REPO}:IQ2_M")
    marker_dir = paths.settings().data_dir / "verified"
    for m in marker_dir.rglob("*.json"):
        m.unlink()
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.resolve().write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatch, match="corrupt") as e:
        store.ensure(f"{REPO}:IQ2_M")
    assert "models rm" in e.value.hint


def test_offline_start_with_the_server_stopped(hub, tiny):
    path = store.ensure(f"{REPO}:Q4_K_S")
    hub.stop()
    assert store.ensure(f"{REPO}:Q4_K_S") == path
    assert store.ensure(f"{REPO}:Q4_K_S", offline=True) == path
    assert store.local_path(f"{REPO}:Q4_K_S") == path
    rm = store.resolve(f"{REPO}:Q4_K_S")  # Hub unreachable -> resolved from the cache
    assert rm.offline and rm.commit == path.parent.name


def test_offline_makes_no_network_call_and_lists_what_is_on_disk(hub, tiny, monkeypatch):
    store.ensure(f"{REPO}:IQ2_M")
    hub.reset_counters()
    with pytest.raises(OfflineError) as e:
        store.ensure(f"{REPO}:Q4_K_M", offline=True)
    assert "Tiny-IQ2_M.gguf" in e.value.message and hub.requests == []
    monkeypatch.setenv("POCKETCHAT_OFFLINE", "1")
    paths.reset()
    with pytest.raises(OfflineError):
        store.ensure(f"{REPO}:Q4_K_M")
    assert store.resolve(f"{REPO}/Tiny-Q4_K_M.gguf").offline
    assert hub.requests == []


def test_hub_unreachable_is_automatic_offline():
    # conftest points HF_ENDPOINT at a closed port
    build = catalog.get("POCKET-35B-Q2_K")
    rm = store.resolve(build)
    assert rm.offline and rm.files[0].path == build.filename and rm.size_bytes == build.size_bytes
    with pytest.raises(OfflineError, match="cannot reach") as e:
        store.ensure(build)
    assert "nothing yet" in e.value.message


def test_repo_not_found_and_missing_file(hub, tiny):
    with pytest.raises(RepoNotFound, match="no model repository nobody/Nothing"):
        store.ensure("nobody/Nothing:Q4_K_M")
    with pytest.raises(ModelNotFound, match="no file 'Tiny-Q8_0.gguf'"):
        store.ensure(f"{REPO}/Tiny-Q8_0.gguf")


@pytest.mark.parametrize("error_code", ["GatedRepo", None])
def test_gated_or_private_repo_says_set_hf_token(hub, tiny, error_code):
    from pocketchat.cli import format_error

    hub.faults.status[REPO] = (401, error_code)
    with pytest.raises(GatedRepo) as e:
        store.ensure(f"{REPO}:Q4_K_M")
    assert "HF_TOKEN" in format_error(e.value)
    assert hub.bytes_served == 0


def test_repo_quant_resolution(hub, tiny):
    rm = store.resolve(f"{REPO}:iq2_m")
    assert [f.path for f in rm.files] == ["Tiny-IQ2_M.gguf"] and rm.files[0].size == 300_000
    assert rm.files[0].sha256 == hashlib.sha256(tiny["Tiny-IQ2_M.gguf"]).hexdigest()
    with pytest.raises(AmbiguousModel) as e:
        store.resolve(f"{REPO}:Q4_K")
    assert "Tiny-Q4_K_M.gguf" in e.value.message and "Tiny-Q4_K_S.gguf" in e.value.message
    with pytest.raises(AmbiguousModel) as e:
        store.resolve(f"{REPO}:Q8_0")
    assert "Tiny-IQ2_M.gguf" in e.value.message and "mmproj" not in e.value.message
    with pytest.raises(AmbiguousModel, match="several GGUF"):
        store.resolve(REPO)
    with pytest.raises(ModelNotFound):
        store.resolve("not a model")


def test_split_files_download_as_a_group(hub):
    parts = {f"Big-Q3_K_M-0000{i}-of-00003.gguf": blob(200_000 + i, 10 + i) for i in (1, 2, 3)}
    hub.add_repo("tester/Big-GGUF", {**parts, "Big-Q2_K.gguf": blob(5000, 20)})
    rm = store.resolve("tester/Big-GGUF:Q3_K_M")
    assert sorted(f.path for f in rm.files) == sorted(parts)
    path = store.ensure(rm)
    assert path.name == "Big-Q3_K_M-00001-of-00003.gguf"
    for name, data in parts.items():
        assert (path.parent / name).read_bytes() == data
    [m] = store.list_models()
    assert m.size_bytes == sum(len(d) for d in parts.values()) and len(m.files) == 3
    # naming one part names the whole group
    assert len(store.resolve("tester/Big-GGUF/Big-Q3_K_M-00002-of-00003.gguf").files) == 3


def test_incomplete_split_group_is_not_offered(hub):
    hub.add_repo("tester/Half-GGUF", {"H-Q4_0-00001-of-00002.gguf": blob(1000, 30)})
    with pytest.raises(ModelNotFound, match="missing parts"):
        store.resolve("tester/Half-GGUF:Q4_0")


def test_catalog_build_uses_the_real_file_name_from_the_listing(hub):
    build = catalog.get("POCKET-KR-IQ2_M")
    real = "POCKET-KR-96E-IQ2_M.gguf"  # not the catalog's guess
    data = blob(700_000, 40)
    hub.add_repo(build.repo_id, {real: data, "POCKET-KR-160-Q2_K.gguf": blob(1000, 41)})
    rm = store.resolve(build)
    assert rm.files[0].path == real and rm.size_bytes == len(data) and not rm.offline
    path = store.ensure(build)
    assert path.name == real and path.read_bytes() == data
    assert store.downloaded_build_ids() == {"POCKET-KR-IQ2_M"}
    assert store.list_models()[0].build_id == "POCKET-KR-IQ2_M"
    hub.stop()
    assert store.ensure(build) == path  # offline: found by quant in the snapshot


def test_mlx_build_is_a_folder_of_allowed_files(hub):
    build = catalog.get("POCKET-KR-MLX")
    files = {"model.safetensors": blob(600_000, 50), "config.json": b'{"model_type": "qwen3_moe"}',
             "tokenizer.json": b'{"v": 1}', "tokenizer_config.json": b"{}", "chat_template.jinja": b"{{x}}",
             "README.md": b"card", "onnx/model.onnx": blob(5000, 51)}
    hub.add_repo(build.repo_id, files)
    folder = store.ensure(build)
    assert folder.is_dir()
    got = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert got == sorted(["model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
                          "chat_template.jinja"])
    assert (folder / "config.json").read_bytes() == files["config.json"]
    [m] = store.list_models()
    assert m.format == "mlx" and m.build_id == "POCKET-KR-MLX" and m.verified  # json files: git sha1
    assert "POCKET-KR-MLX" in store.downloaded_build_ids()


def test_disk_full_precheck_downloads_nothing(hub, tiny, monkeypatch):
    monkeypatch.setattr(cache, "free_disk_bytes", lambda _p: 10_000_000)  # less than size + margin
    asked = []
    with pytest.raises(DiskFull) as e:
        store.ensure(f"{REPO}:Q4_K_M", confirm=lambda plan: asked.append(plan) or True)
    assert "0.01 GB are free" in e.value.message and "needs 0.00 GB" in e.value.message
    assert asked == [] and hub.bytes_served == 0


def test_declined_confirmation_downloads_nothing(hub, tiny, monkeypatch):
    monkeypatch.setattr(cache, "free_disk_bytes", lambda _p: 50 * 10**9)
    plans = []
    with pytest.raises(DownloadDeclined, match="nothing was downloaded"):
        store.ensure(f"{REPO}:Q4_K_M", confirm=lambda plan: plans.append(plan) or False)
    [plan] = plans
    assert plan.total_bytes == 1_500_000 and plan.free_after_bytes == 50 * 10**9 - 1_500_000
    assert "Download tester/Tiny-GGUF:Q4_K_M (1.5 MB)" in plan.question()
    assert hub.bytes_served == 0 and store.list_models() == []


def test_local_path_spec(tmp_path):
    f = tmp_path / "model.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 100)
    assert store.ensure(str(f)) == f.resolve()
    assert store.resolve(str(f)).local == f.resolve()
    with pytest.raises(ModelNotFound, match="no such file"):
        store.ensure(str(tmp_path / "missing.gguf"))


def test_remove(hub, tiny):
    path = store.ensure(f"{REPO}:Q4_K_S")
    keep = store.ensure(f"{REPO}:IQ2_M")
    removed = store.remove(f"{REPO}/Tiny-Q4_K_S.gguf")
    assert path in removed and not path.exists() and not os.path.lexists(path)
    assert [m.filename for m in store.list_models()] == ["Tiny-IQ2_M.gguf"]
    store.remove(str(keep))
    assert store.list_models() == [] and not cache.repo_dir(REPO).exists()
    with pytest.raises(ModelNotFound, match="on disk: nothing"):
        store.remove("POCKET-35B-Q2_K")


def test_downloaded_build_ids_is_fast_and_does_not_import_huggingface_hub(hub):
    build = catalog.get("POCKET-35B-IQ1_M")
    hub.add_repo(build.repo_id, {build.filename: blob(2000, 60)})
    store.ensure(build)
    code = ("import sys, time; t = time.perf_counter(); from pocketchat.store import api as store; "
            "ids = store.downloaded_build_ids(); dt = time.perf_counter() - t; "
            "print(sorted(ids), 'huggingface_hub' in sys.modules, dt)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    ids, imported, dt = out.stdout.rsplit(" ", 2)
    assert ids.strip() == "['POCKET-35B-IQ1_M']" and imported == "False" and float(dt) < 1.0


def test_verified_file_is_not_hashed_again(hub, tiny, monkeypatch):
    path = store.ensure(f"{REPO}:IQ2_M")

    def no_rehash(*_a, **_k):
        raise AssertionError("hashed again")

    monkeypatch.setattr(cache, "hash_file", no_rehash)
    assert store.ensure(f"{REPO}:IQ2_M") == path
    assert store.list_models()[0].verified
    path.resolve().touch()  # changed since it was verified: no longer counts as verified
    assert not store.list_models()[0].verified


def test_token_goes_to_the_hub_but_not_to_the_cdn(monkeypatch):
    with HubServer(cdn_redirect=True) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_TOKEN", "hf_testtoken")
        paths.reset()
        data = blob(900_000, 99)
        server.add_repo(REPO, {"Tiny-Q4_K_M.gguf": data})
        assert store.ensure(f"{REPO}:Q4_K_M").read_bytes() == data
        api = [h for _m, p, h in server.requests if p.startswith("/api/models/")]
        assert api and all(h.get("Authorization") == "Bearer hf_testtoken" for h in api)
        cdn = [h for _m, p, h in server.requests if p.startswith("/cdn/")]
        assert cdn and all("Authorization" not in h for h in cdn)
        resolve = [h for m, p, h in server.requests if "/resolve/" in p]
        assert resolve and all(h.get("Authorization") == "Bearer hf_testtoken" for h in resolve)


def test_huggingface_hub_scan_cache_dir_reads_our_cache(hub, tiny):
    from huggingface_hub import scan_cache_dir

    path = store.ensure(f"{REPO}:IQ2_M")
    (path.resolve().parent / ("0" * 64 + ".incomplete")).write_bytes(b"partial")  # a kept partial
    info = scan_cache_dir(paths.settings().hf_cache_dir)
    assert info.warnings == []
    [repo] = info.repos
    assert repo.repo_id == REPO and set(repo.refs) == {"main"}
    [rev] = repo.revisions
    assert [f.file_path for f in rev.files] == [path] and rev.commit_hash == hub.repos[REPO].commit
