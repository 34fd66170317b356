"""Where a module's absolute imports are found, and which folder is its project, read the way the
interpreter would find them for the file being run.

`python train.py` puts the script's folder first on `sys.path`; a module inside a package (an
`__init__.py` in its folder and up) is imported from the folder above the top package; a script may
extend `sys.path` itself (`sys.path.insert(0, os.path.dirname(__file__) + "/..")`) before importing;
a `src/` layout's packages are found under `src/`. The project (the modules read as the callers of
a file's functions) is the folder of the nearest `.git`, `pyproject.toml`, `setup.py` or `setup.cfg`
above the file (past one other than `.git` beside an `__init__.py`: inside a package, a build script or a
module named `setup.py`, and the package's callers import it from above); without one, the outermost folder the file's imports need: the folder above its top
package, a folder its `sys.path` edits name, the folder where one of its absolute imports of a local
module is found (the interpreter must have it on its path, so whoever runs the file lives there).

Everything is read from the text and the folders (no parse unless the text edits `sys.path`),
memoised per process until `forget`; the states of every path probed and file read are kept with
the answer, for the analyses using it to note (cache.py checks them).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from trainlint.model.modules_by_name import modules_named
from trainlint.project.path_edits import path_edits
from trainlint.project.store import StateMemo, forget_states
from trainlint.reading import EXISTS, FOLDER, MAX_MODULE_BYTES, SKIPPED_FOLDERS, State, listing_state, module_code, probe_state, read_state

ROOT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
MARKER_LEVELS = 6  # folders above a file's own looked in for a marker
PARENT_LEVELS = 4  # folders above a file's own where its absolute imports are also looked for
PACKAGE_LEVELS = 12  # `__init__.py` chains longer than this are not followed
# top-level names that are never the project's own (a local folder of that name would be unusual)
LIBRARY_ROOTS = frozenset(
    """torch numpy math os sys re json time random typing collections functools itertools dataclasses pathlib logging argparse copy
    abc warnings transformers accelerate deepspeed lightning pytorch_lightning datasets tqdm wandb einops timm PIL cv2 scipy sklearn
    pandas yaml omegaconf hydra contextlib subprocess shutil glob pickle enum inspect importlib""".split()
)
# `from .x import`, `from pkg.mod import`, `import a.b as c, d` (also after `;` and indented)
IMPORT_TEXT = re.compile(r"(?:^|;)[ \t]*(?:from[ \t]+(\.*)[ \t]*([\w.]*)[ \t]+import\b|import[ \t]+([^\n;#]+))", re.MULTILINE)
CALLER_LEVELS = 2  # folders above a module in no package looked in for a script importing it by its path
MAX_FOLDER_MODULES = 64  # modules of such a folder read at most
# folders of installed distributions: each package in one is a project of its own, whatever is around
INSTALLED_FOLDERS = frozenset({"site-packages", "dist-packages"})


@dataclass(frozen=True)
class Roots:
    """Where one file's imports are found, and its project."""

    root: Path  # the project: the folder whose modules may call the file's functions
    why: str  # how the root was found, for `--show-imports`
    inserted: tuple[Path, ...]  # folders the file's own `sys.path.insert` puts first
    appended: tuple[Path, ...]  # folders its `sys.path.append`/`extend` put last
    marked: bool  # whether the root is a project marker's folder
    package_base: Path  # the folder above the file's top package (its own folder when in none)
    sources: tuple[Path, ...]  # the `src/` folders beside the file's folder and above (src layouts)
    states: tuple[State, ...]  # the paths probed and the file read to find all this

    def search(self, folder: Path) -> list[Path]:
        """The folders absolute imports are looked for in, in the interpreter's order: the file's own
        `sys.path.insert`s; its folder (as spelled) and up to `PARENT_LEVELS` above it (where whoever
        runs it may stand: `python -m`, a notebook's working folder); the folder above its top
        package, the project root and the `src/` folders of a src layout; then its `sys.path.append`s."""
        out = [*self.inserted, folder]
        here = Path(os.path.abspath(folder))
        for _ in range(PARENT_LEVELS):
            if here.parent == here:
                break
            here = here.parent
            out.append(here)
        out.extend((self.package_base, self.root, *self.sources, *self.appended))
        unique: dict[str, Path] = {}
        for folder in out:  # (the file's folder as spelled, the others absolute: one of each)
            unique.setdefault(os.path.abspath(folder), folder)
        return list(unique.values())


