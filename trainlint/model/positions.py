"""Source positions of the reported nodes only, identical to libcst's `PositionProvider`.

`PositionProvider` regenerates the code of the whole module to count lines and columns. Only the
few reported nodes need a position, so: find the innermost statement that holds each one (a
statement in a statement list, descending only through the `body` of compound statements),
regenerate the code of that statement alone with position recording, and anchor it by line with
the line CPython's own parser gives the same statement (its `ast`, ~10x cheaper than libcst's
parse). A statement always starts at column 0 of a line (its indentation is part of its code), so
the line is the only offset. Whenever the two trees do not line up (code CPython rejects but
libcst accepts, a node outside any statement), the whole module goes through `PositionProvider`.
"""

from __future__ import annotations

import ast
import bisect
import re
from typing import Any, Callable, Iterable, Sequence

import libcst as cst
from libcst.metadata import CodePosition, CodeRange
from libcst.metadata import MetadataWrapper, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from trainlint.model.walk import TRIVIA, content_children

_TRIVIA = TRIVIA  # nodes no rule reports: the search for reported nodes does not enter them


_NEWLINE = re.compile(r"\r\n?|\n")  # how libcst and CPython end lines


class _Mismatch(Exception):
    """The libcst and ast statement lists do not line up."""


class _Found(Exception):
    """Every wanted node of a statement has its position: the rest of its code is not needed."""


class _UntilFound(dict):  # type: ignore[type-arg]
    """The positions libcst's codegen records, stopping it once the wanted nodes have theirs."""

    def __init__(self, wanted: set[int]) -> None:
        super().__init__()
        self.missing = set(wanted)

    def __setitem__(self, node: cst.CSTNode, span: CodeRange) -> None:
        super().__setitem__(node, span)
        if self.missing:
            self.missing.discard(id(node))
            if not self.missing:
                raise _Found


class _Recorded:
    """Stands in for the metadata provider that libcst's codegen state records positions into."""

    def __init__(self, wanted: set[int]) -> None:
        self._computed = _UntilFound(wanted)


def positions(module: cst.Module, source: str, nodes: Iterable[cst.CSTNode]) -> dict[cst.CSTNode, CodeRange]:
    """The `PositionProvider` range of each of `nodes` (all nodes of `module`)."""
    wanted = {id(n): n for n in nodes}
    if not wanted:
        return {}
    try:
        found = _Search(wanted, _index_of(module, source)).run()
        if len(found) == len(wanted):
            return _regenerate(module, found)
    except (_Mismatch, SyntaxError, ValueError, RecursionError, MemoryError, KeyError):
        pass
    every = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return {n: every[n] for n in wanted.values()}


