"""``labsrc data fetch`` against a local HTTP server on 127.0.0.1: nothing reaches the internet."""

from __future__ import annotations

import functools
import hashlib
import http.server
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from labsrc.cli.main import main
from labsrc.datasets import ENV_VAR, user_beir_dir
from labsrc.datasets.fetch import BEIR_REGISTRY, default_fetch_dir, fetch_beir
from labsrc.errors import InvalidArgument, LabError

pytest.importorskip("pooch", reason="pooch (the data extra)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Serve a folder holding tiny.zip (a BEIR-shaped collection) and junk.zip (not a zip)."""
    root = tmp_path_factory.mktemp("www")
    with zipfile.ZipFile(root / "tiny.zip", "w") as zipped:
        zipped.writestr("tiny/corpus.jsonl", '{"_id": "d1", "title": "", "text": "bones"}\n')
        zipped.writestr("tiny/queries.jsonl", '{"_id": "q1", "text": "bone"}\n')
        zipped.writestr("tiny/qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (root / "junk.zip").write_bytes(b"not a zip at all")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_without_pooch_the_hint_installs_the_extra_by_distribution_name(tmp_path: Path, monkeypatch, capsys) -> None:
    # "pip install -e '.[data]'" only works inside a clone; the distribution name works from a wheel too.
    monkeypatch.setitem(sys.modules, "pooch", None)  # import fails as if not installed
    assert main(["data", "fetch", "scifact", "--dir", str(tmp_path / "beir")]) == 2
    err = capsys.readouterr().err
    assert "fetching BEIR data needs the 'pooch' package: pip install 'hybrid-retrieval-lab[data]'" in err
    assert "-e '." not in err and "Traceback" not in err
    assert not (tmp_path / "beir").exists()


def test_registry_holds_the_published_checksums() -> None:
    assert set(BEIR_REGISTRY) >= {"scifact", "nfcorpus", "arguana", "fiqa", "scidocs"}
    assert BEIR_REGISTRY["scifact"][1] == "5f7d1de60b170fc8027bb7898e2efca1"
    assert BEIR_REGISTRY["nfcorpus"][1] == "a89dba18a62ef92f7d323ec890a0d38d"
    assert all(url.endswith(f"/{name}.zip") for name, (url, _) in BEIR_REGISTRY.items())


def test_fetch_from_a_local_server_unzips_into_dir(server, tmp_path: Path, capsys) -> None:
    root, base = server
    dest = tmp_path / "beir"
    args = ["data", "fetch", "tiny", "--dir", str(dest), "--url", f"{base}/tiny.zip", "--md5", md5(root / "tiny.zip")]
    assert main(args) == 0
    assert (dest / "tiny" / "corpus.jsonl").read_text() == '{"_id": "d1", "title": "", "text": "bones"}\n'
    assert sorted(p.name for p in dest.iterdir()) == ["tiny"]  # no zip, no temporary folder left
    assert f"tiny is in {dest / 'tiny'}" in capsys.readouterr().out
    assert main(args) == 0  # already there: returned as it is


def test_a_url_not_matching_the_registry_checksum_is_refused_and_leaves_nothing(server, tmp_path: Path, capsys) -> None:
    root, base = server
    dest = tmp_path / "beir"
    code = main(["data", "fetch", "scifact", "--dir", str(dest), "--url", f"{base}/tiny.zip", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "checksum mismatch (expected md5 5f7d1de60b170fc8027bb7898e2efca1)" in err
    assert "pass --md5 with this file's checksum if you mean it" in err and "Traceback" not in err
    assert not dest.exists()  # the folder this fetch made is removed too: nothing was kept


def test_an_explicit_md5_accepts_another_file_for_a_known_name(server, tmp_path: Path) -> None:
    root, base = server
    # The served archive holds tiny/, not scifact/: accepted by checksum, then refused for its content.
    with pytest.raises(InvalidArgument, match=r"does not hold scifact/corpus.jsonl \(top level: \['tiny'\]\)"):
        fetch_beir("scifact", dest_dir=tmp_path, url=f"{base}/tiny.zip", md5=md5(root / "tiny.zip"), progress=False)
    assert list(tmp_path.iterdir()) == []
    path = fetch_beir("tiny", dest_dir=tmp_path, url=f"{base}/tiny.zip", md5=md5(root / "tiny.zip"), progress=False)
    assert path == tmp_path / "tiny" and (path / "qrels" / "test.tsv").is_file()


def test_a_corrupt_download_leaves_nothing(server, tmp_path: Path) -> None:
    root, base = server
    with pytest.raises(LabError, match="checksum mismatch"):
        fetch_beir("tiny", dest_dir=tmp_path, url=f"{base}/junk.zip", md5="0" * 32, progress=False)
    with pytest.raises(InvalidArgument, match="junk.zip is not a zip file"):
        fetch_beir("junk", dest_dir=tmp_path, url=f"{base}/junk.zip", md5=md5(root / "junk.zip"), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_bad_arguments_exit_2(server, tmp_path: Path, capsys) -> None:
    _, base = server
    assert main(["data", "fetch", "tiny", "--dir", str(tmp_path)]) == 2
    assert "'tiny' is not in the registry" in capsys.readouterr().err
    assert main(["data", "fetch", "tiny", "--dir", str(tmp_path), "--url", f"{base}/tiny.zip", "--md5", "xyz"]) == 2
    assert "--md5 'xyz' is not an MD5 checksum" in capsys.readouterr().err
    assert main(["data", "fetch", "tiny", "--dir", str(tmp_path), "--url", f"{base}/missing.zip", "--md5", "0" * 32]) == 2
    assert "download failed" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_default_dir_is_the_env_var_else_a_user_cache(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert default_fetch_dir() == tmp_path
    monkeypatch.delenv(ENV_VAR)
    assert default_fetch_dir().parts[-2:] == ("labsrc", "beir")


def test_fetch_without_dir_lands_where_beir_looks(server, tmp_path: Path, monkeypatch, capsys) -> None:
    # A fresh user: no $LABSRC_BEIR_DIR, a temporary HOME and XDG cache. `data fetch` puts the
    # collection in the per-user cache, and `labsrc beir` finds it there with no --data.
    root, base = server
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = default_fetch_dir()
    assert cache == user_beir_dir() and cache.parts[-2:] == ("labsrc", "beir")
    assert main(["data", "fetch", "tiny", "--url", f"{base}/tiny.zip", "--md5", md5(root / "tiny.zip")]) == 0
    out = capsys.readouterr().out
    assert f"tiny is in {cache / 'tiny'}" in out and f"labsrc embed --beir {cache / 'tiny'}" in out
    assert main(["beir", "--dataset", "tiny", "--lanes", "bm25", "--no-progress"]) == 0
    assert "BEIR tiny / test: 1 queries" in capsys.readouterr().out


def test_an_offline_fetch_removes_the_folders_it_made_and_names_the_offline_route(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    # Issue 22: offline, `labsrc data fetch` left the empty cache folder it created and did not
    # mention LABSRC_BEIR_DIR. Port 9 on 127.0.0.1 refuses the connection, as a machine offline does.
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (tmp_path / "home").mkdir()
    assert main(["data", "fetch", "tiny", "--url", "http://127.0.0.1:9/tiny.zip", "--md5", "0" * 32]) == 2
    err = capsys.readouterr().err
    assert "download failed" in err and f"set {ENV_VAR}=DIR" in err and "--data DIR" in err
    assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]  # xdg/labsrc/beir made, then removed
    kept = tmp_path / "mine"
    (kept / "notes").mkdir(parents=True)
    assert main(["data", "fetch", "tiny", "--dir", str(kept / "beir"), "--url", "http://127.0.0.1:9/t.zip",
                 "--md5", "0" * 32]) == 2  # fmt: skip
    assert sorted(p.name for p in kept.iterdir()) == ["notes"]  # an existing folder stays
