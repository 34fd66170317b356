"""The project's modules that call a method by its name (`x.method(`), read from their text: the callers
of a method whose own module and importers never call it (`decoder.generate(...)` in an evaluator
handed the decoder by a module it does not import)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from trainlint.project.importers import MAX_IMPORTERS, ImportIndex
from trainlint.reading import State, module_code, read_state

_METHOD_CALLED = re.compile(r"\.([A-Za-z_]\w*)\s*\(")


def calling_by_text(index: ImportIndex, target: Path, method: str, noting: Callable[[tuple[State, ...]], None]) -> list[Path]:
    """The project's modules other than `target` whose text calls a method named `method`, training code
    first, `MAX_IMPORTERS` in all; the states of the modules read are given to `noting` (any of them may
    come to call it). A module that defines a method of that name too, or imports one that does, calls
    its own (`block.sample(x)` of the layers it imports, beside a model's `sample`). Each module is read
    once per index."""
    others = [f for f in index.methods.get(method, ()) if f != target]
    importing = {f for d in others for f in index.by_word.get(d.parent.name if d.stem == "__init__" else d.stem, ())}
    if index.called is None:
        called: dict[str, list[Path]] = {}
        read = [read_state(str(f)) + (f,) for f in index.read]
        for _, data, file in read:
            for name in set(_METHOD_CALLED.findall(module_code(file.name, data))) if data is not None else ():
                called.setdefault(name, []).append(file)
        index.called = (called, tuple(state for state, _, _ in read))
    noting(index.called[1])
    calling = (f for f in index.called[0].get(method, ()) if f != target and f not in others and f not in importing)
    return sorted(calling, key=lambda f: f not in index.training)[:MAX_IMPORTERS]
