"""`--format junit`: a JUnit XML test report (CI systems show it as test results): one test suite per
file linted with findings, one failed test case per finding; a run without findings is one passing case."""

from __future__ import annotations

from itertools import groupby
from typing import Sequence
from xml.etree import ElementTree as ET

from trainlint.diagnostics import Diagnostic


def render(diagnostics: Sequence[Diagnostic]) -> str:
    root = ET.Element("testsuites", name="trainlint", tests=str(max(1, len(diagnostics))), failures=str(len(diagnostics)))
    if not diagnostics:
        suite = ET.SubElement(root, "testsuite", name="trainlint", tests="1", failures="0")
        ET.SubElement(suite, "testcase", name="trainlint", classname="trainlint")
    for path, group in groupby(diagnostics, key=lambda d: d.path):
        found = list(group)
        suite = ET.SubElement(root, "testsuite", name=path, tests=str(len(found)), failures=str(len(found)))
        for d in found:
            where = f"cell {d.cell}, line {d.line}" if d.cell is not None else f"line {d.line}"
            case = ET.SubElement(suite, "testcase", name=f"{d.code} {d.name} ({where}, column {d.column})", classname=path, line=str(d.line))
            failure = ET.SubElement(case, "failure", message=f"{d.message}{d.every_step_via()}", type=d.code)
            failure.text = f"{d.path}:{d.line}:{d.column}: {d.code} {d.message}\n{d.hint}\n{d.url}"
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode")