# (answers with the states they read, kept across `forget` and checked when asked again: the language
# server forgets before each keystroke's lint, and reading a script's `sys.path` edits parses it)
_ROOTS: StateMemo[Path, Roots] = StateMemo(lambda r: r.states)
_MARKERS: dict[Path, tuple[Path | None, tuple[State, ...]]] = {}
_PROBES: dict[Path, State] = {}
_FOLDER_IMPORTS: StateMemo[Path, tuple[dict[str, str], tuple[State, ...]]] = StateMemo(lambda f: f[1])
_PROJECTS: StateMemo[Path, tuple[Path, str, tuple[State, ...]]] = StateMemo(lambda p: p[2])


_REAL: dict[Path, Path] = {}


def real_path(path: Path) -> Path:
    """`path` with its links resolved, memoised until `forget` (asked for every module named, often)."""
    known = _REAL.get(path)
    if known is None:
        try:
            known = path.resolve()
        except (OSError, RuntimeError):  # a loop of links: the path as written
            known = path
        _REAL[path] = known
    return known


def forget(recheck: bool = True) -> None:
    """Forget what was found (a long-lived process asks again before each lint: files may have changed
    since); `recheck`: keep the answers that read files, given again while those files are unchanged."""
    forget_states()
    _REAL.clear()
    _MARKERS.clear()
    _PROBES.clear()
    for found in (_ROOTS, _FOLDER_IMPORTS, _PROJECTS):
        found.forget(recheck)


def _probe(path: Path) -> State:
    known = _PROBES.get(path)
    if known is None:
        known = _PROBES[path] = probe_state(str(path))
    return known


def roots(path: Path) -> Roots:
    """The roots of module `path` (memoised; see the module's docstring). Absolute paths, whatever
    the path named: a file's findings do not depend on the folder the linter was started in."""
    known = _ROOTS.get(path)
    if known is None:
        known = _ROOTS[path] = _find_roots(Path(os.path.abspath(path)))
    return known


def project(path: Path) -> tuple[Path, str, tuple[State, ...]]:
    """The project of a file whose callers are asked for: `Roots.root`, and for a module in no
    package of a project without a marker, the folder above whose scripts import it by its path
    (`from util.misc import f` in main.py beside util/, no __init__.py); with why, and the states
    read (memoised). Only asked of the files whose callers are looked for, not of every module an
    import is looked up from."""
    known = _PROJECTS.get(path)
    if known is None:
        found = roots(path)
        root, why, looked = found.root, found.why, list(found.states)
        absolute = Path(os.path.abspath(path))
        if not found.marked and found.package_base == absolute.parent and absolute.suffix == ".py":
            caller = _importing_folder(absolute, root, looked)
            if caller is not None:
                root, why = caller
        known = _PROJECTS[path] = (root, why, tuple(dict.fromkeys(looked)))
    return known


def project_root(path: Path) -> Path:
    """The project of a file (`project`)."""
    return project(path)[0]


def marker_root(folder: Path) -> tuple[Path | None, tuple[State, ...]]:
    """The nearest folder at or above `folder` (`MARKER_LEVELS` at most) holding a project marker,
    and the states of the paths looked at (a marker appearing nearer changes the answer)."""
    known = _MARKERS.get(folder)
    if known is None:
        looked: list[State] = []
        found: Path | None = None
        inner: Path | None = None  # the outermost marker inside a package, kept while none is found above
        for here in (folder, *list(folder.parents)[:MARKER_LEVELS]):
            if here.name in INSTALLED_FOLDERS:
                break  # (a virtual environment's marker above it is its user's project, not the package's)
            for marker in ROOT_MARKERS:
                looked.append(_probe(here / marker))
                if looked[-1][1] in (EXISTS, FOLDER):
                    found = here
                    break
            if found is not None and found.name and _inside_package(found, marker, looked):
                inner, found = found, None
            if found is not None:
                break
        known = _MARKERS[folder] = (found or inner, tuple(looked))
    return known


