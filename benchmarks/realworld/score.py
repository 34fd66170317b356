"""Lint the extracted real-code corpus and score the findings against the labels.

    python benchmarks/realworld/score.py [--corpus DIR] [--repo OWNER/NAME ...] [--unlabelled] [--record]

Each repository folder of the corpus (see extract.py) is linted in-process with trainlint's
default rules, the folder being the root. A finding is matched to a label of
labels/<owner>__<name>.jsonl by (path relative to the folder, line, code). Printed: a per-rule
table (findings, labelled true/false, unlabelled, precision, expected positives = labels `tp`
plus `fn`, found, recall), a per-repository table, and the findings new or gone since
last_run.json. `--unlabelled` lists the findings nobody has labelled yet, with code around them;
`--record` rewrites last_run.json (only the entries of the repositories linted). `--recorded FILE`
scores a recorded run instead of linting: with `git show REV:benchmarks/realworld/last_run.json`
it prints an older analysis's table against today's labels (before/after comparisons).

A repository whose manifest entry has `rules = [...]` is labelled for those rules only: its findings
of other rules are dropped before anything is counted, listed or recorded, and a label of another
rule on it stops the run. Repositories without the field are scored on every finding, as before.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from extract import HERE, SPLITS, RepoSpec, default_corpus, load_manifest  # noqa: E402

from trainlint.config import Settings  # noqa: E402
from trainlint.engine.discovery import discover  # noqa: E402
from trainlint.engine.lint import lint_paths  # noqa: E402

LABELS = HERE / "labels"
LAST_RUN = HERE / "last_run.json"
VERDICTS = ("tp", "fp", "fn")
Key = tuple[str, str, int, str]  # (repo, path relative to the repo folder, line, code)


@dataclass(frozen=True)
class Finding:
    """A finding reduced to what labels match on, plus its message for people reading lists."""

    repo: str
    path: str
    line: int
    code: str
    message: str
    # how many findings the run reported on this key (one label covers them all), and the calls
    # (path, line) that make a finding in a helper run every step, the last call of each chain: what
    # the tests read to hold one finding per statement and no sync reported in a helper and at its call
    repeats: int = field(default=1, compare=False)
    callers: tuple[tuple[str, int], ...] = field(default=(), compare=False)

    @property
    def key(self) -> Key:
        return (self.repo, self.path, self.line, self.code)


@dataclass(frozen=True)
class Label:
    """One line of a labels file."""

    repo: str
    path: str
    line: int
    code: str
    verdict: str
    reason: str

    @property
    def key(self) -> Key:
        return (self.repo, self.path, self.line, self.code)


def scored(spec: RepoSpec, code: str) -> bool:
    """Whether the repository's findings of this rule are labelled: all are, unless its manifest
    entry names the rules its labels cover (`rules = [...]`)."""
    return spec.rules is None or code in spec.rules


def load_labels(spec: RepoSpec, folder: Path = LABELS) -> dict[Key, Label]:
    """The repository's labels by key; a malformed line, or a label of a rule the manifest entry
    does not say is labelled there, stops the run with its position."""
    path = folder / f"{spec.folder}.jsonl"
    labels: dict[Key, Label] = {}
    if not path.is_file():
        return labels
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            raw = json.loads(text)
            label = Label(spec.name, raw["path"], int(raw["line"]), raw["code"], raw["verdict"], raw.get("reason", ""))
        except (ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"{path}:{number}: not a label ({exc})")
        if label.verdict not in VERDICTS:
            raise SystemExit(f"{path}:{number}: verdict must be one of {', '.join(VERDICTS)}")
        if not scored(spec, label.code):
            raise SystemExit(f"{path}:{number}: {label.code} is not among the rules labelled on {spec.name} (manifest `rules`)")
        if label.key in labels:
            raise SystemExit(f"{path}:{number}: a second label for {label.path}:{label.line} {label.code}")
        labels[label.key] = label
    return labels


def lint_repo(folder: Path, spec: RepoSpec, jobs: int) -> list[Finding]:
    """Findings of the default rules and of those in preview (measured here before they join the
    defaults) on one extracted repository, its folder being the root; on a repository labelled for
    some rules only (`rules` in the manifest), those rules' findings alone."""
    # a repository labelled for some rules only runs those alone: its other findings are not scored
    settings = Settings(root=folder, preview=True, select=spec.rules)
    targets = [t.path for t in discover([folder], folder)]
    # and a file the manifest names whatever its suffix (a script `train`), as when named on the command line
    targets += [folder / p for p in spec.paths if p not in (".", "") and (folder / p).is_file() and folder / p not in targets]
    results = lint_paths([(path, settings) for path in targets], jobs)
    seen: dict[Key, Finding] = {}
    for result in results:
        for d in result.diagnostics:
            if not scored(spec, d.code):
                continue
            rel = _relative(d.path, folder)
            callers = tuple(sorted({(_relative(c[-1].path, folder), c[-1].line) for c in d.chains if c}))
            finding = Finding(spec.name, rel, d.line, d.code, d.message, callers=callers)
            if finding.key in seen:  # two findings on one line share one label
                first = seen[finding.key]
                seen[finding.key] = replace(first, repeats=first.repeats + 1, callers=tuple(sorted({*first.callers, *callers})))
            else:
                seen[finding.key] = finding
    return sorted(seen.values(), key=lambda f: f.key)


