"""Fetch a BEIR collection onto a fresh machine: download with a checksum, unzip atomically.

The download is done by `pooch <https://www.fatiando.org/pooch/>`_ (the ``data``
extra), which writes to a temporary file, checks the MD5 and only then moves
the file into place; a failed or corrupt download leaves nothing behind. The
archive is then unzipped into a temporary folder next to the destination and
renamed into place in one step, so a half-extracted collection never appears.

:data:`BEIR_REGISTRY` holds the URLs and MD5 checksums BEIR publishes in its
README's "available datasets" table (github.com/beir-cellar/beir). For a known
name, a ``url`` whose file does not match the registry checksum is refused
unless an explicit ``md5`` is given.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from labsrc.datasets.beir import ENV_VAR, beir_search_dirs
from labsrc.errors import InvalidArgument, LabError, MissingDependency

__all__ = ["BEIR_BASE_URL", "BEIR_REGISTRY", "default_fetch_dir", "fetch_beir"]

BEIR_BASE_URL = "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets"

#: name → (url, md5) as published in BEIR's README table.
BEIR_REGISTRY: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "scifact": (f"{BEIR_BASE_URL}/scifact.zip", "5f7d1de60b170fc8027bb7898e2efca1"),
        "nfcorpus": (f"{BEIR_BASE_URL}/nfcorpus.zip", "a89dba18a62ef92f7d323ec890a0d38d"),
        "arguana": (f"{BEIR_BASE_URL}/arguana.zip", "8ad3e3c2a5867cdced806d6503f29b99"),
        "fiqa": (f"{BEIR_BASE_URL}/fiqa.zip", "17918ed23cd04fb15047f73e6c3bd9d9"),
        "scidocs": (f"{BEIR_BASE_URL}/scidocs.zip", "38121350fc3a4d2f48850f6aff52e4a9"),
    }
)

_MD5 = re.compile(r"[0-9a-f]{32}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def default_fetch_dir() -> Path:
    """``$LABSRC_BEIR_DIR`` if set, else the per-user cache folder (:func:`~labsrc.datasets.beir.user_beir_dir`,
    ``~/.cache/labsrc/beir`` on Linux): the first place ``labsrc beir`` and ``labsrc embed --beir`` look."""
    return beir_search_dirs()[0]


def _pooch():
    try:
        import pooch
    except ModuleNotFoundError:
        raise MissingDependency(
            "fetching BEIR data needs the 'pooch' package: pip install 'hybrid-retrieval-lab[data]' (or pip install pooch)"
        ) from None
    return pooch


def _extract(archive: Path, name: str, dest_dir: Path) -> Path:
    """Unzip ``archive`` into a temporary folder in ``dest_dir`` and rename ``<name>/`` into place."""
    target = dest_dir / name
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.partial-", dir=dest_dir))
    try:
        with zipfile.ZipFile(archive) as zipped:
            for member in zipped.namelist():
                resolved = (staging / member).resolve()
                if not resolved.is_relative_to(staging.resolve()):
                    raise InvalidArgument(f"{archive.name}: refusing member {member!r}, which points outside the folder")
            zipped.extractall(staging)
        root = staging / name
        if not (root / "corpus.jsonl").is_file():
            roots = sorted(p.name for p in staging.iterdir())
            raise InvalidArgument(
                f"{archive.name} does not hold {name}/corpus.jsonl (top level: {roots}); is it a BEIR collection?"
            )
        os.replace(root, target)
    except zipfile.BadZipFile as exc:
        raise InvalidArgument(f"{archive.name} is not a zip file ({exc})") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def fetch_beir(
    name: str,
    *,
    dest_dir: str | Path | None = None,
    url: str | None = None,
    md5: str | None = None,
    progress: bool = True,
) -> Path:
    """Download BEIR collection ``name`` into ``dest_dir/name`` and return that folder.

    ``dest_dir`` defaults to :func:`default_fetch_dir`. A name outside
    :data:`BEIR_REGISTRY` needs both ``url`` and ``md5``. An existing
    ``dest_dir/name`` with a ``corpus.jsonl`` is returned as it is.
    """
    if not _NAME.fullmatch(name):
        raise InvalidArgument(f"collection name {name!r} must be one word of letters, digits, '.', '_' or '-'")
    if md5 is not None:
        md5 = md5.strip().lower()
        if not _MD5.fullmatch(md5):
            raise InvalidArgument(f"--md5 {md5!r} is not an MD5 checksum (32 hex digits)")
    known = BEIR_REGISTRY.get(name)
    if known is None and (url is None or md5 is None):
        raise InvalidArgument(
            f"{name!r} is not in the registry ({', '.join(sorted(BEIR_REGISTRY))}); give both --url and --md5"
        )
    url = url or known[0]
    checksum = md5 or known[1]
    dest = Path(dest_dir) if dest_dir is not None else default_fetch_dir()
    target = dest / name
    if (target / "corpus.jsonl").is_file():
        return target
    if target.exists():
        raise InvalidArgument(f"{target} exists but holds no corpus.jsonl; remove it or choose another --dir")
    pooch = _pooch()
    created = [p for p in (dest, *dest.parents) if not p.exists()]  # deepest first: removed if nothing is kept
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidArgument(f"--dir {dest}: cannot create it ({exc.strerror})") from None
    kept = False
    download = Path(tempfile.mkdtemp(prefix=f".{name}.download-", dir=dest))
    try:
        try:
            logger = pooch.get_logger()
            level = logger.level
            logger.setLevel("WARNING")  # its "Downloading data from ... to file ..." names our temporary folder
            try:
                archive = pooch.retrieve(
                    url, known_hash=f"md5:{checksum}", fname=f"{name}.zip", path=download, progressbar=progress
                )
            finally:
                logger.setLevel(level)
        except ValueError as exc:  # pooch: the hash does not match
            advice = (
                f"it is not the file BEIR publishes as {name!r}; pass --md5 with this file's checksum if you mean it"
                if md5 is None else "the download is corrupt or the checksum is wrong"
            )
            raise LabError(f"{url}: checksum mismatch (expected md5 {checksum}); {advice}. Nothing was kept.") from exc
        except Exception as exc:  # network errors come from requests; say what failed, never a traceback
            raise LabError(
                f"{url}: download failed ({type(exc).__name__}: {exc}). Nothing was kept. {_offline(name, url)}"
            ) from exc
        target = _extract(Path(archive), name, dest)
        kept = True
        return target
    finally:
        shutil.rmtree(download, ignore_errors=True)
        if not kept:
            for folder in created:  # only the folders this call made, and only while they are empty
                try:
                    folder.rmdir()
                except OSError:
                    break


def _offline(name: str, url: str) -> str:
    """How to get the collection without this machine reaching the network."""
    return (
        f"Offline? Fetch {url} on another machine, unzip it so that {name}/corpus.jsonl sits in a folder "
        f"DIR here, and set {ENV_VAR}=DIR (or pass --data DIR to labsrc beir)."
    )