def _inside_package(folder: Path, marker: str, looked: list[State]) -> bool:
    """Whether a marker other than `.git` stands in a package (an `__init__.py` beside it): a module
    named `setup.py` (`apps/setup.py`) or the build script of a package's C extension, whose callers
    are imported from above the package, in the project around it."""
    if marker == ".git":
        return False
    looked.append(_probe(folder / "__init__.py"))
    return looked[-1][1] == EXISTS


def _find_roots(path: Path) -> Roots:
    here = path.parent
    marker, states = marker_root(here)
    looked = list(states)
    state, data = read_state(str(path))
    looked.append(state)
    text = module_code(str(path), data) if data is not None else ""
    inserted, appended = path_edits(path, text) if "sys.path" in text else ((), ())
    if "import " in text:
        first, last = imported_path_edits(path, text, looked)
        inserted, appended = tuple(dict.fromkeys((*first, *inserted))), tuple(dict.fromkeys((*appended, *last)))
    top, chain = _package_top(here)
    looked.extend(chain)
    if marker is not None:
        found = next(s[0] for s in states if s[1] in (EXISTS, FOLDER) and Path(s[0]).parent == marker and Path(s[0]).name in ROOT_MARKERS)
        root, why = marker, f"the marker {found}"
    else:
        # the outermost folder the file's imports need, the file's own at least
        needed: list[tuple[Path, str]] = [(here, "the file's folder (no .git, pyproject.toml, setup.py or setup.cfg above it)")]
        if top != here:
            needed.append((top, f"the folder above its package {here.relative_to(top).parts[0]}/"))
        for folder in (*inserted, *appended):
            common = _common(folder, here)
            if common is not None:
                needed.append((common, f"the folder its sys.path edit names ({folder})"))
        for base, name in _import_bases(path, text, looked):
            needed.append((base, f"the folder where its import of {name} is found"))
        root, why = min(needed, key=lambda n: len(n[0].parts))
        if root.name == "src" and root != here:  # a src layout: the scripts and tests beside src/ import it
            root, why = root.parent, f"the folder above src/ ({why})"
        root, why = _installed_package(path, root, why)
    # a src layout's packages are installed: found from anywhere beside or below the folder holding src/
    sources: list[Path] = []
    for folder in dict.fromkeys((here, *list(here.parents)[:PARENT_LEVELS], root)):
        looked.append(_probe(folder / "src"))
        if looked[-1][1] == FOLDER and folder / "src" not in (here, *here.parents):
            sources.append(folder / "src")
    return Roots(root, why, inserted, appended, marker is not None, top, tuple(sources), tuple(dict.fromkeys(looked)))


def installed_elsewhere(module: Path, root: Path) -> bool:
    """Whether a module an import was found as is another installed distribution's: inside a folder of
    installed packages, outside the project `root` (a library then, as `import torch` is)."""
    absolute = Path(os.path.abspath(module))
    if not any(p.name in INSTALLED_FOLDERS for p in absolute.parents):
        return False
    return Path(os.path.abspath(root)) not in absolute.parents


def _installed_package(path: Path, root: Path, why: str) -> tuple[Path, str]:
    """`root`, or the installed package holding `path` where `root` is a folder of installed packages
    or above one: the other distributions there (thousands of modules) are no callers of its functions."""
    installed = next((p for p in path.parents if p.name in INSTALLED_FOLDERS), None)
    if installed is None or not (root == installed or root in installed.parents):
        return root, why
    inner = path.relative_to(installed).parts
    if len(inner) < 2:  # (a module installed on its own: its folder is the only one there is)
        return root, why
    return installed / inner[0], f"the installed package {inner[0]}/ (a folder of installed packages is no project)"


