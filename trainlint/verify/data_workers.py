"""Data workers draw different randomness: a random generator owned by the dataset (a
`torch.Generator`, a NumPy `Generator`/`RandomState`, a `random.Random`, also inside its transforms)
is copied into every DataLoader worker; unless something reseeds it per worker, every worker draws
the same numbers, and without persistent workers every epoch draws them again.

Each worker is measured, not guessed: the loader's `worker_init_fn` is wrapped (the script's own runs
first) to fingerprint the dataset's generators once the worker is set up and again after its first
batch, and each worker writes its fingerprints to a file the run reads at the end. torch's, Python's
and NumPy's global generators are reseeded per worker by the DataLoader and are not looked at.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import weakref
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterator

import torch

from trainlint.verify.live_objects import user_frames
from trainlint.verify.run_invariants import _site

Report = dict[str, Any]
MAX_DEPTH = 3  # dataset -> transform -> its parts
MAX_OBJECTS = 200


class WorkerProbe:
    """A DataLoader's `worker_init_fn`: runs the script's, then records the dataset's generators in
    this worker (picklable, for workers that are spawned)."""

    def __init__(self, init_fn: Callable[[int], Any] | None, folder: str, loader: int, epoch: int) -> None:
        self.init_fn, self.folder, self.loader, self.epoch = init_fn, folder, loader, epoch

    def __call__(self, worker_id: int) -> None:
        if self.init_fn is not None:
            self.init_fn(worker_id)
        try:
            info = torch.utils.data.get_worker_info()
            start = fingerprints(info.dataset) if info is not None else {}
            if start:
                _after_first_batch(lambda: self._write(worker_id, start, fingerprints(info.dataset)))
        except Exception:  # a measurement of ours must never break the script's loading
            pass

    def _write(self, worker_id: int, start: dict[str, str], after: dict[str, str]) -> None:
        path = Path(self.folder) / f"{self.loader}-{self.epoch}-{worker_id}.json"
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps({"loader": self.loader, "epoch": self.epoch, "worker": worker_id, "start": start, "after": after}), encoding="utf-8")
        os.replace(partial, path)


def _after_first_batch(then: Callable[[], None]) -> None:
    """Run `then` once, after this worker's first fetch (the fetchers' classes are patched in this
    worker process only)."""
    from torch.utils.data._utils import fetch

    done = [False]
    for fetcher in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
        original = fetcher.fetch

        def fetched(self: Any, index: Any, _original: Any = original) -> Any:
            result = _original(self, index)
            if not done[0]:
                done[0] = True
                try:
                    then()
                except Exception:
                    pass
            return result

        fetcher.fetch = fetched  # type: ignore[method-assign]


def fingerprints(dataset: Any) -> dict[str, str]:
    """`"dataset.rng" -> hash of its state` for each generator the dataset owns (not the globals)."""
    return {path: _state_hash(generator) for path, generator in _generators(dataset)}


def _generators(root: Any) -> Iterator[tuple[str, Any]]:
    seen: set[int] = set()
    queue: list[tuple[str, Any, int]] = [("dataset", root, 0)]
    while queue and len(seen) < MAX_OBJECTS:
        path, obj, depth = queue.pop(0)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if _is_generator(obj):
            if depth:
                yield path, obj
            continue
        if depth >= MAX_DEPTH or isinstance(obj, (str, bytes, int, float, bool, type(None), torch.Tensor)) or isinstance(obj, type):
            continue
        if isinstance(obj, (list, tuple)):
            queue.extend((f"{path}[{i}]", item, depth + 1) for i, item in enumerate(obj[:20]))
            continue
        if isinstance(obj, dict):
            queue.extend((f"{path}[{k!r}]", item, depth + 1) for k, item in list(obj.items())[:20] if isinstance(k, (str, int)))
            continue
        attributes = getattr(obj, "__dict__", None)
        if isinstance(attributes, dict) and not isinstance(obj, (torch.nn.Module,)) and type(obj).__module__ != "builtins":
            queue.extend((f"{path}.{name}", value, depth + 1) for name, value in list(attributes.items())[:50])


def _is_generator(obj: Any) -> bool:
    if isinstance(obj, torch.Generator):
        return True
    if isinstance(obj, random.Random):
        return obj is not getattr(random, "_inst", None)
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return False
    if isinstance(obj, numpy.random.RandomState):
        return obj is not getattr(numpy.random.mtrand, "_rand", None)
    return isinstance(obj, numpy.random.Generator)


def _state_hash(generator: Any) -> str:
    if isinstance(generator, torch.Generator):
        state: Any = generator.get_state().numpy().tobytes()
    elif isinstance(generator, random.Random):
        state = repr(generator.getstate()).encode()
    elif hasattr(generator, "bit_generator"):
        state = repr(generator.bit_generator.state).encode()
    else:
        kind, keys, *rest = generator.get_state()
        state = keys.tobytes() + repr(rest).encode()
    return f"{type(generator).__name__}:{hashlib.sha1(state).hexdigest()[:16]}"


class DataWorkerWatch:
    """Wraps each multi-worker DataLoader iterator's `worker_init_fn`, and judges the workers' files."""

    def __init__(self, recorder: Any, folder: str) -> None:
        self.recorder, self.folder = recorder, folder
        self.loaders: dict[int, Report] = {}  # id(loader) -> where it was built, its dataset, epochs
        self.sites: weakref.WeakKeyDictionary[Any, Report] = weakref.WeakKeyDictionary()

    def install(self) -> None:
        loader_class = torch.utils.data.DataLoader
        original_init, original_iterator = loader_class.__init__, loader_class._get_iterator
        built = self.recorder.guarded(self._built)
        probe = self.recorder.guarded(self._probe)

        def init(loader: Any, *args: Any, **kwargs: Any) -> None:
            original_init(loader, *args, **kwargs)
            built(loader, sys._getframe(1))

        def get_iterator(loader: Any) -> Any:
            init_fn = loader.worker_init_fn
            wrapped = probe(loader) if loader.num_workers > 0 else None
            if wrapped is None:
                return original_iterator(loader)
            loader.worker_init_fn = wrapped
            try:
                return original_iterator(loader)
            finally:
                loader.worker_init_fn = init_fn

        init.__wrapped__, get_iterator.__wrapped__ = original_init, original_iterator  # type: ignore[attr-defined]
        loader_class.__init__ = init  # type: ignore[method-assign]
        loader_class._get_iterator = get_iterator  # type: ignore[method-assign]

    def _built(self, loader: Any, frame: FrameType | None) -> None:
        site = next(user_frames(frame), None)
        if site is not None:
            self.sites[loader] = _site(site)

    def _probe(self, loader: Any) -> WorkerProbe | None:
        entry = self.loaders.get(id(loader))
        if entry is None:
            if len(self.loaders) >= 20:
                return None
            init_fn = loader.worker_init_fn
            entry = self.loaders[id(loader)] = {
                "built_at": self.sites.get(loader), "dataset": type(loader.dataset).__name__, "workers": loader.num_workers,
                "persistent_workers": bool(loader.persistent_workers), "epochs": 0,
                "worker_init_fn": getattr(init_fn, "__qualname__", type(init_fn).__name__) if init_fn is not None else None,
            }
        entry["epochs"] += 1
        os.makedirs(self.folder, exist_ok=True)
        return WorkerProbe(loader.worker_init_fn, self.folder, id(loader), entry["epochs"])

    def report(self) -> Report:
        """"data_workers": per DataLoader, the generators its workers drew alike."""
        measured: dict[tuple[int, int], list[Report]] = {}
        for path in Path(self.folder).glob("*.json") if os.path.isdir(self.folder) else []:
            try:
                row = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            measured.setdefault((row["loader"], row["epoch"]), []).append(row)
        rows = []
        for key, loader in self.loaders.items():
            epochs = {epoch: workers for (k, epoch), workers in measured.items() if k == key}
            rows.append({**loader, "generators": _compare(epochs)})
        return {"data_workers": rows}


def _compare(epochs: dict[int, list[Report]]) -> list[Report]:
    """Each generator drawn alike: by every worker of an epoch (same state after the first batch, and
    moved by it), or at the start of each epoch by the same worker."""
    found: dict[str, Report] = {}
    for epoch, workers in sorted(epochs.items()):
        workers = sorted(workers, key=lambda w: w["worker"])
        for path in workers[0]["after"] if len(workers) >= 2 else ():
            after = {w["after"].get(path) for w in workers}
            moved = any(w["after"].get(path) != w["start"].get(path) for w in workers)
            if len(after) == 1 and moved:
                entry = found.setdefault(path, {"attribute": path, "type": next(iter(after)).split(":")[0], "epochs_alike": [], "workers": len(workers)})
                entry["epochs_alike"].append(epoch)
    starts: dict[str, set[str]] = {}
    counted: dict[str, int] = {}
    for epoch, workers in sorted(epochs.items()):
        first = next((w for w in workers if w["worker"] == 0), None)
        for path, state in (first or {}).get("start", {}).items():
            starts.setdefault(path, set()).add(state)
            counted[path] = counted.get(path, 0) + 1
    for path, states in starts.items():
        if counted[path] >= 2 and len(states) == 1 and path in found:
            found[path]["repeats_every_epoch"] = counted[path]
    return list(found.values())
