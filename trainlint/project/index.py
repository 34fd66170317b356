"""The project phase: the summaries of the local modules a file imports, found and computed on demand.

`from utils import NativeScaler` in `train.py` makes `utils.py` (beside it, or in a parent folder of
the project) part of the analysis of `train.py`: its summary says what `NativeScaler()(loss, opt)`
does. Only modules a file imports are read, and only when the analysis asks about one of their names;
a module with no training token is summarised with Python's own parser. Summaries are memoised per
process by the module's path and content (read again after `rescan`).

What the analysis of a file depended on is recorded as it goes (`watching`): the content of each
module it read and whether each path it looked for is a file, a folder or nothing, as the states of
cache.py, against which a cached result is checked.
"""

from __future__ import annotations

from pathlib import Path
from dataclasses import replace
from typing import Any

from trainlint.model.torchnames import LIBRARY_CLASS
from trainlint.project import budget, store
from trainlint.project.watching import InProgress, note, watching
from trainlint.project.classes import class_hierarchy, inherited_methods
from trainlint.project.hierarchy import class_candidates, unbuilt
from trainlint.project.passed_instances import passed_instances
from trainlint.project.seeds import join_seeds, passed_to
from trainlint.project.importers import MAX_IMPORTERS, MAX_OUTLINED_IMPORTERS, TRAINING_TOKENS, ImportIndex, import_index, module_outline, pending_bytes
from trainlint.project import roots as import_roots
from trainlint.project.finding import ModuleFinder
from trainlint.project.roots import IMPORT_TEXT, LIBRARY_ROOTS
from trainlint.model.summary import EMPTY, Argument, ClassSummary, FunctionSummary, ModuleSummary, Seed
from trainlint.reading import EXISTS, FOLDER, State, module_code, probe_state, read_state

MAX_DEPTH = 2  # summaries analyse this many levels of modules; the next knows their names only

Symbol = FunctionSummary | ClassSummary

# for every depth's Project: outlines (names; names without what is unknown), `resolve()`s until `rescan`
_OUTLINES: dict[Path, tuple[State, ModuleSummary, ModuleSummary]] = {}
_REAL: dict[Path, Path] = {}


def _real(path: Path) -> Path:
    return _REAL.get(path) or _REAL.setdefault(path, path.resolve())