def _importing_folder(path: Path, root: Path, looked: list[State]) -> tuple[Path, str] | None:
    """The nearest folder above `root` (`CALLER_LEVELS` above the file's at most) one of whose own
    modules imports `path` by its dotted path from there, with why; the folders and modules read are
    added to `looked`."""
    here = path.parent
    for level, folder in enumerate(list(here.parents)[:CALLER_LEVELS]):
        parts = path.relative_to(folder).with_suffix("").parts
        if not all(part.isidentifier() for part in parts):
            return None  # (`my-project/util/misc.py`: no import names it from above my-project)
        if folder in (root, *root.parents) and folder != root:
            imported, states = _folder_imports(folder)
            looked.extend(states)
            dotted = ".".join(parts)
            if dotted in imported:
                return folder, f"the folder of {imported[dotted]}"
            if level == 0 and not _holds_modules(folder):  # (its listing, noted, says so)
                return None  # a folder of projects (a downloads folder, /tmp), not one of code: no higher
    return None


def _folder_imports(folder: Path) -> tuple[dict[str, str], tuple[State, ...]]:
    """The dotted names the modules in `folder` and in its sub-folders one level down (scripts that
    put `folder` on `sys.path`, `scripts/train.py`) import absolutely (`from a.b import c`: a.b and
    a.b.c; `import c` with `folder/lib` put on `sys.path`: lib.c too), each with the first module
    importing it and how, and the states read (memoised)."""
    known = _FOLDER_IMPORTS.get(folder)
    if known is not None:
        return known
    looked: list[State] = []
    files: list[Path] = []
    for here in (folder, *_sub_folders(folder)):
        looked.append(listing_state(str(here), modules_only=here != folder))
        try:
            files.extend(here / n for n in sorted(os.listdir(here)) if n.endswith((".py", ".ipynb")))
        except (OSError, ValueError):
            continue
    imported: dict[str, str] = {}
    for file in files[:MAX_FOLDER_MODULES]:
        state, data = read_state(str(file), MAX_MODULE_BYTES)
        looked.append(state)
        if data is None or b"import" not in data:
            continue
        text = module_code(file.name, data)
        found = modules_named(text)  # (`importlib.import_module(args.model)`)
        for match in IMPORT_TEXT.finditer(text):
            dots, module, listed = match.group(1, 2, 3)
            if dots:
                continue
            if module:
                rest = text[match.end():].lstrip(" \t")
                rest = rest[1: rest.find(")")] if rest.startswith("(") else rest.split("\n", 1)[0]  # `import (a,\n b)`
                found += [module, *(f"{module}.{n.strip().split(' as ')[0].strip()}" for n in rest.split(","))]
            else:
                found += [n.split(" as ")[0].strip() for n in listed.split(",")]
        name = file.relative_to(folder).as_posix()
        for dotted in found:
            imported.setdefault(dotted, f"{name}, which imports it as {dotted}")
        for under in _edited_under(file, text, folder):  # a module of a folder it puts on `sys.path`
            for dotted in found:
                imported.setdefault(f"{under}.{dotted}", f"{name}, which puts {under} on sys.path and imports it as {dotted}")
    known = _FOLDER_IMPORTS[folder] = (imported, tuple(looked))
    return known


def _edited_under(file: Path, text: str, folder: Path) -> list[str]:
    """The folders below `folder` that `file`'s `sys.path` edits put on the path, dotted from it
    (`sys.path.append(os.path.join(ROOT, "models"))`, then `import pointnet_cls`: `models`)."""
    if "sys.path" not in text:
        return []
    out: list[str] = []
    for edited in (p for paths in path_edits(file, text) for p in paths):
        try:
            parts = edited.relative_to(folder).parts
        except ValueError:
            continue
        if parts and all(part.isidentifier() for part in parts):
            out.append(".".join(parts))
    return out


