"""Output formats. Each module renders a list of file results; `FORMATS` names them for the CLI."""

from __future__ import annotations

FORMATS = ("text", "concise", "json")
