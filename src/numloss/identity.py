"""Content hashes (SHA-256) of what a result depends on: model weights, data, gold answers.

A file's hash is cached (in memory and `$NUMLOSS_CACHE/hashes.json`) under its device, inode,
size, mtime_ns and ctime_ns: the kernel moves ctime on every write and no user can set it back,
so a cached hash is never returned for changed bytes. A model's hash covers its weight files
only, so the same weights hash the same on every machine; 'smollm2' hashes its GGUF source and
'tiny' (weights from config and seed) gives None.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from numloss.textio import read_json_object

#: the files whose bytes are a model's weights
WEIGHT_SUFFIXES = tuple(".safetensors .bin .gguf .pt .pth .ckpt .h5 .msgpack .npz".split())
_CHUNK = 1 << 20
_LOCK = threading.Lock()
_MEMORY: dict[str, tuple[tuple[int, ...], str]] = {}


def _cache_file() -> Path:
    return Path(os.environ.get("NUMLOSS_CACHE", "~/.cache/numloss")).expanduser() / "hashes.json"


def _stat_key(stat: os.stat_result) -> tuple[int, ...]:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _write_disk_cache(path: str, key: tuple[int, ...], digest: str) -> None:
    """Remember one hash on disk; the cache is an optimisation, so any failure is ignored."""
    from numloss.atomic import write_json_atomic

    try:
        cache = read_json_object(_cache_file()) or {}
        cache[path] = [list(key), digest]
        if len(cache) > 10_000:  # never grows without bound: the oldest entries go first
            cache = dict(list(cache.items())[-5_000:])
        _cache_file().parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(_cache_file(), cache)
    except OSError:
        pass


def file_sha256(path: str | Path) -> str:
    """The SHA-256 (hex) of a file's bytes, from the cache when device, inode, size, mtime_ns and
    ctime_ns are all unchanged (module doc)."""
    real = os.path.realpath(path)
    key = _stat_key(os.stat(real))
    with _LOCK:
        hit = _MEMORY.get(real)
    if hit is not None and hit[0] == key:
        return hit[1]
    stored = (read_json_object(_cache_file()) or {}).get(real)
    if isinstance(stored, list) and stored[:1] == [list(key)] and isinstance(stored[-1], str):
        digest = stored[-1]
    else:
        digest = sha256_uncached(real)
        if _stat_key(os.stat(real)) != key:  # written while read: hash what is there now, uncached
            return file_sha256(real)
        _write_disk_cache(real, key, digest)
    with _LOCK:
        _MEMORY[real] = (key, digest)
    return digest


def sha256_uncached(path: str | Path) -> str:
    """The SHA-256 (hex) of a file's bytes, read in 1 MiB chunks, never cached."""
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def folder_sha256(folder: str | Path, suffixes: Iterable[str] | None = None) -> str | None:
    """'sha256:…' of the manifest (relative path and SHA-256 of every file under `folder`, symlinks
    followed, hidden names skipped; only names ending in `suffixes` when given), or None when it
    holds no such file."""
    root = Path(folder)
    wanted = tuple(suffixes) if suffixes is not None else None
    manifest = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts) or not path.is_file():
            continue
        if wanted is not None and not path.name.endswith(wanted):
            continue
        manifest.append([relative.as_posix(), file_sha256(path)])
    if not manifest:
        return None
    return "sha256:" + hashlib.sha256(json.dumps(manifest).encode()).hexdigest()


def text_sha256(text: str) -> str:
    """'sha256:…' of a text's UTF-8 bytes."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def json_sha256(value: Any) -> str:
    """'sha256:…' of a JSON value (keys sorted: the same value always hashes the same)."""
    return text_sha256(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str))


def model_sha256(name: str, cache_dir: str | None = None) -> str | None:
    """The content hash of the weights a model name or folder loads (module doc); None for 'tiny'
    and for a hub id that is not in the local cache (nothing to hash without loading it)."""
    if name == "tiny":
        return None
    if name == "smollm2":
        from numloss.models import smollm2

        try:
            return "sha256:" + file_sha256(smollm2.gguf_path())
        except (smollm2.ModelNotPreparedError, OSError):
            return None
    from numloss.models.load import model_folder

    try:
        folder = model_folder(name)
    except Exception:  # noqa: BLE001 - an id the hub cache cannot resolve: nothing to hash
        return None
    return folder_sha256(folder, WEIGHT_SUFFIXES) if folder and folder.is_dir() else None


def describe_change(what: str, then: str | None, now: str | None) -> str:
    """'WHAT changed (sha256:abcdef123456 then, sha256:0123456789ab now)': the line part naming a
    changed input by the first 12 hex digits of each hash."""

    def short(value: str | None) -> str:
        if value is None:
            return "unknown"
        head, _, digest = value.partition(":")
        return f"{head}:{digest[:12]}" if digest else value[:19]

    return f"{what} changed ({short(then)} then, {short(now)} now)"
