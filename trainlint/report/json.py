"""`--format json`: a JSON array of diagnostics (1-based lines and columns; end column exclusive)."""

from __future__ import annotations

import json
from typing import Sequence

from trainlint.diagnostics import Diagnostic


def render(diagnostics: Sequence[Diagnostic]) -> str:
    return json.dumps([d.to_dict() for d in diagnostics], indent=2)