def statement_lines(module: cst.Module, source: str, statements: Iterable[cst.CSTNode]) -> dict[cst.CSTNode, tuple[int, int]] | None:
    """The first and last line of each of `statements` (statements of `module`; a decorated one from
    its `def`, as `positions` has it), read from CPython's tree with no code regenerated: a function's
    lines cost nothing, its `positions` the code of its whole body. None when the trees do not pair up
    or a statement is not reached through the bodies of compound statements (in an `else`, a handler)."""
    try:
        index = _index_of(module, source)
    except (_Mismatch, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    out: dict[cst.CSTNode, tuple[int, int]] = {}
    for stmt in statements:
        lines = index.lines.get(id(stmt))
        if lines is None:
            return None
        out[stmt] = lines
    return out


Anchor = tuple[cst.CSTNode, int, tuple[str, ...]]  # statement, its ast line, the indents around it


class _Index:
    """libcst's statements paired with CPython's (descending through the bodies of compound ones):
    each statement an anchor, with its line, its indents, and what lines it spans."""

    def __init__(self, module: cst.Module, source: str) -> None:
        self.module = module
        self.source = source
        tree = compile(source, "<trainlint>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
        self.anchors: list[tuple[Anchor, cst.CSTNode | None]] = []
        self.innermost: dict[int, int] = {}  # line -> index of the innermost anchor on it
        self.asts: dict[int, list[ast.stmt]] = {}  # id(simple statement line) -> CPython's statements of it
        self.lines: dict[int, tuple[int, int]] = {}  # id(anchor statement) -> its first and last line
        self._pair(module.body, tree.body, ())
        self.line_starts = [0] + [m.end() for m in _NEWLINE.finditer(source)]

    def _pair(self, statements: Sequence[cst.BaseStatement], asts: list[ast.stmt], indents: tuple[str, ...]) -> None:
        i = 0
        for stmt in statements:
            if i >= len(asts):
                raise _Mismatch
            anchor_ast = asts[i]
            simple = type(stmt) is cst.SimpleStatementLine  # (libcst's node classes are final)
            if simple:
                self.asts[id(stmt)] = asts[i:i + len(stmt.body)]
            i += len(stmt.body) if simple else 1
            last = asts[i - 1]
            # CPython numbers a statement by its first decorator, else its first line
            decorators = getattr(anchor_ast, "decorator_list", None)
            first = decorators[0].lineno if decorators else anchor_ast.lineno
            block = getattr(stmt, "body", None)
            nested = type(block) is cst.IndentedBlock and isinstance(getattr(anchor_ast, "body", None), list)
            index = len(self.anchors)
            self.anchors.append(((stmt, first, indents), block if nested else None))
            self.lines[id(stmt)] = (anchor_ast.lineno, last.end_lineno or anchor_ast.lineno)
            for line in range(first, (last.end_lineno or first) + 1):
                self.innermost[line] = index  # inner statements, indexed later, overwrite
            if nested:
                indent = block.indent if block.indent is not None else self.module.default_indent  # type: ignore[union-attr]
                self._pair(block.body, anchor_ast.body, (*indents, indent))  # type: ignore[union-attr]
        if i != len(asts):
            raise _Mismatch


_last_index: list[_Index] = []  # the last module's: a file's findings, chains and calls ask it in turn


def _index_of(module: cst.Module, source: str) -> _Index:
    """The index of `module`, built once for the questions asked of one module in a row."""
    if _last_index and _last_index[0].module is module and _last_index[0].source is source:
        return _last_index[0]
    _last_index.clear()
    index = _Index(module, source)
    _last_index.append(index)
    return index


class _Search:
    """Finds, for each wanted node, the innermost statement anchor that holds it.

    First where the node's text says it is: the first line of its code, looked up in the source,
    names the innermost statement on that line, and only that statement is searched (by identity).
    What that does not find is searched for statement by statement.
    """

    def __init__(self, wanted: dict[int, cst.CSTNode], index: _Index) -> None:
        self.wanted = wanted
        self.index = index
        self.module = index.module
        self.source = index.source
        self.anchors = index.anchors
        self.innermost = index.innermost
        self.found: dict[cst.CSTNode, Anchor] = {}
        self.searched: set[int] = set()
        self.resume: dict[str, int] = {}  # text -> where its search for the next node starts

    def run(self) -> dict[cst.CSTNode, Anchor]:
        for node in list(self.wanted.values()):
            if node not in self.found:
                self._by_text(node, self.index.line_starts)
        for index in range(len(self.anchors)):
            if len(self.found) == len(self.wanted):
                break
            if index not in self.searched:
                self._nodes(index)
        return self.found

    def _by_text(self, node: cst.CSTNode, line_starts: list[int]) -> None:
        try:
            # a call's first line starts with its callee's: printing that alone skips its arguments
            code = self.module.code_for_node(node.func if isinstance(node, cst.Call) and not node.lpar else node)
        except Exception:  # some nodes print only within their parent (an annotation's `:` or `->`)
            return
        first = next((ln.strip() for ln in code.splitlines() if ln.strip() and not ln.strip().startswith("#")), "")
        if not first:
            return
        # every statement holding an earlier match of the same text has been searched: resume after
        # them, so that n repeated statements cost n searches, not n * n
        at = self.source.find(first, self.resume.get(first, 0))
        while at >= 0 and node not in self.found:
            index = self.innermost.get(bisect.bisect_right(line_starts, at))
            if index is not None and index not in self.searched:
                self._nodes(index)
            if node in self.found:
                break
            at = self.source.find(first, at + 1)
        self.resume[first] = at if at >= 0 else len(self.source)

    def _nodes(self, index: int) -> None:
        """Record the wanted nodes of an anchor's statement, not entering its nested block's statements."""
        self.searched.add(index)  # every wanted node in it is recorded: no need to search it again
        anchor, skip_block = self.anchors[index]
        stack = [anchor[0]]
        while stack:
            node = stack.pop()
            if id(node) in self.wanted:
                self.found[node] = anchor
            children = content_children(node)
            if node is skip_block:  # the block's statements are anchors of their own
                children = [c for c in children if not isinstance(c, cst.BaseStatement)]
            stack.extend(children)


def _regenerate(module: cst.Module, found: dict[cst.CSTNode, Anchor]) -> dict[cst.CSTNode, CodeRange]:
    by_anchor: dict[int, list[cst.CSTNode]] = {}
    anchors: dict[int, Anchor] = {}
    for node, anchor in found.items():
        by_anchor.setdefault(id(anchor[0]), []).append(node)
        anchors[id(anchor[0])] = anchor
    out: dict[cst.CSTNode, CodeRange] = {}
    for key, nodes in by_anchor.items():
        stmt, line, indents = anchors[key]
        recorded = _Recorded({id(n) for n in nodes})
        state = PositionProvidingCodegenState(
            default_indent=module.default_indent,
            default_newline=module.default_newline,
            provider=recorded,  # type: ignore[arg-type]
            indent_tokens=list(indents),
        )
        computed = recorded._computed
        try:
            stmt._codegen(state)
        except _Found:
            pass
        except KeyError:  # an enclosing node, cut short, looked for a child's position: harmless once found
            if computed.missing:
                raise
        # the statement's code starts at line 1 with its blank and comment lines, one line each
        shift = line - (1 + len(stmt.leading_lines))  # type: ignore[attr-defined]
        for node in nodes:
            span = computed[node]
            out[node] = CodeRange(
                CodePosition(span.start.line + shift, span.start.column),
                CodePosition(span.end.line + shift, span.end.column),
            )
    return out


def call_placer(module: cst.Module, source: str, path: str) -> "Callable[[list[Any]], dict[Any, tuple[str, int, int]]]":
    """Locates calls of a summarised module as (path, line, column), positions computed once for all
    the calls asked (those the module's step chains hold)."""

    def place(calls: list[Any]) -> dict[Any, tuple[str, int, int]]:
        found = call_starts(module, source, [c.node for c in calls])
        out: dict[Any, tuple[str, int, int]] = {}
        for call in calls:
            start = found.get(call.node)
            out[call] = (path, start[0], start[1] + 1) if start is not None else (path, 0, 0)
        return out

    return place


def call_starts(module: cst.Module, source: str, calls: Sequence[cst.Call]) -> dict[cst.CSTNode, tuple[int, int]]:
    """(line, column) where each call starts, as `positions` gives it, cheaper: a call in a simple
    statement line takes CPython's position of the call at the same place in source order (its
    callee's name checked), with no code regenerated; the rest go through `positions`."""
    wanted = {id(n): n for n in calls}
    if not wanted:
        return {}
    try:
        search = _Search(wanted, _index_of(module, source))
        found = search.run()
    except (_Mismatch, SyntaxError, ValueError, RecursionError, MemoryError, KeyError):
        return {n: (r.start.line, r.start.column) for n, r in positions(module, source, calls).items()}
    lines = _NEWLINE.split(source)
    out: dict[cst.CSTNode, tuple[int, int]] = {}
    by_anchor: dict[int, cst.SimpleStatementLine] = {id(a[0]): a[0] for a in found.values() if isinstance(a[0], cst.SimpleStatementLine)}
    for key, stmt in by_anchor.items():
        out.update(_ast_call_starts(stmt, search.index.asts.get(key) or [], lines))
    rest = {n: found[n] for n in wanted.values() if n not in out and n in found}
    if rest:  # in a compound statement's header, or not paired: regenerated from their anchors
        out.update({n: (r.start.line, r.start.column) for n, r in _regenerate(module, rest).items()})
    unplaced = [n for n in wanted.values() if n not in out]
    if unplaced:
        out.update({n: (r.start.line, r.start.column) for n, r in positions(module, source, unplaced).items()})
    return out


def _ast_call_starts(stmt: cst.SimpleStatementLine, asts: list[ast.stmt], lines: list[str]) -> dict[cst.CSTNode, tuple[int, int]]:
    """The calls of one statement line paired in source order with CPython's; nothing when they do not
    pair up exactly (a parenthesised call, an f-string, a callee named differently)."""
    mine: list[cst.Call] = []
    stack: list[cst.CSTNode] = [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FormattedString, cst.ConcatenatedString)) or (isinstance(node, cst.Call) and node.lpar):
            return {}
        if isinstance(node, cst.Call):
            mine.append(node)
        stack.extend(reversed(content_children(node)))
    theirs = sorted((n for s in asts for n in ast.walk(s) if isinstance(n, ast.Call)),
                    key=lambda n: (n.lineno, n.col_offset, -(n.end_lineno or 0), -(n.end_col_offset or 0)))
    if len(mine) != len(theirs) or any(_callee(a) != _callee(b) for a, b in zip(mine, theirs)):
        return {}
    return {a: (b.lineno, _column(lines, b.lineno, b.col_offset)) for a, b in zip(mine, theirs)}


def _callee(call: cst.Call | ast.Call) -> str:
    func = call.func
    if isinstance(func, (cst.Name, ast.Name)):
        return func.value if isinstance(func, cst.Name) else func.id
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.attr if isinstance(func, ast.Attribute) else "?"


def _column(lines: list[str], line: int, byte_offset: int) -> int:
    """CPython's column (UTF-8 bytes) as libcst counts it (code points)."""
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return byte_offset if text.isascii() else len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace"))
