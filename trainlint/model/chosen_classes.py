"""Objects whose class a function chooses at run time, where the choice is written out: a name bound
to one of several classes (`klass = A if cond else B`, then `klass(...)`), a dict of classes
subscripted by a setting (`key2scheduler[cfg.name](optimizer)`). A mixin of the value model's calls
(`value_calls.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.lattice import Kind, Value, join

if TYPE_CHECKING:
    from trainlint.model.facts import Function, Site
    from trainlint.model.training import TrainingModel


class ChosenClasses:
    """Calls of classes chosen at run time (a mixin of the value model's calls)."""

    model: "TrainingModel"

    def _library_call(self, qual: str, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value | None:
        raise NotImplementedError

    def _chosen_class(self, name: str, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value | None:
        """`klass = CharacterEmbed if not interpolated else InterpolatedEmbed` then `klass(...)`: an
        instance of one of the classes (of this module, or imported from the project) the name may
        hold (None unless all are such)."""
        assigns = self.model.reaching(fn, name, at)
        if not assigns:
            return None
        built: list[Value] = []
        for assign in assigns:
            value = assign.value
            for choice in (value.body, value.orelse) if isinstance(value, cst.IfExp) else (value,):
                instance = self._instance(choice, call, fn, at) if isinstance(choice, cst.Name) and assign.op is None else None
                if instance is None or instance.origin is None:  # not a class of the project
                    return None
                built.append(instance)
        return join(built)

    def _class_from_dict(self, name: str, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value | None:
        """`key2scheduler[cfg.name](optimizer)` where the dict maps keys to classes that all build one
        kind of thing (torch's schedulers and the project's own): that kind. Modules and other
        objects are left to the project's choice of classes (`class_candidates`), which bounds them."""
        m = self.model
        assigns = m.reaching(fn, name, at) or (m.reaching(None, name, None) if fn is not None and name not in fn.params else [])
        if not assigns or any(a.op is not None or not isinstance(a.value, cst.Dict) for a in assigns):
            return None
        built: list[Value] = []
        for element in (e for a in assigns for e in a.value.elements):  # type: ignore[attr-defined]
            instance = self._instance(element.value, call, fn, at) if isinstance(element, cst.DictElement) and isinstance(element.value, cst.Name) else None
            if instance is None:
                return None
            built.append(instance)
        value = join(built)
        return value if built and value.kind not in (Kind.MODULE, Kind.OBJECT, Kind.UNKNOWN) else None

    def _instance(self, choice: cst.Name, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value | None:
        """What calling class `choice` (of this module, the project or a library) with `call`'s arguments builds."""
        m = self.model
        if m.local_class(choice.value) is not None:
            return m.instance_of_local_class(choice.value)
        qual = m.imports.resolve(choice)
        return self._library_call(qual, call, fn, at) if qual is not None and choice.value[:1].isupper() else None
