"""Modules a script imports by name at run time: `model = importlib.import_module(args.model)`, the
name written there as a string or the default of the command-line option it reads
(`parser.add_argument('--model', default='pointnet_cls')`): what a run imports unless told otherwise.
Read from a module's tree (its analysis) and from its text (the project's import index)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import libcst as cst

from trainlint.model.names import dotted
from trainlint.model.torchnames import literal_string as _string

if TYPE_CHECKING:
    from trainlint.model.facts import Call
    from trainlint.model.names import ImportMap

IMPORT_BY_NAME = frozenset({"importlib.import_module"})
_CALLED = re.compile(r"\bimport_module\(\s*(?:(['\"])([\w.]+)\1|\w+\.(\w+))\s*\)")
_OPTION = r"""add_argument\(\s*['"]--{}['"][^)]*?\bdefault\s*=\s*['"]([\w.]+)['"]"""


def modules_named(text: str) -> list[str]:
    """The modules a module's text imports with `importlib.import_module`: a string, or the default
    of the option (`args.model`) named there."""
    if "import_module" not in text:
        return []
    out: list[str] = []
    for found in _CALLED.finditer(text):
        name = found.group(2)
        if name is None:
            option = found.group(3)
            default = re.search(_OPTION.format("[-_]".join(map(re.escape, option.split("_")))), text)
            name = default.group(1) if default is not None else None
        if name and name not in out:
            out.append(name)
    return out


def option_default(call: cst.Call) -> tuple[str, str] | None:
    """`parser.add_argument('--model-name', ..., default='pointnet_cls')`: ("model_name", "pointnet_cls"),
    the attribute the parsed options hold it in and its string default; else None."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "add_argument") or not call.args:
        return None
    flag = _string(call.args[0].value)
    default = next((_string(a.value) for a in call.args if a.keyword is not None and a.keyword.value == "default"), None)
    if flag is None or not flag.startswith("--") or default is None:
        return None
    dest = next((_string(a.value) for a in call.args if a.keyword is not None and a.keyword.value == "dest"), None)
    return dest or flag[2:].replace("-", "_"), default


def module_named(argument: cst.BaseExpression, defaults: dict[str, str]) -> str | None:
    """The module an `import_module` argument names: a string, or `args.model` with the option's
    string default (`defaults`: `option_default`'s, an option given two is in neither)."""
    text = _string(argument)
    if text is None and isinstance(argument, cst.Attribute) and isinstance(argument.value, cst.Name):
        text = defaults.get(argument.attr.value) or None
    return text if text is not None and all(part.isidentifier() for part in text.split(".")) else None


class ImportsByName:
    """What a module's tree imports by name, noted while it is walked, bound once it has been: the
    option an assignment reads may be declared below it (`if __name__ == "__main__":`)."""

    def __init__(self) -> None:
        self.defaults: dict[str, str] = {}  # option -> its string default ("" when declared twice otherwise)
        self._assigned: list[tuple[Any, str, cst.BaseExpression]] = []  # (function, name, argument)

    def note_call(self, call: cst.Call) -> None:
        declared = option_default(call)
        if declared is not None:
            dest, default = declared
            self.defaults[dest] = default if self.defaults.get(dest, default) == default else ""

    def note_assign(self, function: Any, name: str, value: cst.BaseExpression, imports: "ImportMap") -> None:
        if isinstance(value, cst.Call) and len(value.args) == 1 and imports.resolve(value.func) in IMPORT_BY_NAME:
            self._assigned.append((function, name, value.args[0].value))

    def bind(self, imports: "ImportMap", calls: "list[Call]") -> None:
        """Bind each name assigned a module by name, as `import pointnet_cls as model` in its function
        would, and resolve the calls through it (`model.get_model(...)`)."""
        for function, name, argument in self._assigned:
            module = module_named(argument, self.defaults)
            if module is None:
                continue
            imports.bind_module(name, module, function)
            # (a module-level binding: the module's own statements; in a function the name may be a parameter)
            for call in function.calls if function is not None else [c for c in calls if c.site.function is None]:
                if call.qualname is None and (dotted(call.node.func) or "").partition(".")[0] == name:
                    call.qualname = imports.resolve_in(call.node.func, function, None)
