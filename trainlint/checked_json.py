"""JSON that trainlint wrote, read back without trusting it: typed accessors that raise `BadEntry`
for anything that is not exactly what was written (an entry of the result cache or of the run's
shared summary store may have been damaged or planted). Reading builds only strings, numbers,
booleans and lists: nothing in an entry names a class or runs code."""

from __future__ import annotations

import json
from typing import Any

from trainlint.reading import State


class BadEntry(ValueError):
    """Stored data that is not what trainlint writes: a miss."""


def dumps(data: object) -> bytes:
    """Compact ASCII JSON (lone surrogates in names and messages are escaped, and come back)."""
    return json.dumps(data, separators=(",", ":"), check_circular=False).encode("ascii")


def text(v: object) -> str:
    if type(v) is not str:
        raise BadEntry("not a string")
    return v


def opt_text(v: object) -> str | None:
    return None if v is None else text(v)


def flag(v: object) -> bool:
    if type(v) is not bool:
        raise BadEntry("not a boolean")
    return v


def opt_flag(v: object) -> bool | None:
    return None if v is None else flag(v)


def items(v: object, length: int | None = None) -> list[Any]:
    if type(v) is not list or (length is not None and len(v) != length):
        raise BadEntry("not a list of the expected length")
    return v


def mapping(v: object) -> dict[str, Any]:
    if type(v) is not dict:  # JSON object keys are always strings
        raise BadEntry("not an object")
    return v


def header(raw: bytes, version: int, keys: frozenset[str]) -> dict[str, Any]:
    data = mapping(json.loads(raw))
    found = data.get("trainlint")
    if type(found) is not int or found != version or data.keys() != keys:
        raise BadEntry("another format")
    return data



def is_state(value: tuple[object, ...]) -> bool:
    """Whether a decoded item is a dependency state: [path, size or code, hex digest or ""]."""
    return len(value) == 3 and type(value[0]) is str and type(value[1]) is int and type(value[2]) is str


def decode_states(data: object) -> tuple[State, ...]:
    """Dependency states (see cache.py): [path, size or code, hex digest or ""]."""
    out = []
    for item in items(data):
        state = tuple(item) if type(item) is list else ()
        if not is_state(state):
            raise BadEntry("not a state")
        out.append(state)
    return tuple(out)  # type: ignore[arg-type]