def _holds_modules(folder: Path) -> bool:
    try:
        return any(n.endswith((".py", ".ipynb")) for n in os.listdir(folder))
    except (OSError, ValueError):
        return False


def _sub_folders(folder: Path) -> list[Path]:
    """The folders directly in `folder` that may hold scripts (named like a module: not hidden, no
    virtual environment, no temporary `run-x1y2` folder)."""
    try:
        names = sorted(e.name for e in os.scandir(folder) if e.is_dir())
    except (OSError, ValueError):
        return []
    return [folder / n for n in names if n not in SKIPPED_FOLDERS and n.isidentifier()]


def _package_top(folder: Path) -> tuple[Path, list[State]]:
    """The folder above the outermost package holding `folder` (itself when it is no package). A
    folder without `__init__.py` directly inside a package is a namespace portion of it (Python 3
    imports `pkg.plugins.sub` all the same), so the chain goes on through it."""
    looked: list[State] = []
    here = folder
    for _ in range(PACKAGE_LEVELS):
        if here.parent == here:
            break
        looked.append(_probe(here / "__init__.py"))
        if looked[-1][1] != EXISTS:
            looked.append(_probe(here.parent / "__init__.py"))
            if looked[-1][1] != EXISTS or not here.name.isidentifier():
                break
        here = here.parent
    return here, looked


def _common(folder: Path, here: Path) -> Path | None:
    """The folder holding both `folder` and `here`, when it is at most `MARKER_LEVELS` above `here`."""
    try:
        common = Path(os.path.commonpath([folder, here]))
    except ValueError:  # (different drives)
        return None
    return common if common in (here, *list(here.parents)[:MARKER_LEVELS]) else None


def _import_bases(path: Path, text: str, looked: list[State]) -> list[tuple[Path, str]]:
    """The folders above the file's own where one of its absolute imports is found, as a module
    (`top.py`) or a folder (`top/`), each with the name: the interpreter must have them on its path."""
    here = path.parent
    bases = [here, *list(here.parents)[:PARENT_LEVELS]]
    out: list[tuple[Path, str]] = []
    seen: set[str] = set()
    for match in IMPORT_TEXT.finditer(text):
        dots, module, names = match.group(1, 2, 3)
        if dots:
            continue
        tops = [module.split(".")[0]] if module else [n.split()[0].split(".")[0] for n in names.split(",") if n.strip()]
        for top in tops:
            if top in seen or top in LIBRARY_ROOTS or not top.isidentifier():
                continue
            seen.add(top)
            for base in bases:
                folder, file = _probe(base / top), _probe(base / f"{top}.py")
                looked.extend((folder, file))
                if folder[1] == FOLDER or (file[1] == EXISTS and base / f"{top}.py" != path):
                    if base != here:
                        out.append((base, top))
                    break
    return out


SIDE_EFFECT_IMPORT = re.compile(r"^import[ \t]+(\w+)[ \t]*(?:#.*)?$", re.MULTILINE)


def imported_path_edits(path: Path, text: str, looked: list[State]) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """The `sys.path` edits of the modules beside the file that it imports for their effect alone
    (`import _init_paths`, a name used nowhere else): importing runs them, as the interpreter
    would, before the imports after it. The modules read are added to `looked`."""
    inserted: list[Path] = []
    appended: list[Path] = []
    for name in dict.fromkeys(SIDE_EFFECT_IMPORT.findall(text)):
        if name in LIBRARY_ROOTS or len(re.findall(rf"\b{name}\b", text)) != 1:
            continue
        module = path.parent / f"{name}.py"
        if module == path or _probe(module)[1] != EXISTS:
            continue
        state, data = read_state(str(module))
        looked.append(state)
        other = module_code(str(module), data) if data is not None else ""
        if "sys.path" in other:
            first, last = path_edits(module, other)
            inserted.extend(first)
            appended.extend(last)
    return tuple(inserted), tuple(appended)