class Project(ModuleFinder):
    """Finds the file of an imported module and returns summaries of its names."""

    def __init__(self, root: Path | None = None, depth: int = 0) -> None:
        # (kept for callers naming one; each file's imports are found from its own roots, roots.py)
        self.root = root.resolve() if root is not None else None
        self.depth = depth
        if depth == 0:  # a new project reads the folders afresh (the roots are memoised per process)
            import_roots.forget()
        # path -> the state of the content summarised, the summary, the states it was computed from
        self._summaries: dict[tuple[Path, bool], tuple[State, ModuleSummary, set[State]]] = {}
        self._current: set[tuple[Path, bool]] = set()  # summaries whose content was read since the last `rescan`
        self._outlines = _OUTLINES
        self._current_outlines: set[Path] = set()
        # (folder, dotted module) -> its file if any, and the states of the paths it was looked for at
        self._files: dict[tuple[Path, str], tuple[Path | None, tuple[State, ...]]] = {}
        # (importer, qualname) -> where it is, and the states of the paths probed to find it (noted on each hit)
        self._located: dict[tuple[Path, str], tuple[tuple[Path, list[str]] | None, tuple[State, ...]]] = {}
        self._tops: dict[tuple[Path, str], tuple[State, State]] = {}
        self._deeper: Project | None = None  # summaries of the modules imported modules import
        self._index: dict[Path, ImportIndex] = {}  # per project root: which files import which names
        self._rescanned: dict[Path, ImportIndex] = {}  # those `rescan` set aside: reused while current
        self._computing: InProgress[Path] = InProgress()  # summaries being computed (imports may form cycles)
        self._seeds: dict[Path, tuple[dict[str, Seed], tuple[State, ...]]] = {}  # with what they read
        self._seeding: InProgress[Path] = InProgress()  # modules whose seeds are being joined up
        self._importers: dict[Path, tuple[tuple[list[Path], frozenset[Path]], tuple[State, ...]]] = {}  # with what they read
        # what fixes asked: (path, qualified name) -> the content it was asked of, the answer, what it read
        self._differentiates: dict[tuple[Path, str], tuple[State, bool, tuple[State, ...]]] = {}

    # -- public --------------------------------------------------------------------------------
    def symbol(self, from_file: str, qualname: str) -> Symbol | None:
        """The summary of `qualname` (as the importing file's imports spell it: `utils.Scaler`,
        `.engine.train_one_epoch`), or None when it is not a name of a local module."""
        if self.depth > MAX_DEPTH or not from_file or from_file == "-":
            return None
        found = self.locate_any(Path(from_file), qualname)
        if found is None:
            return None
        path, rest = found
        return self._resolve(path, rest, hops=0, outlines=self.depth == MAX_DEPTH)

    def locate_any(self, importer: Path, qualname: str) -> tuple[Path, list[str]] | None:
        """`locate`, and "file::Name.attr" (a class another module passed in) by its file."""
        if "::" in qualname:
            file, _, rest = qualname.partition("::")
            return (Path(file), rest.split(".")) if file and rest else None
        return self.locate(importer, qualname)

    def qualify(self, from_file: str, qualname: str) -> str | None:
        """A name as module `from_file` spells it (`.models.lstm.LSTMEncoder`), as any module can find
        it ("file::LSTMEncoder"); None for a library's name."""
        found = self.locate(Path(from_file), qualname) if from_file and "::" not in qualname else None
        return f"{found[0]}::{'.'.join(found[1])}" if found is not None else None

    def step_seeds(self, path: str) -> dict[str, Seed]:
        """The functions of module `path` ("f", "Class.method") that other modules of the project call
        on every training step, each with the call chains that reach it (`ProjectLookup.step_seeds`).

        Joined up from the callers' summaries, which do not depend on their own callers: the calls a
        module makes from its step loops, and those its functions make whenever they run, which are
        per step where those functions are (asked of their callers in turn, as far up as callers go).
        Only the analysis of the module being linted asks: summaries are free of seeds."""
        if self.depth > 0 or not path or path == "-":
            return {}
        target = _real(Path(path))
        known = self._seeds.get(target)
        if known is not None:  # asked by the prefilter, then by the analysis: computed once
            note(*known[1])
            return known[0]
        if target in self._seeding:  # callers that call each other: the inner ask sees none
            self._seeding.cycle(target)
            return {}
        with self._seeding.working(target), watching() as read:  # (what it reads is noted around too)
            seeds = self._step_seeds(target)
        if self._seeding.keep(target):
            self._seeds[target] = (seeds, tuple(read))
        return seeds

    def _step_seeds(self, target: Path) -> dict[str, Seed]:
        return {} if self.alone(target) else join_seeds(self, target)

    def differentiates(self, path: str, qualified: str) -> bool:
        """Whether a function of a project module may differentiate a value it is given
        (`ProjectLookup.differentiates`): the module analysed again as for its summary, which leaves
        this open because only a fix's proof asks it."""
        target = Path(path)
        state, data = read_state(str(target))
        key = (target, qualified)
        known = self._differentiates.get(key)
        if known is None or known[0] != state:
            answer = True
            with watching() as read:
                if data is not None and self.depth < MAX_DEPTH:
                    model = self._model(target, data)
                    if model is not None:
                        from trainlint.model.fix_safety import local_differentiates

                        answer = local_differentiates(model, qualified)
            known = self._differentiates[key] = (state, answer, tuple(read))
        note(known[0], *known[2])
        return known[1]

    def passed_arguments(self, path: str, facts: bool = False) -> dict[tuple[str, str], tuple[str, ...]]:
        """What other modules pass to this module's functions and classes (`ProjectLookup`'s)."""
        if self.depth >= (1 if facts else MAX_DEPTH) or not path or path == "-":
            return {}
        return passed_to(self, _real(Path(path)), facts)

    def _arguments(self, path: Path, passed: list[tuple[str, str, str]]) -> tuple[Argument, ...]:
        """The instances a module passes to other project modules, resolved to the defining files."""
        out: list[Argument] = []
        for callee, key, origin in passed:
            where = self.locate_any(path, callee)
            final = self.defined_in(where[0], where[1], hops=0) if where is not None else None
            if final is None or len(final[1]) not in (1, 2):
                continue
            library = origin.startswith(f"{LIBRARY_CLASS}::")
            if origin.startswith("=") or library:  # what a call passes (a fact), or a library's class
                out.append(Argument(str(final[0]), ".".join(final[1]), key, LIBRARY_CLASS if library else "", origin.split("::")[-1]))
                continue
            cls: tuple[Path, list[str]] | None = (_real(path), [origin[2:]])
            if not origin.startswith("::"):
                found = self.locate(path, origin)
                cls = self.defined_in(found[0], found[1], hops=0) if found is not None else None
                if cls is not None and cls[1][-1] not in self.outline(cls[0]).classes:
                    continue  # (a function called, not a class built)
            if cls is not None and len(cls[1]) == 1:
                out.append(Argument(str(final[0]), ".".join(final[1]), key, str(cls[0]), cls[1][0]))
        return tuple(out)

    def defined_in(self, path: Path, rest: list[str], hops: int) -> tuple[Path, list[str]] | None:
        """Where a name a module offers is defined: followed through re-exports (`from .m import f`)."""
        if not rest or hops > 3:
            return None
        summary = self.outline(path)
        if rest[0] in summary.functions or rest[0] in summary.classes:
            return _real(path), rest
        exported = summary.exports.get(rest[0])
        if exported is None:
            return None
        found = self.locate(path, ".".join([exported, *rest[1:]]))
        return self.defined_in(found[0], found[1], hops + 1) if found is not None else None

    def importers(self, target: Path, passing: bool = False) -> list[Path]:
        """The project's files whose imports name `target`'s module, or its package when their text
        names something `target` defines (read from the text, indexed once): training code first,
        `MAX_IMPORTERS` in all; with `passing`, then those with none (read cheaply for what they pass)."""
        known = self._importers.get(target)
        if known is None:
            with watching() as read:
                found = self._importers_of(target)
            known = self._importers[target] = (found, tuple(read))
        note(*known[1])
        found, training = known[0]
        outlined = [f for f in found[MAX_IMPORTERS:] if f not in training][:MAX_OUTLINED_IMPORTERS] if passing else []
        return [*found[:MAX_IMPORTERS], *outlined]

    def alone(self, target: Path) -> bool:
        """Whether `target` is the only module of its project (a standalone script): no other module
        can run its functions. Answered for the module being linted only (a module summarised for
        another one is not alone), so that deeper levels build no import index for it."""
        return self.depth == 0 and self._import_index(_real(target)).modules <= 1

    def _import_index(self, target: Path) -> ImportIndex:
        root, _, looked = import_roots.project(target)
        note(*looked)
        index = self._index.get(root)
        if index is None:
            kept = self._rescanned.pop(root, None)
            index = self._index[root] = kept if kept is not None and kept.current(root) else import_index(root)
        note(*index.listings)
        return index

    def _importers_of(self, target: Path) -> tuple[list[Path], frozenset[Path]]:
        index = self._import_index(target)
        out = [f for f in index.by_word.get(target.parent.name if target.name == "__init__.py" else target.stem, ()) if f != target]
        # those with training code first (they may call it every step), notebooks after modules
        out.sort(key=lambda f: (f not in index.training, f.suffix == ".ipynb"))
        if target.name != "__init__.py" and (target.parent / "__init__.py").is_file():
            # `from pkg import Class` through the package's __init__; a package's name is a common word
            # (`utils`): such an importer must also name something the module defines
            names = [n.encode() for n in (*self.outline(target).functions, *self.outline(target).classes)]
            for importer in index.by_word.get(target.parent.name, ()):
                if importer == target or importer in out or len(out) >= MAX_IMPORTERS + MAX_OUTLINED_IMPORTERS:
                    continue
                state, data = read_state(str(importer))
                note(state)
                if data is not None and (b"import *" in data or any(name in data for name in names)):
                    out.append(importer)
        return out, frozenset(f for f in out if f in index.training)

    def rescan(self) -> None:
        """Forget which files exist (remembered for a run's speed). A long-lived process, the
        language server's, calls this before each lint: modules may have appeared or gone since."""
        self._files.clear()
        self._located.clear()
        self._tops.clear()
        self._rescanned.update(self._index)
        self._index.clear()
        self._seeds.clear()
        self._importers.clear()
        self._differentiates.clear()
        self._current.clear()
        self._current_outlines.clear()
        store.forget_states()
        _REAL.clear()
        import_roots.forget()
        if self._deeper is not None:
            self._deeper.rescan()

    def imports_project(self, from_file: str, source: str) -> bool:
        """Whether the module's text imports a module of the project (relatively, or a top-level name
        that is a file or folder beside it or in a parent folder). An over-approximation of what
        `symbol` can resolve, read from the text without parsing; probed paths are noted."""
        if self.depth >= MAX_DEPTH or not from_file or from_file == "-":
            return False
        importer = Path(from_file)
        for match in IMPORT_TEXT.finditer(source):
            dots, module, names = match.group(1, 2, 3)
            if dots or "\\" in match.group(0):
                return True  # relative, or a continued line this reading does not follow
            tops = [module.split(".")[0]] if module else [n.split()[0].split(".")[0] for n in names.split(",") if n.strip()]
            for top in tops:
                if top in LIBRARY_ROOTS or not top.isidentifier():
                    continue
                for base in self._search_dirs(importer):
                    folder, file = self._top_level(base, top)
                    note(folder, file)
                    if (file[1] == EXISTS and file[0] != str(importer)) or folder[1] == FOLDER:
                        return True
        return False

    def unsummarised(self, from_file: str, source: str) -> int:
        """The size in bytes of the project's modules with training code that module `from_file`
        (its text `source`) imports and that have no summary in this process yet (`pending_bytes`)."""
        if self.depth or not from_file or from_file == "-":
            return 0
        return pending_bytes(self.locate, lambda path: (path, False) in self._summaries, Path(from_file), source)

    def _top_level(self, base: Path, top: str) -> tuple[State, State]:
        """What `base/top/` and `base/top.py` are (memoised: imports repeat)."""
        key = (base, top)
        known = self._tops.get(key)
        if known is None:
            known = self._tops[key] = (probe_state(str(base / top)), probe_state(str(base / f"{top}.py")))
        return known

    # -- summaries -----------------------------------------------------------------------------
    def _resolve(self, path: Path, rest: list[str], hops: int, outlines: bool = False) -> Symbol | None:
        if not rest or hops > 3:
            return None
        summary = self.outline(path, unknown_if_training=True) if outlines else self.summary(path)
        name = rest[0]
        if name in summary.functions and len(rest) == 1:
            return summary.functions[name]
        if name in summary.classes:
            cls = summary.classes[name]
            if len(rest) == 1:
                return cls
            return cls.methods.get(rest[1]) if len(rest) == 2 else None
        target = summary.exports.get(name)
        if target is not None:  # re-exported: `from .scaler import NativeScaler` in a package
            found = self.locate(path, ".".join([target, *rest[1:]]))
            if found is not None:
                return self._resolve(found[0], found[1], hops + 1, outlines)
        return None

    def class_methods(self, from_file: str, qualname: str) -> dict[str, FunctionSummary] | None:
        """The methods of project class `qualname` (as `from_file` spells it, or "file::Name"), with
        those it inherits from its project bases in any module (the nearest definition wins)."""
        if self.depth > MAX_DEPTH or not from_file or from_file == "-":
            return None
        found = self.locate_any(Path(from_file), qualname)
        if found is None or len(found[1]) != 1:
            return None
        return inherited_methods(found[0], found[1][0], lambda path, name: self._resolve(path, [name], 0, self.depth == MAX_DEPTH), self.outline, self.locate)

    def method_home(self, from_file: str, qualname: str, method: str) -> str | None:
        """Where an object of project class `qualname` finds `method` (`ProjectLookup.method_home`),
        read from outlines."""
        if self.depth > MAX_DEPTH or not from_file or from_file == "-":
            return None
        found = self.locate_any(Path(from_file), qualname)
        if found is None or len(found[1]) != 1:
            return None
        path, name = found[0], found[1][0]
        for where, cls in ((path, name), *class_hierarchy(path, name, self.outline, self.locate)[1]):
            owner = self.outline(where).classes.get(cls)
            if owner is not None and method in owner.methods:
                return f"{_real(where)}::{cls}.{method}"
        return None

    def unbuilt(self, path: str, class_name: str, base: str) -> bool:
        """Whether the project builds objects of other classes deriving from `base` ("file::Base") but
        never one of class `class_name` of module `path` (`hierarchy.unbuilt`)."""
        return bool(path) and path != "-" and unbuilt(self, _real(Path(path)), class_name, base)

    def class_candidates(self, from_file: str, kind: str, qualname: str) -> tuple[str, ...]:
        """The project classes an object built from `qualname` may be (`hierarchy.class_candidates`)."""
        if self.depth > MAX_DEPTH or not from_file or from_file == "-":
            return ()
        return class_candidates(self, Path(from_file), kind, qualname)

    def class_bases(self, from_file: str, class_name: str) -> tuple[str, ...]:
        """Every base of class `class_name` of `from_file`, through its project bases in any module
        (`class_hierarchy`), as the module naming each spells it."""
        if not from_file or from_file == "-":
            return ()
        return class_hierarchy(_real(Path(from_file)), class_name, self.outline, self.locate)[0]

    def outline(self, path: Path, unknown_if_training: bool = False) -> ModuleSummary:
        """The module's names without analysis (`module_outline`): all that finding where a name is
        defined needs, and what the deepest level of summaries knows of the modules it imports. There
        (`unknown_if_training`) a module with training code offers its names and class kinds only:
        what its functions do is unknown, not nothing."""
        known = self._outlines.get(path)
        if known is None or path not in self._current_outlines:
            state, data = read_state(str(path))
            self._current_outlines.add(path)
            if known is None or known[0] != state:
                text = module_code(str(path), data) if data is not None else ""
                outline = module_outline(text, str(_real(path))) if data is not None else EMPTY
                opaque = outline
                if any(token in text for token in TRAINING_TOKENS):
                    opaque = replace(outline, functions={}, classes={k: ClassSummary(c.kind) for k, c in outline.classes.items()})
                known = self._outlines[path] = (state, outline, opaque)
        note(known[0])
        return known[2] if unknown_if_training else known[1]

    def summary(self, path: Path, steps: bool = False) -> ModuleSummary:
        """The module's summary (memoised by content); empty when it cannot be read. A module with no
        training code is known by its outline, unless `steps`: what it calls whenever its functions
        run is asked (a step may pass through a model's `forward` to its loss head)."""
        key = (path, steps)
        known = self._summaries.get(key)
        if known is None and path in self._computing:  # modules that import each other: the inner ask sees nothing
            self._computing.cycle(path)
            return EMPTY
        if known is None or key not in self._current:
            state, data = read_state(str(path))
            if known is None or known[0] != state:
                plain = self.summary(path) if steps else None
                if plain is not None and not plain.outline:
                    known = self._summaries.get((path, False))  # the same analysis
                    if known is None:
                        return plain  # (met a cycle: not kept)
                else:
                    summary, depends, kept = self._summarise(path, state, data, steps)
                    if not kept:
                        note(state, *depends)
                        return summary
                    known = (state, summary, depends)
                self._summaries[key] = known
            self._current.add(key)
        state, summary, depends = known
        note(state, *depends)
        budget.used(str(path))
        return summary

    def _summarise(self, path: Path, state: State, data: bytes | None, steps: bool) -> tuple[ModuleSummary, set[State], bool]:
        """The summary of the content read, from the run's shared store when another process made it,
        and whether it may be kept (computed inside a cycle, it is neither kept nor shared)."""
        if data is None:
            return EMPTY, set(), True
        shared_entry = store.shared_entry(path, state, self.depth * 2 + steps)
        stored = store.load_shared(shared_entry)
        if stored is not None:
            return (*stored, True)
        store.log_computation(path, state, self.depth * 2 + steps)
        try:
            with self._computing.working(path), watching() as depends, budget.own_budget(str(path)):
                summary = self._compute(path, data, steps)
        except budget.OverBudget:  # unknown, not nothing: its names and class kinds only; never shared
            return self.outline(path, unknown_if_training=True), depends, self._computing.keep(path)
        kept = self._computing.keep(path)
        if kept:
            store.store_shared(shared_entry, summary, depends)
        return summary, depends, kept

    def _compute(self, path: Path, data: bytes, steps: bool) -> ModuleSummary:
        source = module_code(str(path), data)
        if self._deeper is None:
            self._deeper = Project(self.root, self.depth + 1)
        # a module with no training token says nothing of its own, unless a step may pass through it
        # (then the calls it makes onward matter: a model's `forward` calling its loss head)
        if not steps and not any(token in source for token in TRAINING_TOKENS):
            return replace(self.outline(path), arguments=self._arguments(path, passed_instances(source)))
        try:
            from trainlint.model.positions import call_placer
            from trainlint.model.summary import Summarizer

            model = self._model(path, data)
            if model is None:
                return self.outline(path)
            summary = Summarizer(model, path.name).module()
            calls = model.step_calls(call_placer(model.module, source, str(path)))
            arguments = self._arguments(path, model.project_arguments())
            return replace(summary, step_calls=tuple(calls), arguments=arguments) if calls or arguments else summary
        except Exception:  # a module we cannot analyse says nothing; its own lint reports why
            return self.outline(path)

    def _model(self, path: Path, data: bytes) -> Any:
        """The training model of a module, as its summary sees it (its own imports one level deeper)."""
        from trainlint.model.parse import parse_file
        from trainlint.model.training import TrainingModel

        source = module_code(str(path), data)
        if self._deeper is None:
            self._deeper = Project(self.root, self.depth + 1)
        try:
            return TrainingModel.build(parse_file(source, str(path)), path=str(path), project=self._deeper)
        except Exception:  # a module we cannot analyse says nothing; its own lint reports why
            return None


_SHARED: dict[Path | None, Project] = {}


def shared(root: Path | None = None) -> Project:
    """One project per process and root, so that each imported module is summarised once."""
    key = root.resolve() if root is not None else None
    project = _SHARED.get(key)
    if project is None:
        project = _SHARED[key] = Project(root)
    return project

