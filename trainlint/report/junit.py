"""`--format junit`: a JUnit XML test report (CI systems show it as test results): one test suite per
file linted with findings, one failed test case per finding; a run without findings is one passing case.

Text from the user's files (paths, the code a message quotes) has its control characters written as
escapes, as in the other formats (`visible`): XML 1.0 cannot hold most C0 controls even as character
references, and a report that does not parse loses every finding in it.
"""

from __future__ import annotations

import re
from itertools import groupby
from typing import Sequence
from xml.etree import ElementTree as ET

from trainlint.diagnostics import Diagnostic
from trainlint.report.text import visible

_NON_CHARACTERS = re.compile("[\ufffe\uffff]")  # not in XML either; `visible` keeps them


def _xml(text: str) -> str:
    """`text` as XML can hold it, every control character and non-character as an escape."""
    return _NON_CHARACTERS.sub(lambda m: f"\\u{ord(m.group()):04x}", visible(text))


def render(diagnostics: Sequence[Diagnostic]) -> str:
    root = ET.Element("testsuites", name="trainlint", tests=str(max(1, len(diagnostics))), failures=str(len(diagnostics)))
    if not diagnostics:
        suite = ET.SubElement(root, "testsuite", name="trainlint", tests="1", failures="0")
        ET.SubElement(suite, "testcase", name="trainlint", classname="trainlint")
    for raw_path, group in groupby(diagnostics, key=lambda d: d.path):
        found, path = list(group), _xml(raw_path)
        suite = ET.SubElement(root, "testsuite", name=path, tests=str(len(found)), failures=str(len(found)))
        for d in found:
            where = f"cell {d.cell}, line {d.line}" if d.cell is not None else f"line {d.line}"
            case = ET.SubElement(suite, "testcase", name=f"{d.code} {d.name} ({where}, column {d.column})", classname=path, line=str(d.line))
            failure = ET.SubElement(case, "failure", message=_xml(f"{d.message}{d.every_step_via()}"), type=d.code)
            # (each part escaped alone: the line breaks between them are the report's own)
            failure.text = "\n".join(_xml(part) for part in (f"{raw_path}:{d.line}:{d.column}: {d.code} {d.message}", d.hint, d.url))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")
