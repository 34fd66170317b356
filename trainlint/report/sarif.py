"""`--format sarif`: SARIF 2.1.0, for GitHub code scanning and other CI dashboards.

Every rule of the catalogue is described in `tool.driver.rules` (so a result's `ruleIndex` is stable
between runs); columns are 1-based code points, declared with `columnKind`.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePath
from typing import Sequence

from trainlint import __version__
from trainlint.diagnostics import Diagnostic, Edit, Severity, rule_url, chain_text
from trainlint.noqa import UNUSED_NOQA, UNUSED_NOQA_HINT, UNUSED_NOQA_PAGE, UNUSED_NOQA_SUMMARY
from trainlint.reading import resolved

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/trainlint/trainlint"
LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _rule_descriptors() -> list[dict[str, object]]:
    from trainlint.rules.catalogue import PARSE_ERROR_PAGE, render_page
    from trainlint.rules import ALL_RULES

    out: list[dict[str, object]] = [
        {
            "id": "TL000",
            "name": "parse-error",
            "shortDescription": {"text": "A file that could not be analysed."},
            "fullDescription": {"text": "A syntax error, an undecodable or oversized file, or an unreadable path."},
            "help": {"text": PARSE_ERROR_PAGE, "markdown": PARSE_ERROR_PAGE},
            "helpUri": rule_url("TL000", "parse-error"),
            "defaultConfiguration": {"level": "error"},
        },
        {
            "id": UNUSED_NOQA[0],
            "name": UNUSED_NOQA[1],
            "shortDescription": {"text": UNUSED_NOQA_SUMMARY},
            "fullDescription": {"text": UNUSED_NOQA_SUMMARY},
            "help": {"text": f"{UNUSED_NOQA_SUMMARY} Fix: {UNUSED_NOQA_HINT}", "markdown": UNUSED_NOQA_PAGE},
            "helpUri": rule_url(*UNUSED_NOQA),
            "defaultConfiguration": {"level": "warning", "enabled": False},
        },
    ]
    for rule in ALL_RULES:
        page = render_page(rule)
        out.append(
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": rule.summary},
                "fullDescription": {"text": " ".join(rule.why.split())},
                "help": {"text": f"{rule.summary} Fix: {rule.hint}", "markdown": page},
                "helpUri": rule_url(rule.code, rule.name),
                "defaultConfiguration": {"level": LEVEL[rule.severity], "enabled": rule.default_enabled and not rule.preview},
                "properties": {"tags": ["pytorch", "training"]},
            }
        )
    return out


def _uri(path: str) -> str:
    pure = PurePath(path)
    return resolved(Path(path)).as_uri() if pure.is_absolute() else pure.as_posix()


def _region(line: int, column: int, end_line: int, end_column: int) -> dict[str, int]:
    return {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": max(end_column, column)}


def _replacement(edit: Edit) -> dict[str, object]:
    return {
        "deletedRegion": _region(edit.line, edit.column, edit.end_line, edit.end_column),
        "insertedContent": {"text": edit.content},
    }


def _result(d: Diagnostic, index: dict[str, int]) -> dict[str, object]:
    location = {"physicalLocation": {"artifactLocation": {"uri": _uri(d.path)}, "region": _region(*d.file_region)}}
    result: dict[str, object] = {
        "ruleId": d.code,
        "ruleIndex": index[d.code],
        "level": LEVEL[d.severity],
        "message": {"text": f"{d.message}. Fix: {d.hint}" if d.hint else d.message},
        "locations": [location],
    }
    if d.chains:  # the calls that make the finding's code run every step
        result["relatedLocations"] = [
            {
                "id": i,
                "physicalLocation": {"artifactLocation": {"uri": _uri(loc.path)}, "region": {"startLine": loc.line, "startColumn": loc.column}},
                "message": {"text": f"called every step (runs every step: {chain_text(chain)})"},
            }
            for i, (chain, loc) in enumerate(((c, loc) for c in d.chains for loc in c), start=1)
        ]
    if d.cell is not None:  # a notebook: the region is in its JSON text; say where in which cell
        result["properties"] = {"cell": d.cell, "cellLine": d.line, "cellColumn": d.column}
    elif d.fix is not None:  # (a notebook's fix edits cell sources, not regions of the JSON text)
        result["fixes"] = [
            {
                "description": {"text": f"{d.fix.description} ({d.fix.applicability.value} fix)"},
                "artifactChanges": [
                    {"artifactLocation": {"uri": _uri(d.path)}, "replacements": [_replacement(e) for e in d.fix.edits]}
                ],
            }
        ]
    return result


def render(diagnostics: Sequence[Diagnostic]) -> str:
    rules = _rule_descriptors()
    index = {str(r["id"]): i for i, r in enumerate(rules)}
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "trainlint",
                        "version": __version__,
                        "informationUri": INFORMATION_URI,
                        "rules": rules,
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": [_result(d, index) for d in diagnostics],
            }
        ],
    }
    return json.dumps(log, indent=2)
