"""Finding the file of an imported module as the interpreter would (`roots.py` says where a file's
absolute imports are looked for): a mixin of `index.Project`, which holds the memo tables."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from trainlint.project.roots import LIBRARY_ROOTS, installed_elsewhere, real_path, roots
from trainlint.model.summary import ModuleSummary
from trainlint.project.star_imports import MAX_STAR_DEPTH, STAR, public_names
from trainlint.project.watching import note, note_all, watching
from trainlint.reading import EXISTS, State, module_code, probe_state, read_state


def _same(a: Path, b: Path) -> bool:
    """Whether two spellings name one file (a relative and an absolute one)."""
    return a == b or os.path.abspath(a) == os.path.abspath(b)


def _respelled(name: str, module: Path, importer: Path) -> str | None:
    """A relative name as `importer` spells it, where `module` spells it so (`..utils.to_np` of
    `agent/base.py`, for `agent/ddpg.py` beside it): the package it names must hold the importer."""
    dots = len(name) - len(name.lstrip("."))
    target = module.parent
    for _ in range(dots - 1):
        target = target.parent
    here, ups = importer.parent, 0
    while not _same(here, target):
        if here.parent == here or ups >= MAX_STAR_DEPTH:
            return None
        here, ups = here.parent, ups + 1
    return "." * (ups + 1) + name.lstrip(".")


def _top_package(importer: Path, base: Path) -> Path:
    """The folder of the top package holding `importer`, whose base folder is `base`."""
    try:
        first = Path(os.path.abspath(importer)).relative_to(os.path.abspath(base)).parts[0]
    except (ValueError, IndexError):
        return importer.parent
    return base / first


def _offers(outline: ModuleSummary, name: str) -> bool:
    """Whether a module binds `name` at its top level: defines it or imports it."""
    return name in outline.functions or name in outline.classes or name in outline.exports


class ModuleFinder:
    """`locate` a module and the names in it, memoised in the tables `Project` sets up."""

    # (importer, qualname) -> where it is, and the states of the paths probed to find it (noted on each hit)
    _located: dict[tuple[Path, str], tuple[tuple[Path, list[str]] | None, tuple[State, ...]]]
    # (folder, dotted module) -> its file if any, and the states of the paths it was looked for at
    _files: dict[tuple[Path, str], tuple[Path | None, tuple[State, ...]]]

    def locate(self, importer: Path, qualname: str) -> tuple[Path, list[str]] | None:
        key = (importer, qualname)
        hit = self._located.get(key)
        if hit is None:
            with watching() as probed:
                found = self._find(importer, qualname)
            hit = self._located[key] = (found, tuple(probed))
        note_all(hit[1])
        return hit[0]

    def _find(self, importer: Path, qualname: str) -> tuple[Path, list[str]] | None:
        level = len(qualname) - len(qualname.lstrip("."))
        parts = qualname.lstrip(".").split(".")
        if not parts or not parts[0]:
            return None
        if level:
            base = importer.parent
            for _ in range(level - 1):
                base = base.parent
            bases = [base]
        else:
            if parts[0] in LIBRARY_ROOTS or len(parts) < 2:
                return None
            bases = self._search_dirs(importer, parts[0])
        for base in bases:
            # the longest prefix that is a module file; the rest are names inside it
            for cut in range(len(parts) - 1, 0, -1):
                path = self._module_file(base, tuple(parts[:cut]))
                if path is not None and not _same(path, importer) and not self._library(path, importer, level):  # `import te.pytorch` in te.py is the library
                    return self._bound_by_package(base, parts, cut, path) or (path, parts[cut:])
        return None

    def _bound_by_package(self, base: Path, parts: list[str], cut: int, module: Path) -> tuple[Path, list[str]] | None:
        """`models.Seq2Seq.forward` where `models/__init__.py` says `from .Seq2Seq import Seq2Seq`: the
        import rebinds the package's attribute `Seq2Seq` to the class, so the name is the class's method,
        unless the module `models/Seq2Seq.py` (`module`, the file of `parts[:cut]`) itself defines `forward`."""
        package = self._module_file(base, tuple(parts[: cut - 1])) if cut > 1 else None
        if package is None or package.name != "__init__.py":
            return None
        if not _offers(self.outline(package), parts[cut - 1]) or _offers(self.outline(module), parts[cut]):  # type: ignore[attr-defined]
            return None
        return package, parts[cut - 1 :]

    def star_names(self, from_file: str, module: str, depth: int = 0) -> dict[str, str]:
        """What `from module import *` (`module` with its leading dots) binds in module `from_file`, when
        `module` is a file of the project: each name as the importer's imports would spell it
        (`torch` -> "torch", `box_iou` -> "utils.box_iou"); {} for a library's module."""
        level = len(module) - len(module.lstrip("."))
        path = self.imported_file(Path(from_file), module.lstrip("."), level) if from_file and from_file != "-" else None
        if path is None or depth >= MAX_STAR_DEPTH:
            return {}
        state, data = read_state(str(path))
        note(state)
        out: dict[str, str] = {}
        for name, spelled in public_names(module_code(str(path), data) if data is not None else "").items():
            if name.startswith("*"):  # its own star import: what that binds, spelled from here
                beside = self._implicitly_relative(path, spelled, from_file) and path.name == "__init__.py" and not level
                for k, v in self.star_names(str(path), spelled, depth + 1).items():
                    if v.startswith(".."):  # (relative to a package above the module's: spelled again from here)
                        v = _respelled(v, path, Path(from_file)) or ""
                    elif v.startswith("."):  # (relative to the module's package; `..utils` + `.torch_utils.to_np`)
                        v = f"{module}{v}" if path.name == "__init__.py" else v if _same(Path(from_file).parent, path.parent) else ""
                    elif beside and v.startswith(f"{spelled}."):
                        v = f"{module}.{v}"  # (Python 2's `from metrics import *` in `models/__init__.py`: `models.metrics`)
                    if v and k not in out:
                        out[k] = v
            else:
                out[name] = f"{module}{spelled}" if spelled.startswith(".") else spelled
        return out

    def _implicitly_relative(self, path: Path, module: str, from_file: str) -> bool:
        """Whether `import module` in `path` finds a module beside it that the file `from_file` does not
        find by that name (Python 2's implicit relative import, in a package's `__init__.py`)."""
        if module.startswith("."):
            return False
        here = self.imported_file(path, module)
        return here is not None and _same(here.parent if here.name != "__init__.py" else here.parent.parent, path.parent) and self.imported_file(Path(from_file), module) != here

    def star_exported(self, path: Path, outline: ModuleSummary) -> tuple[ModuleSummary, tuple[State, ...]]:
        """A module's outline with what its star imports bind among its exports (a package's `from .misc
        import *` re-exports what `misc` offers, as its own imports would spell it; an explicit import
        of the name wins), and the states read to know it."""
        stars = [module for key, module in outline.exports.items() if key.startswith(STAR)]
        if not stars:
            return outline, ()
        exports = {k: v for k, v in outline.exports.items() if not k.startswith(STAR)}
        with watching() as read:
            for module in stars:
                for name, spelled in self.star_names(str(path), module).items():
                    exports.setdefault(name, spelled)
        return replace(outline, exports=exports), tuple(read)

    def imported_file(self, importer: Path, module: str, level: int = 0) -> Path | None:
        """The local file that `import module` (with `level` leading dots: `from ..module import`) in
        `importer` names, found as `locate` finds modules (`--show-imports`); None when the module is
        no file of the project (a library's)."""
        parts = tuple(p for p in module.split(".") if p)
        if level:
            base = importer.parent
            for _ in range(level - 1):
                base = base.parent
            if not parts:  # `from . import x`: the package itself
                base = base if base.name else Path(os.path.abspath(base))  # (`.` has no name)
                return self._module_file(base.parent, (base.name,))
            bases = [base]
        elif not parts or parts[0] in LIBRARY_ROOTS:
            return None
        else:
            bases = self._search_dirs(importer, parts[0])
        for base in bases:
            path = self._module_file(base, parts)
            if path is not None and not _same(path, importer) and not self._library(path, importer, level):
                return path
        return None

    @staticmethod
    def _library(path: Path, importer: Path, level: int) -> bool:
        """An absolute import found in another installed distribution is that library's, not the project's."""
        return not level and installed_elsewhere(path, roots(importer).root)

    def named_modules(self, importer: Path, named: tuple[tuple[str, int], ...]) -> frozenset[Path]:
        """The real paths of the local modules the imports `named` of `importer` name (each a dotted
        module and its leading dots, `ImportIndex.imports`); "*" where a statement's names are not all
        known (a continued line): it may name any module."""
        out: set[Path] = set()
        for module, level in named:
            if module.endswith("*"):  # (`from pkg import \` with the names below: pkg must be local)
                package = module[:-1].rstrip(".")
                if not package or self.imported_file(importer, package, level) is not None:
                    out.add(Path("*"))
                continue
            found = self.imported_file(importer, module, level)
            if found is not None:
                out.add(real_path(found))
        return frozenset(out)

    def _search_dirs(self, importer: Path, top: str = "") -> list[Path]:
        """The folders the importer's absolute imports are looked for in (`Roots.search`: its
        `sys.path` edits, its folder and parents, its package's base, the project root and `src/`).
        An import of the importer's own top package (`from dalle2_pytorch.trainer import ...` in
        `dalle2_pytorch/__init__.py`) is found from the folder above that package first: a module
        beside the importer named like the package (`dalle2_pytorch/dalle2_pytorch.py`) is not it."""
        found = roots(importer)
        note(*found.states)
        search = found.search(importer.parent)
        base = found.package_base
        if top and not _same(base, importer.parent) and _same(base / top, _top_package(importer, base)):
            search = [base, *(d for d in search if not _same(d, base))]
        return search

    def _module_file(self, base: Path, parts: tuple[str, ...]) -> Path | None:
        key = (base, ".".join(parts))
        known = self._files.get(key)
        if known is None:
            target = base.joinpath(*parts)
            found, looked = None, []
            for candidate in (target.with_suffix(".py"), target / "__init__.py"):
                looked.append(probe_state(str(candidate)))
                if looked[-1][1] == EXISTS:
                    found = candidate
                    break
            known = self._files[key] = (found, tuple(looked))
        note_all(known[1])
        return known[0]
