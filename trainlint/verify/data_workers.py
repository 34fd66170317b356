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

import functools
import hashlib
import json
import os
import random
import sys
import types
import weakref
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Iterator

import torch

from trainlint.verify.live_objects import user_frames
from trainlint.verify.run_invariants import _site

Report = dict[str, Any]
MAX_DEPTH = 4  # dataset -> transform -> a function it keeps -> its closure
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
    """The generators reachable from the dataset: through attributes (of plain objects and of
    `nn.Module` transforms, torchvision v2's kind), containers, and the functions it keeps: a
    closure's cells, a `functools.partial`'s arguments, a bound method's object (an augmentation
    written `self.augment = lambda x: x + torch.randn(..., generator=g)` holds `g` in a cell only)."""
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
        queue.extend((child_path, child, depth + 1) for child_path, child in _children(path, obj))


def _children(path: str, obj: Any) -> list[tuple[str, Any]]:
    """What `obj` holds that may hold a generator, each with its path from the dataset."""
    if isinstance(obj, (list, tuple)):
        return [(f"{path}[{i}]", item) for i, item in enumerate(obj[:20])]
    if isinstance(obj, dict):
        return [(f"{path}[{k!r}]", item) for k, item in list(obj.items())[:20] if isinstance(k, (str, int))]
    if isinstance(obj, functools.partial):
        return [(f"{path}.func", obj.func), *((f"{path}.args[{i}]", a) for i, a in enumerate(obj.args[:10])),
                *((f"{path}.keywords[{k!r}]", v) for k, v in list(obj.keywords.items())[:10])]
    if isinstance(obj, types.MethodType):
        return [(path, obj.__self__), (path, obj.__func__)]
    if isinstance(obj, types.FunctionType):
        names = obj.__code__.co_freevars
        cells = [(f"{path}.<{name}>", cell.cell_contents) for name, cell in zip(names, obj.__closure__ or ()) if _filled(cell)]
        defaults = [(f"{path}.<default {i}>", d) for i, d in enumerate(obj.__defaults__ or ())]
        return cells + defaults + [(f"{path}.<{k}>", v) for k, v in (obj.__kwdefaults__ or {}).items()]
    if type(obj).__module__ == "builtins" or isinstance(obj, (torch.nn.Parameter, types.ModuleType)):
        return []
    attributes = getattr(obj, "__dict__", None)
    children: list[tuple[str, Any]] = []
    if isinstance(attributes, dict):
        internal = _module_internals() if isinstance(obj, torch.nn.Module) else set()  # parameters, buffers, hooks
        children = [(f"{path}.{name}", value) for name, value in list(attributes.items())[:50] if name not in internal]
        if isinstance(obj, torch.nn.Module):
            children += [(f"{path}.{name}", m) for name, m in list(obj._modules.items())[:20]]
    for name in _slots(type(obj)):
        if hasattr(obj, name):
            children.append((f"{path}.{name}", getattr(obj, name)))
    return children


@functools.lru_cache(maxsize=1)
def _module_internals() -> frozenset[str]:
    """The attributes every `nn.Module` has (`_parameters`, `_forward_hooks`...)."""
    return frozenset(vars(torch.nn.Module()))


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # a cell not yet assigned
        return False
    return True


def _slots(cls: type) -> list[str]:
    names: list[str] = []
    for klass in cls.__mro__[:-1]:
        slots = klass.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else [n for n in slots if n not in ("__dict__", "__weakref__")]
    return names[:20]


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
        # not `.numpy()`: without NumPy installed it raises, the probe gave up, and TLR701 said nothing
        state: Any = bytes(generator.get_state().tolist())
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