def _relative(path: str, folder: Path) -> str:
    """A reported path relative to the repository folder (as given if outside it)."""
    try:
        return Path(path).resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        return path


def _ratio(part: int, whole: int) -> str:
    return f"{part / whole:.2f}" if whole else "-"


def rule_table(findings: list[Finding], labels: dict[Key, Label]) -> list[list[str]]:
    """Rows of the per-rule table, a totals row last."""
    found_keys = {f.key for f in findings}
    stats: dict[str, Counter] = defaultdict(Counter)
    for f in findings:
        verdict = labels[f.key].verdict if f.key in labels else None
        stats[f.code]["findings"] += 1
        if verdict in ("tp", "fn"):  # an `fn` the linter now reports is a true finding
            stats[f.code]["true"] += 1
        elif verdict == "fp":
            stats[f.code]["false"] += 1
        else:
            stats[f.code]["unlabelled"] += 1
    for label in labels.values():
        if label.verdict in ("tp", "fn"):
            stats[label.code]["expected"] += 1
            stats[label.code]["found"] += label.key in found_keys
    rows = []
    total: Counter = Counter()
    for code in sorted(stats):
        s = stats[code]
        total.update(s)
        rows.append(_row(code, s))
    rows.append(_row("total", total))
    return rows


def _row(name: str, s: Counter) -> list[str]:
    return [
        name,
        str(s["findings"]),
        str(s["true"]),
        str(s["false"]),
        str(s["unlabelled"]),
        _ratio(s["true"], s["true"] + s["false"]),
        str(s["expected"]),
        str(s["found"]),
        _ratio(s["found"], s["expected"]),
    ]


def repo_table(specs: list[RepoSpec], findings: list[Finding], labels: dict[Key, Label], lines: dict[str, int]) -> list[list[str]]:
    """Rows of the per-repository table."""
    rows = []
    for spec in specs:
        mine = [f for f in findings if f.repo == spec.name]
        verdicts = Counter(labels[f.key].verdict if f.key in labels else "unlabelled" for f in mine)
        misses = sum(1 for l in labels.values() if l.repo == spec.name and l.verdict == "fn")
        rows.append([spec.name, str(lines.get(spec.name, 0)), str(len(mine)), str(verdicts["tp"] + verdicts["fn"]), str(verdicts["fp"]), str(verdicts["unlabelled"]), str(misses)])
    return rows


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))


