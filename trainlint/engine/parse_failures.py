"""What a file that does not parse is told: CPython's account of the error (libcst's where CPython accepts
the file), the tree of a file that fails only for Python 3.6's `async=` keyword arguments, the position of
a lone surrogate; and whether such a file could hold a finding of its own at all."""

from __future__ import annotations

import ast
import re
from typing import Any

from trainlint.diagnostics import Diagnostic
from trainlint.engine.results import error_diagnostic

_NATIVE_POSITION = re.compile(r"(?:parser error: )?error at (?P<line>\d+):(?P<column>\d+): ")


def names_torch_or_a_step(source: str) -> bool:
    """Whether a file that does not parse could hold a finding of its own: it names torch or a training
    step. One that does neither (plain Python or NumPy) is left to a Python linter, as unparsed files are."""
    return any(token in source for token in ("torch", "backward", ".step(", "training_step"))


def pre37_module(source: str, name: str) -> tuple[Any, str]:
    """The tree of a text that fails to parse only for `async` keyword arguments (Python before 3.7),
    read as `pre37_keywords` spells them, and that text; else (None, the text)."""
    import libcst as cst

    from trainlint.model.parse import parse_file
    from trainlint.reading import pre37_keywords

    read = pre37_keywords(source)
    if read == source:
        return None, source
    try:
        return parse_file(read, name), read
    except (cst.ParserSyntaxError, RecursionError, MemoryError, UnicodeEncodeError):
        return None, source


def lone_surrogate(source: str, name: str) -> Diagnostic:
    """The TL000 of source text holding a lone surrogate, which neither CPython nor libcst can read."""
    found = re.search("[\ud800-\udfff]", source)
    if found is None:
        return error_diagnostic(name, "syntax error: the source cannot be encoded as UTF-8")
    at = found.start()
    line = source.count("\n", 0, at) + 1
    column = at - source.rfind("\n", 0, at)
    return error_diagnostic(name, f"syntax error: a lone surrogate (U+{ord(found.group()):04X}) cannot be encoded as UTF-8", line, column)


def syntax_error(source: str, exc: Any) -> tuple[str, int, int, bool]:
    """Message and 1-based position of a syntax error, and whether CPython accepts the file after all.

    CPython's own parser names the offending token (libcst's reports where its lookahead gave up,
    often the next line), so it is asked first; libcst's account is kept for code CPython accepts.
    """
    try:
        compile(source, "<trainlint>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
        accepted = True
    except SyntaxError as err:
        accepted = False
        if err.lineno is not None:
            return err.msg, err.lineno, max(err.offset or 1, 1), False
    except (ValueError, RecursionError, MemoryError):
        accepted = False
    message = " ".join(exc.message.split())
    line, column = exc.raw_line, exc.raw_column + 1
    where = _NATIVE_POSITION.match(message)  # "parser error: error at 3:4: expected ..."
    if where:
        line, column = int(where["line"]), int(where["column"]) + 1
        message = message[where.end():]
    return message, line, column, accepted
