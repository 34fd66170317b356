"""A cheap look at a source before the parser sees it: refuse what would crash or stall it.

libcst's native parser segfaults or runs for minutes on deeply nested input that CPython accepts or
rejects in milliseconds: 10,000 `and` operands, 500 nested brackets, 10,000 `elif` branches, a
5,000-long attribute or call chain, 10,000 implicitly concatenated strings. Measured with libcst
1.9 (parse alone): 200 nested brackets 0.3-0.7 s, 500 about 4 s, 2,000 a segfault; chains of 1,000
links 0.06-0.9 s, of 2,000 0.1-3.6 s, of 10,000 a segfault or over a minute. The default limits
(100 nested brackets, chains of 500) keep the worst case near 0.25 s; real code stays far below.

A line longer than max-line-length is refused first, without tokenizing (the tokenizer is
quadratic in a line's length). A screen of plain string operations clears nearly every other file;
only a file it cannot clear (a long line, many `elif`s, brackets that look deep) is tokenized
(CPython's C tokenizer) and measured exactly.
"""

from __future__ import annotations

import re
import tokenize

from trainlint.config import Limits

_BRACKETS = re.compile(r"[()\[\]{}]")
_OPEN = frozenset("([{")
# tokens that add a level to libcst's tree when they join two operands (or prefix one)
_CHAIN_WORDS = frozenset({"and", "or", "not", "if", "else", "lambda", "is", "in", "await"})
_NOT_CHAIN_OPS = frozenset({",", ";", ":", "=", ")", "]", "}", "->", ":="})


def refuse(source: str, limits: Limits) -> str | None:
    """Why `source` must not be parsed, or None when it is safe to parse."""
    lengths = list(map(len, source.splitlines()))
    longest = max(lengths, default=0)
    if longest > limits.max_line_length:
        # refused before tokenizing: the C tokenizer's column bookkeeping is quadratic in a line's
        # length (a 1 MB line takes about 30 s)
        line = lengths.index(longest) + 1
        return f"line {line} has {longest:,} characters (max-line-length {limits.max_line_length:,})"
    if not _needs_tokens(source, longest, limits):
        return None
    return _measure(source, limits)


# A file's parse and analysis take 2.6-5.3 KB of memory per token (peak address space over start-up,
# measured on real and generated files of 0.4-3.9 MB, libcst 1.9). The lower figure refuses only a
# file that cannot fit its worker's memory cap (file-memory); one that needs more than its tokens say
# still meets the cap itself.
_BYTES_PER_TOKEN = 2_600
# a rough token: a string literal (one token, however long), a comment, a word or a symbol
_TOKEN = re.compile(
    r"[rRbBuUfF]{0,2}(?:\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*')"
    r"|#[^\n]*|\w+|[^\w\s]"
)


def too_big_to_parse(source: str, memory_mb: int) -> str | None:
    """Why `source` cannot be parsed within `memory_mb` MB (file-memory), or None when it may be.

    Without this a file of 3-5 MB passed max-file-size and then always ran into the memory cap,
    after seconds of parsing.
    """
    cap = memory_mb * 2**20
    if len(source) * _BYTES_PER_TOKEN <= cap:  # no more tokens than characters: it fits
        return None
    tokens = sum(1 for match in _TOKEN.finditer(source) if match.group()[0] != "#")
    need = tokens * _BYTES_PER_TOKEN
    if need <= cap:
        return None
    return f"{tokens:,} tokens need at least {need // 2**20:,} MB to parse, more than file-memory {memory_mb:,} MB"


def _needs_tokens(source: str, longest: int, limits: Limits) -> bool:
    """The screen: False when the file clearly cannot exceed a limit."""
    if longest > limits.max_chain or source.count("elif") > limits.max_chain:
        return True
    depth = deepest = start = 0
    # a chain of n links inside brackets is at least 2n characters without a comma
    stretch = 2 * limits.max_chain
    for match in _BRACKETS.finditer(source):  # brackets in strings and comments count too: a screen
        if match.group() in _OPEN:
            if depth == 0:
                start = match.start()
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
            if depth == 0 and match.start() - start > stretch:
                if max(map(len, source[start: match.start()].split(","))) > stretch:
                    return True
    return deepest > limits.max_nesting


def _measure(source: str, limits: Limits) -> str | None:
    """Exact nesting and chain lengths from the tokens."""
    depth = 0
    chains = [0]  # per open bracket level of the current logical line
    elifs: dict[int, int] = {}  # per indentation level: elif branches of the current `if`
    indent = 0
    line_start = True
    previous = None
    try:
        tokens = tokenize._generate_tokens_from_c_tokenizer(source)  # type: ignore[attr-defined]
        for tok in tokens:
            kind, text = tok.type, tok.string
            if kind != tokenize.STRING and text in tokenize.EXACT_TOKEN_TYPES:
                kind = tokenize.OP  # the C tokenizer gives operators their exact types
            if kind == tokenize.NEWLINE:
                chains, line_start, previous = [0], True, None
                continue
            if kind == tokenize.NL:  # a line break inside brackets continues the expression
                continue
            if kind == tokenize.INDENT:
                indent += 1
                continue
            if kind == tokenize.DEDENT:
                elifs.pop(indent, None)
                indent -= 1
                continue
            if kind in (tokenize.COMMENT, tokenize.ENDMARKER):
                continue
            if line_start:
                line_start = False
                if text == "elif":
                    elifs[indent] = elifs.get(indent, 0) + 1
                    if elifs[indent] > limits.max_chain:
                        return f"more than {limits.max_chain:,} `elif` branches in one `if` statement (max-chain)"
                elif text not in ("else",):
                    elifs[indent] = 0
            link = False
            if kind == tokenize.OP:
                if text in _OPEN:
                    link = True
                    depth += 1
                    if depth > limits.max_nesting:
                        return f"brackets nested more than {limits.max_nesting:,} deep (max-nesting)"
                elif text in (")", "]", "}"):
                    depth = max(depth - 1, 0)
                    if len(chains) > 1:
                        chains.pop()
                    previous = kind
                    continue
                elif text in (",", ";"):
                    chains[-1] = 0
                else:
                    link = text not in _NOT_CHAIN_OPS
            elif kind == tokenize.NAME and text in _CHAIN_WORDS:
                link = True
            elif kind == tokenize.STRING and previous == tokenize.STRING:
                link = True  # implicit concatenation nests in libcst
            if link:
                chains[-1] += 1
                if chains[-1] > limits.max_chain:
                    return f"an expression chained more than {limits.max_chain:,} deep (max-chain)"
                if text in _OPEN:
                    chains.append(0)
            previous = kind
    except (SyntaxError, ValueError, tokenize.TokenError, IndentationError, MemoryError, RecursionError):
        return None  # not tokenizable: the parser reports the syntax error itself
    return None
