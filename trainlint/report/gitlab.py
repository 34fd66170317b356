"""`--format gitlab`: a GitLab Code Quality report (a JSON array), shown on merge requests.

Each finding carries a fingerprint that survives unrelated edits (`report/fingerprint.py`), so GitLab
tells new findings from those already on the target branch.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Sequence

from trainlint.diagnostics import Diagnostic, Severity
from trainlint.report.fingerprint import fingerprints

if TYPE_CHECKING:
    from trainlint.report.text import SourceLines

SEVERITY = {Severity.ERROR: "critical", Severity.WARNING: "major", Severity.INFO: "info"}


def render(diagnostics: Sequence[Diagnostic], sources: SourceLines) -> str:
    issues = []
    for d, fingerprint in zip(diagnostics, fingerprints(diagnostics, sources)):
        line, _, end_line, _ = d.file_region
        issues.append(
            {
                "type": "issue",
                "check_name": f"{d.code} {d.name}",
                "description": f"{d.code} {d.message}{d.every_step_via()}",
                "content": {"body": f"{d.hint}\n\n{d.url}" if d.hint else d.url},
                "categories": ["Bug Risk"],
                "severity": SEVERITY[d.severity],
                "fingerprint": fingerprint,
                "location": {"path": d.path, "lines": {"begin": line, "end": end_line}},
            }
        )
    return json.dumps(issues, indent=2)
