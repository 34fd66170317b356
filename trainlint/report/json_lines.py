"""`--format json-lines`: one JSON object per finding per line (the objects of `--format json`), for
tools that stream."""

from __future__ import annotations

import json
from typing import Sequence

from trainlint.diagnostics import Diagnostic


def render(diagnostics: Sequence[Diagnostic]) -> str:
    return "\n".join(json.dumps(d.to_dict()) for d in diagnostics)
