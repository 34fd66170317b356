"""The functions of `analysis.py` as the server names them for its contained worker, without
importing them: `analysis.py` brings libcst, the model and the fixes (a second or more of start-up
on a loaded machine), which only the worker runs. The worker receives each by name (pickled as its
module and name) and imports the real function there; its fork server has it loaded already
(`launch.PRELOAD`)."""

from __future__ import annotations

import importlib
from typing import Any, Callable

ANALYSIS = "trainlint.lsp.analysis"


def _function(module: str, name: str) -> Callable[..., Any]:
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


class Named:
    """A module-level function, by module and name: picklable (as the function itself, unpickled)
    and callable here too (importing it)."""

    def __init__(self, name: str, module: str = ANALYSIS) -> None:
        self.module = module
        self.name = name
        self.__module__ = module  # (what `ResidentWorker(preload=...)` is told to have loaded)

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str, str]]:
        return _function, (self.module, self.name)

    def __call__(self, *args: Any) -> Any:
        return _function(self.module, self.name)(*args)

    def __repr__(self) -> str:
        return f"{self.module}.{self.name}"


lint_buffer = Named("lint_buffer")
lint_opened = Named("lint_opened")
lint_cells = Named("lint_cells")
safe_fixes = Named("safe_fixes")
checked_fixes = Named("checked_fixes")
safe_cell_fixes = Named("safe_cell_fixes")
checked_cell_fixes = Named("checked_cell_fixes")
warm_up = Named("warm_up")
