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
    come to call it); none when another module defines a method of that name too: a call by the name
    may be of either (`block.sample(x)` of a layer, beside a model's `sample`). Each module is read once
    per index."""
    if any(f != target for f in index.methods.get(method, ())):
        return []
    if index.called is None:
        called: dict[str, list[Path]] = {}
        read = [read_state(str(f)) + (f,) for f in index.read]
        for _, data, file in read:
            for name in set(_METHOD_CALLED.findall(module_code(file.name, data))) if data is not None else ():
                called.setdefault(name, []).append(file)
        index.called = (called, tuple(state for state, _, _ in read))
    noting(index.called[1])
    return sorted((f for f in index.called[0].get(method, ()) if f != target), key=lambda f: f not in index.training)[:MAX_IMPORTERS]