def _context(folder: Path, path: str, line: int, around: int = 2) -> list[str]:
    try:
        text = (folder / path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    lo, hi = max(1, line - around), min(len(text), line + around)
    return [f"{'>' if n == line else ' '}{n:6} | {text[n - 1]}" for n in range(lo, hi + 1)]


def print_unlabelled(corpus: Path, specs: list[RepoSpec], findings: list[Finding], labels: dict[Key, Label]) -> None:
    folders = {s.name: corpus / s.folder for s in specs}
    todo = [f for f in findings if f.key not in labels]
    print(f"\n{len(todo)} unlabelled findings")
    for f in todo:
        print(f"\n{f.repo} {f.path}:{f.line} {f.code} {f.message}")
        for text in _context(folders[f.repo], f.path, f.line):
            print(text)


def print_diff(findings: list[Finding], labels: dict[Key, Label], repos: set[str]) -> None:
    """Findings new or gone since last_run.json, restricted to the repositories linted now."""
    if not LAST_RUN.is_file():
        print("\nno last_run.json yet: run with --record to make one")
        return
    before = json.loads(LAST_RUN.read_text(encoding="utf-8"))
    old = {(repo, p, l, c): m for repo, rows in before.get("findings", {}).items() if repo in repos for p, l, c, m in rows}
    now = {f.key: f.message for f in findings}
    new = sorted(set(now) - set(old))
    gone = sorted(set(old) - set(now))
    print(f"\nsince last_run.json: {len(new)} new, {len(gone)} gone")
    for sign, keys, messages in (("+", new, now), ("-", gone, old)):
        for key in keys:
            label = labels.get(key)
            verdict = f"[{label.verdict}: {label.reason}]" if label else "[unlabelled]"
            print(f"  {sign} {key[0]} {key[1]}:{key[2]} {key[3]} {verdict}")


def recorded_findings(path: Path, specs: list[RepoSpec]) -> list[Finding]:
    """The findings a recorded run file holds for these repositories (those of the rules they are
    labelled for, where the manifest names them)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = data.get("findings", {})
    return sorted(
        (Finding(s.name, p, l, c, m) for s in specs for p, l, c, m in rows.get(s.name, []) if scored(s, c)),
        key=lambda f: f.key,
    )


def print_errors(findings: list[Finding], labels: dict[Key, Label], repos: set[str]) -> None:
    """The false findings still reported, and the true ones (`tp` or `fn` labels) not found."""
    found = {f.key for f in findings}
    false = [f for f in findings if (l := labels.get(f.key)) is not None and l.verdict == "fp"]
    missed = [l for l in labels.values() if l.repo in repos and l.verdict in ("tp", "fn") and l.key not in found]
    print(f"\nfalse findings still reported: {len(false)}")
    for f in false:
        print(f"  {f.repo} {f.path}:{f.line} {f.code} [{labels[f.key].reason}]")
    print(f"\nexpected findings missed: {len(missed)}")
    for l in sorted(missed, key=lambda l: l.key):
        print(f"  {l.repo} {l.path}:{l.line} {l.code} [{l.verdict}: {l.reason}]")


def record(findings: list[Finding], repos: set[str]) -> None:
    """Rewrite last_run.json: the linted repositories' findings replace their previous entries."""
    data = json.loads(LAST_RUN.read_text(encoding="utf-8")) if LAST_RUN.is_file() else {}
    table = {repo: rows for repo, rows in data.get("findings", {}).items() if repo not in repos}
    details = {repo: rows for repo, rows in data.get("details", {}).items() if repo not in repos}
    for repo in repos:
        table[repo] = [[f.path, f.line, f.code, f.message] for f in findings if f.repo == repo]
        # [path, line, code, findings on that key, [[caller path, caller line], ...]] where either says something
        details[repo] = [
            [f.path, f.line, f.code, f.repeats, [list(c) for c in f.callers]]
            for f in findings if f.repo == repo and (f.repeats > 1 or f.callers)
        ]
    out = {"findings": dict(sorted(table.items())), "details": dict(sorted(details.items()))}
    LAST_RUN.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"\nrecorded {sum(len(r) for r in table.values())} findings in {LAST_RUN.name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=None, help="where the repositories are extracted (default: per split)")
    parser.add_argument("--repo", action="append", help="only this repository (repeatable)")
    parser.add_argument("--unlabelled", action="store_true", help="list unlabelled findings with code context")
    parser.add_argument("--record", action="store_true", help="rewrite last_run.json with this run's findings")
    parser.add_argument("--errors", action="store_true", help="list the false findings still reported and the expected ones missed")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--recorded",
        type=Path,
        metavar="RUN_JSON",
        help="score the findings of a recorded run (a last_run.json, e.g. from git history) instead of linting",
    )
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default="main",
        help="`sealed`: the sealed split's manifest and labels (extract it with `extract.py --split sealed`); run it once, at the end",
    )
    args = parser.parse_args(argv)
    args.corpus = args.corpus or default_corpus(args.split)
    if args.recorded and args.record:
        parser.error("--recorded scores an old run; it cannot be --record-ed")
    if args.split != "main" and args.record:
        parser.error("--record writes the main set's last_run.json; the sealed split joins that set after it is scored")
    label_folder = LABELS if args.split == "main" else SPLITS[args.split]
    specs = load_manifest(SPLITS[args.split] / "manifest.toml")
    if args.repo:
        unknown = set(args.repo) - {s.name for s in specs}
        if unknown:
            parser.error(f"not in the manifest: {', '.join(sorted(unknown))}")
        specs = [s for s in specs if s.name in args.repo]
    findings: list[Finding] = []
    labels: dict[Key, Label] = {}
    lines: dict[str, int] = {}
    linted: list[RepoSpec] = []
    for spec in specs:
        folder = args.corpus / spec.folder
        if args.recorded is None and not folder.is_dir():
            print(f"skipped {spec.name}: {folder} is missing (run extract.py)", file=sys.stderr)
            continue
        linted.append(spec)
        labels.update(load_labels(spec, label_folder))
        if args.recorded is None:
            findings.extend(lint_repo(folder, spec, args.jobs))
        lines[spec.name] = sum(p.read_bytes().count(b"\n") for p in folder.rglob("*.py") if p.is_file()) if folder.is_dir() else 0  # (a folder may be named `x.py`)
    if args.recorded is not None:
        findings = recorded_findings(args.recorded, linted)
    header = ["rule", "findings", "true", "false", "unlabelled", "precision", "expected", "found", "recall"]
    print_table(header, rule_table(findings, labels))
    print()
    print_table(["repo", "lines", "findings", "true", "false", "unlabelled", "fn labels"], repo_table(linted, findings, labels, lines))
    found = {f.key for f in findings}
    stale = [l for l in labels.values() if l.verdict == "fp" and l.key not in found]
    if stale:
        print(f"\n{len(stale)} `fp` labels match no finding any more (the false positive is gone)")
    repos = {s.name for s in linted}
    print_diff(findings, labels, repos)
    if args.unlabelled:
        print_unlabelled(args.corpus, linted, findings, labels)
    if args.errors:
        print_errors(findings, labels, repos)
    if args.record:
        record(findings, repos)
    return 0


if __name__ == "__main__":
    sys.exit(main())
