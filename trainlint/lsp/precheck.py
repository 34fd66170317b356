"""A cheap look at a buffer before any parser sees it: nesting depth, found with the tokenizer.

libcst's native parser recurses once per nesting level and overflows the C stack (a segfault, not
an exception) on inputs CPython itself refuses: CPython's tokenizer stops at 200 nested brackets
and 100 indentation levels. Counting those with the pure-Python tokenizer is linear and cannot
crash, so a buffer past either limit gets one clear TL000 instead of reaching the parser.

This is the language server's own copy of the check; it gives way to the engine's shared
pre-parse check once that exists.
"""

from __future__ import annotations

import io
import tokenize

MAX_BRACKET_DEPTH = 200  # CPython: "too many nested parentheses"
MAX_INDENT_DEPTH = 100  # CPython: "too many levels of indentation"
_OPENERS = frozenset("([{")
_CLOSERS = frozenset(")]}")


def nesting_problem(source: str) -> str | None:
    """Why `source` must not reach the parser (nesting too deep), or None when it may."""
    brackets = indents = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.OP:
                if token.string in _OPENERS:
                    brackets += 1
                    if brackets > MAX_BRACKET_DEPTH:
                        return f"could not be analysed: brackets nested deeper than {MAX_BRACKET_DEPTH} (line {token.start[0]})"
                elif token.string in _CLOSERS:
                    brackets = max(brackets - 1, 0)
            elif token.type == tokenize.INDENT:
                indents += 1
                if indents > MAX_INDENT_DEPTH:
                    return f"could not be analysed: blocks nested deeper than {MAX_INDENT_DEPTH} (line {token.start[0]})"
            elif token.type == tokenize.DEDENT:
                indents = max(indents - 1, 0)
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None  # unfinished text: the parser reports the syntax error with its position
    return None
