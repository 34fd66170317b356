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
from typing import Iterable, Sequence

import libcst as cst
from libcst.metadata import CodePosition, CodeRange
from libcst.metadata import MetadataWrapper, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

from trainlint.model.walk import child_nodes

# nodes no rule reports: the search for reported nodes does not enter them
_TRIVIA = (
    cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.TrailingWhitespace, cst.Newline, cst.EmptyLine,
    cst.Comment, cst.Comma, cst.Dot, cst.Colon, cst.Semicolon, cst.AssignEqual, cst.LeftParen, cst.RightParen,
    cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace, cst.RightCurlyBrace,
)


class _Mismatch(Exception):
    """The libcst and ast statement lists do not line up."""


class _Recorded:
    """Stands in for the metadata provider that libcst's codegen state records positions into."""

    def __init__(self) -> None:
        self._computed: dict[cst.CSTNode, CodeRange] = {}


def positions(module: cst.Module, source: str, nodes: Iterable[cst.CSTNode]) -> dict[cst.CSTNode, CodeRange]:
    """The `PositionProvider` range of each of `nodes` (all nodes of `module`)."""
    wanted = {id(n): n for n in nodes}
    if not wanted:
        return {}
    try:
        tree = compile(source, "<trainlint>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
        found = _Search(wanted, module.default_indent).run(module, tree)
        if len(found) == len(wanted):
            return _regenerate(module, found)
    except (_Mismatch, SyntaxError, ValueError, RecursionError, MemoryError, KeyError):
        pass
    every = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return {n: every[n] for n in wanted.values()}


Anchor = tuple[cst.CSTNode, int, tuple[str, ...]]  # statement, its ast line, the indents around it


class _Search:
    """Finds, for each wanted node, the innermost statement anchor that holds it."""

    def __init__(self, wanted: dict[int, cst.CSTNode], default_indent: str) -> None:
        self.wanted = wanted
        self.default_indent = default_indent
        self.found: dict[cst.CSTNode, Anchor] = {}

    def run(self, module: cst.Module, tree: ast.Module) -> dict[cst.CSTNode, Anchor]:
        self._statements(module.body, tree.body, ())
        return self.found

    def _statements(self, statements: Sequence[cst.BaseStatement], asts: list[ast.stmt], indents: tuple[str, ...]) -> bool:
        """Search a statement list; True once every wanted node is found."""
        i = 0
        for stmt in statements:
            if i >= len(asts):
                raise _Mismatch
            anchor_ast = asts[i]
            i += len(stmt.body) if isinstance(stmt, cst.SimpleStatementLine) else 1
            anchor = (stmt, anchor_ast.lineno, indents)
            block = getattr(stmt, "body", None)
            nested = isinstance(block, cst.IndentedBlock) and isinstance(getattr(anchor_ast, "body", None), list)
            if self._nodes(stmt, anchor, block if nested else None):
                return True
            if nested:
                indent = block.indent if block.indent is not None else self.default_indent
                if self._statements(block.body, anchor_ast.body, (*indents, indent)):  # type: ignore[union-attr]
                    return True
        if i != len(asts):
            raise _Mismatch
        return False

    def _nodes(self, stmt: cst.CSTNode, anchor: Anchor, skip_block: cst.CSTNode | None) -> bool:
        """Record the wanted nodes of a statement, not entering its nested block's statements."""
        stack = [stmt]
        while stack:
            node = stack.pop()
            if id(node) in self.wanted:
                self.found[node] = anchor
                if len(self.found) == len(self.wanted):
                    return True
            if node is skip_block:
                # the block's own header and footer belong to this statement, its statements do not
                stack.extend(c for c in child_nodes(node) if not isinstance(c, cst.BaseStatement))
                continue
            stack.extend(c for c in child_nodes(node) if not isinstance(c, _TRIVIA))
        return False


def _regenerate(module: cst.Module, found: dict[cst.CSTNode, Anchor]) -> dict[cst.CSTNode, CodeRange]:
    by_anchor: dict[int, list[cst.CSTNode]] = {}
    anchors: dict[int, Anchor] = {}
    for node, anchor in found.items():
        by_anchor.setdefault(id(anchor[0]), []).append(node)
        anchors[id(anchor[0])] = anchor
    out: dict[cst.CSTNode, CodeRange] = {}
    for key, nodes in by_anchor.items():
        stmt, line, indents = anchors[key]
        recorded = _Recorded()
        state = PositionProvidingCodegenState(
            default_indent=module.default_indent,
            default_newline=module.default_newline,
            provider=recorded,  # type: ignore[arg-type]
            indent_tokens=list(indents),
        )
        stmt._codegen(state)
        computed = recorded._computed
        # CPython numbers a simple statement line by its first statement, a compound one by its keyword
        first = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else stmt
        shift = line - computed[first].start.line
        for node in nodes:
            span = computed[node]
            out[node] = CodeRange(
                CodePosition(span.start.line + shift, span.start.column),
                CodePosition(span.end.line + shift, span.end.column),
            )
    return out
