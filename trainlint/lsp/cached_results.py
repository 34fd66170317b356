"""Results that `trainlint check` (or an earlier buffer) kept in the user's result cache, for the
buffers that equal them: a file opened as it is on disk shows its findings without an analysis.

Light on purpose: the server's front process asks this before its analysis worker is ready.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from trainlint.config import Settings
from trainlint.engine.results import FileResult
from trainlint.reading import read_regular

if TYPE_CHECKING:
    from trainlint.engine.cache import Cache

_CACHE: list[Cache | None] = []


def result_cache() -> Cache | None:
    """The user's result cache (opened once per process), or None where there is none."""
    if not _CACHE:
        from trainlint.engine.cache import Cache
        from trainlint.engine.cache_folder import CacheKeyError, default_directory, load_key

        try:
            _CACHE.append(Cache(default_directory(), key=load_key()))
        except CacheKeyError:  # no key: no cache (the command line says why)
            _CACHE.append(None)
    cache = _CACHE[0]
    return cache if cache is not None and cache.enabled else None


def _spellings(name: str) -> list[str]:
    """The names `check` may have cached a file under: as given, and relative to the folder the
    server runs in (`trainlint .` names files so)."""
    try:
        relative = os.path.relpath(name)
    except ValueError:  # (another drive)
        return [name]
    return [name] if relative == name or relative.startswith("..") else [name, relative]


def cached_result(source: str, name: str, settings: Settings) -> FileResult | None:
    """The cached result of `source` linted as `name` (or as `check` spells the name), with `name`'s
    spelling; None when the cache holds none that is still valid (every module it read is checked)."""
    cache = result_cache()
    if cache is None or not name.endswith(".py"):
        return None
    cache.refresh()  # (the modules a result read may have changed since the last buffer)
    data = source.encode("utf-8", "surrogatepass")
    for spelling in _spellings(name):
        hit, _ = cache.lookup_data(spelling, data, settings)
        if hit is not None:
            hit.path, hit.source = name, source
            hit.diagnostics = [replace(d, path=name) if d.path == spelling else d for d in hit.diagnostics]
            return hit
    return None


def keep_result(source: str, name: str, settings: Settings, result: FileResult) -> None:
    """Keep a buffer's result where the buffer equals its file on disk (what `check` of the file keeps)."""
    cache = result_cache()
    if cache is None or not name.endswith(".py") or not result.cacheable or result.internal_error:
        return
    data = source.encode("utf-8", "surrogatepass")
    if read_regular(name, settings.max_file_size) == data:  # (the lookup just missed: no second read of the entry)
        cache.store(cache.key(name, data, settings), result)
    result.dependencies = ()  # (the cache's only)
