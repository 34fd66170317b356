"""`[tool.trainlint]` in pyproject.toml: discovery, validation and the resolved settings."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import re

from trainlint.patterns import glob_matches, in_folder, pattern_folder, relative_to as _relative
from trainlint.reading import resolved

UNUSED_NOQA_CODE = "TL001"  # see trainlint.noqa

KNOWN_KEYS = {
    "select": list,
    "ignore": list,
    "extend-select": list,
    "exclude": list,
    "extend-exclude": list,
    "per-file-ignores": dict,
    "step-functions": list,
    "gate-names": list,
    "max-file-size": int,
    "max-line-length": int,
    "max-nesting": int,
    "max-chain": int,
    "file-timeout": float,
    "file-memory": int,
    "preview": bool,
    "baseline": str,
    "lint-test-code": bool,
    "extend": str,
    "verify-acknowledge": list,
    # ruff's keys for what its command line also sets: `check`'s options win over them
    "output-format": str,
    "cache-dir": str,
    "force-exclude": bool,
}
OUTPUT_FORMATS = ("text", "full", "concise", "json", "json-lines", "sarif", "github", "gitlab", "junit", "lsp")  # (`full`: ruff's name for text)
_SELECTORS = ("select", "ignore", "extend_select", "per_file_ignores")
_POSITIVE = ("max-file-size", "max-line-length", "max-nesting", "max-chain", "file-timeout", "file-memory")
NOTEBOOK_READ_FACTOR = 20  # a notebook may be this many times max-file-size, outputs included
DEFAULT_EXCLUDES = (".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "build", "dist", "site-packages", "__pycache__", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache")


@dataclass(frozen=True)
class Limits:
    """How much nesting and how long a line a file may have before the pre-check refuses it."""

    max_line_length: int = 20_000
    max_nesting: int = 100  # nested brackets
    max_chain: int = 500  # operands or branches chained in one expression or `if` statement


@dataclass
class AnalysisSettings:
    """Project-specific names the analysis should know (from `[tool.trainlint]`)."""

    step_functions: frozenset[str] = frozenset()
    gate_names: frozenset[str] = frozenset()
    lint_test_code: bool = False  # test code (`tests/`, `test_*.py`) checked as training code too


class ConfigError(Exception):
    """An invalid configuration: unknown key, wrong type, unknown rule code."""


@dataclass(frozen=True)
class Settings:
    """Everything a lint run needs to know, after merging pyproject and command-line options."""

    root: Path = field(default_factory=Path.cwd)
    config_path: Path | None = None
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    step_functions: frozenset[str] = frozenset()
    gate_names: frozenset[str] = frozenset()
    max_file_size: int = 5_000_000
    max_line_length: int = 20_000
    max_nesting: int = 100
    max_chain: int = 500
    file_timeout: float = 20.0  # CPU seconds one file's analysis may take
    file_memory: int = 1024  # MB one worker may use on top of its start-up size
    show_steps: bool = False  # report the step scope of each file (`--show-steps`), not cached
    preview: bool = False  # rules still in preview run too (`--preview`, `preview = true`)
    ignore_noqa: bool = False  # `--ignore-noqa`: report what `# noqa` comments suppress
    baseline: Path | None = None  # findings recorded here are not reported (`report/baseline.py`)
    lint_test_code: bool = False  # per-step rules check `tests/` and `test_*.py` too
    verify_acknowledge: tuple[str, ...] = ()  # problem codes of `verify run` that do not fail the run
    output_format: str | None = None  # `output-format`: `check`'s default report (its option wins)
    cache_dir: Path | None = None  # `cache-dir`: where `check` caches (its option and env win)
    force_exclude: bool = False  # `force-exclude`: excludes apply to files named explicitly too
    # where each configured key came from (a file, or the command line), for `--show-settings`
    origins: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def rule_selectors(self) -> tuple[list[str] | None, list[str], list[str]]:
        """The rule selectors (select, ignore, extend-select), without those naming only TL001."""
        return (
            _rule_selectors(self.select) if self.select is not None else None,
            _rule_selectors(self.ignore),
            _rule_selectors(self.extend_select),
        )

    def reports_unused_noqa(self, path: Path | None = None) -> bool:
        """Whether TL001 unused-noqa is selected (off by default, like ruff's RUF100), for `path`'s ignores."""

        def specificity(selectors: tuple[str, ...] | frozenset[str]) -> int:
            return max((len(s) if s != "ALL" else 0 for s in selectors if s == "ALL" or UNUSED_NOQA_CODE.startswith(s)), default=-1)

        on = max(specificity(self.select) if self.select is not None else -1, specificity(self.extend_select))
        off = specificity((*self.ignore, *(self.ignored_for(path) if path is not None else ())))
        return on >= 0 and on > off

    def ignored_for(self, path: Path) -> frozenset[str]:
        """Codes that per-file-ignores switch off for this file (prefixes expanded by the caller).

        Patterns are gitignore globs relative to the folder of the configuration that wrote them, as
        `exclude`'s are; a
        pattern starting with `!` applies its codes to the files it does not match (as in ruff)."""
        out: set[str] = set()
        for pattern, codes in self.per_file_ignores:
            rel = _relative(path, pattern_folder(pattern, self.root))  # (an inherited pattern: its own file's folder)
            negated = pattern.startswith("!")
            if glob_matches(pattern[1:] if negated else pattern, rel) != negated:
                out.update(codes)
        return frozenset(out)

    def read_limit(self, name: str) -> int:
        """The most bytes read of the file `name`: max-file-size, except for a notebook, whose
        outputs (images, logs) are not linted: its code cells are held to max-file-size instead."""
        return self.max_file_size * NOTEBOOK_READ_FACTOR if name.endswith(".ipynb") else self.max_file_size

    def limits(self) -> Limits:
        """What the pre-check refuses before parsing."""
        return Limits(self.max_line_length, self.max_nesting, self.max_chain)

    def analysis(self) -> AnalysisSettings:
        """The names the analysis takes from the configuration."""
        return AnalysisSettings(step_functions=self.step_functions, gate_names=self.gate_names, lint_test_code=self.lint_test_code)


def _rule_selectors(selectors: tuple[str, ...] | list[str]) -> list[str]:
    """Selectors without those naming only TL001 (a code of the suppression layer, not a rule class)."""
    return [s for s in selectors if s == "ALL" or not UNUSED_NOQA_CODE.startswith(s) or any(c.startswith(s) for c in rule_codes_on_disk())]


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


CONFIG_FILES = (".trainlint.toml", "trainlint.toml", "pyproject.toml")  # in one folder, the first found wins


def find_config(start: Path, known: dict[Path, Path | None] | None = None) -> Path | None:
    """The nearest configuration walking up from `start`: a `.trainlint.toml` or `trainlint.toml`, or a
    pyproject.toml with a [tool.trainlint] table (as ruff finds `.ruff.toml`, `ruff.toml`, pyproject.toml).
    `known`: the answers for folders already searched, filled in (a run's folders share their parents,
    and a project's pyproject.toml without a table is read once, not once per folder below it)."""
    here = resolved(start)
    try:
        if here.is_file() or not here.exists():
            here = here.parent
    except OSError:  # a path under an unsearchable folder: start from the folder
        here = here.parent
    known = {} if known is None else known
    searched: list[Path] = []
    found: Path | None = None
    for directory in (here, *here.parents):
        if directory in known:
            found = known[directory]
            break
        searched.append(directory)
        found = _config_in(directory)
        if found is not None:
            break
    for directory in searched:  # (each below the one that answered: the same answer)
        known[directory] = found
    return found


def _config_in(directory: Path) -> Path | None:
    """The configuration file of `directory` itself, if it has one."""
    for name in CONFIG_FILES:
        candidate = directory / name
        if not _is_file(candidate):
            continue
        if name != "pyproject.toml":
            return candidate
        import tomllib  # (only where there is a pyproject.toml to read: start-up)

        try:
            data = tomllib.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return candidate  # let load_settings report what is wrong with it
        if "trainlint" in data.get("tool", {}):
            return candidate
    return None


def _string_list(key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"[tool.trainlint] {key}: expected a list of strings, got {value!r}")
    return tuple(value)


def _checked(table: dict[str, object], where: str) -> dict[str, object]:
    """`table` with every key known and every value of its type; raises ConfigError saying where."""
    for key, value in table.items():
        if key not in KNOWN_KEYS:
            known = ", ".join(sorted(KNOWN_KEYS))
            raise ConfigError(f"{where}: unknown key {key!r} (known keys: {known})")
        expected = (int, float) if KNOWN_KEYS[key] is float else KNOWN_KEYS[key]
        if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
            raise ConfigError(f"{where}: {key}: expected {KNOWN_KEYS[key].__name__}, got {value!r}")
        if key in _POSITIVE and value <= 0:  # type: ignore[operator]
            raise ConfigError(f"{where}: {key}: expected a positive number, got {value!r}")
        if key == "output-format" and value not in OUTPUT_FORMATS:
            raise ConfigError(f"{where}: output-format: expected one of {', '.join(OUTPUT_FORMATS)}, got {value!r}")
    return table


def _file_table(path: Path) -> dict[str, object]:
    """The settings a configuration file holds: a trainlint.toml's whole document, a pyproject's
    [tool.trainlint]; paths in it (`baseline`, `extend`) made absolute from its folder."""
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    table = data.get("tool", {}).get("trainlint", {}) if path.name == "pyproject.toml" else data
    where = f"{path}: [tool.trainlint]" if path.name == "pyproject.toml" else str(path)
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    table = dict(_checked(table, where))
    for key in ("baseline", "extend", "cache-dir"):
        if key in table:
            table[key] = os.path.normpath(path.parent / str(table[key]))
    return table


_ACCUMULATED = ("extend-select", "extend-exclude")  # added to what the extended configuration has


def _merged_table(path: Path, seen: tuple[Path, ...] = ()) -> tuple[dict[str, object], dict[str, str]]:
    """A configuration file's settings over those of the file it `extend`s (recursively), and the file
    each setting came from."""
    if resolved(path) in seen:
        raise ConfigError(f"{path}: `extend` makes a cycle: {' -> '.join(map(str, (*seen, path)))}")
    table = _file_table(path)
    origins = {key: str(path) for key in table if key != "extend"}
    if "extend" not in table:
        return table, origins
    base_path = Path(str(table.pop("extend")))
    if not _is_file(base_path):
        raise ConfigError(f"{path}: extend: {base_path} is not a file")
    base, base_origins = _merged_table(base_path, (*seen, resolved(path)))
    # the base's patterns stay relative to the base's folder, not this file's (as in ruff)
    for key in ("exclude", "extend-exclude"):
        if key in base:
            base[key] = in_folder(base[key], base_path.parent)  # type: ignore[arg-type]
    if "per-file-ignores" in base:
        inherited = base["per-file-ignores"].items()  # type: ignore[attr-defined]
        base["per-file-ignores"] = dict(zip(in_folder([p for p, _ in inherited], base_path.parent), (c for _, c in inherited)))
    for key, value in table.items():
        if key in _ACCUMULATED and key in base:
            value = [*base[key], *value]  # type: ignore[misc]
        base[key] = value
    return base, {**base_origins, **origins}


def parse_inline(text: str) -> dict[str, object]:
    """A `--config KEY = VALUE` override (TOML), checked like a configuration file's keys."""
    import tomllib

    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {text!r}: neither a file nor a TOML `KEY = VALUE` ({exc})") from exc
    table = dict(_checked(table, f"--config {text!r}"))
    # a bad code here is blamed on this option, not on the configuration file it is applied over
    per_file = table.get("per-file-ignores", {})
    validate(
        Settings(
            select=_string_list("select", table["select"]) if "select" in table else None,
            ignore=_string_list("ignore", table.get("ignore", [])),
            extend_select=_string_list("extend-select", table.get("extend-select", [])),
            per_file_ignores=tuple((p, _string_list(f"per-file-ignores.{p!r}", c)) for p, c in per_file.items()),  # type: ignore[attr-defined]
        ),
        where=f"--config {text!r}",
    )
    for key in ("baseline", "cache-dir"):  # (relative to where the command runs)
        if key in table:
            table[key] = str(Path.cwd() / str(table[key]))
    if "extend" in table:
        raise ConfigError(f"--config {text!r}: `extend` belongs in a configuration file")
    return table


def load_settings(config_path: Path | None, inline: Sequence[dict[str, object]] = ()) -> Settings:
    """The settings of a configuration file (and what it extends) with `--config KEY = VALUE` overrides
    on top; defaults when there is no file."""
    table, origins = _merged_table(config_path) if config_path is not None else ({}, {})
    for override in inline:
        table.update(override)
        origins.update({key: "command line (--config)" for key in override})
    per_file: list[tuple[str, tuple[str, ...]]] = []
    for pattern, codes in table.get("per-file-ignores", {}).items():  # type: ignore[attr-defined]
        per_file.append((pattern, _string_list(f"per-file-ignores.{pattern!r}", codes)))
    get = table.get
    settings = Settings(
        root=config_path.parent if config_path is not None else Path.cwd(),
        config_path=config_path,
        select=_string_list("select", table["select"]) if "select" in table else None,
        ignore=_string_list("ignore", get("ignore", [])),
        extend_select=_string_list("extend-select", get("extend-select", [])),
        exclude=_string_list("exclude", get("exclude", [])) + _string_list("extend-exclude", get("extend-exclude", [])),
        per_file_ignores=tuple(per_file),
        step_functions=frozenset(_string_list("step-functions", get("step-functions", []))),
        gate_names=frozenset(_string_list("gate-names", get("gate-names", []))),
        max_file_size=get("max-file-size", Settings.max_file_size),  # type: ignore[arg-type]
        max_line_length=get("max-line-length", Settings.max_line_length),  # type: ignore[arg-type]
        max_nesting=get("max-nesting", Settings.max_nesting),  # type: ignore[arg-type]
        max_chain=get("max-chain", Settings.max_chain),  # type: ignore[arg-type]
        file_timeout=float(get("file-timeout", Settings.file_timeout)),  # type: ignore[arg-type]
        file_memory=get("file-memory", Settings.file_memory),  # type: ignore[arg-type]
        preview=bool(get("preview", False)),
        baseline=Path(str(table["baseline"])) if "baseline" in table else None,
        lint_test_code=bool(get("lint-test-code", False)),
        verify_acknowledge=tuple(c.upper() for c in _string_list("verify-acknowledge", get("verify-acknowledge", []))),
        output_format=str(table["output-format"]) if "output-format" in table else None,
        cache_dir=Path(str(table["cache-dir"])) if "cache-dir" in table else None,
        force_exclude=bool(get("force-exclude", False)),
        origins=tuple(sorted(origins.items())),
    )
    validate(settings)
    return settings


class SettingsResolver:
    """Each file's settings: its nearest configuration (or the one `--config FILE` names, or none with
    `--isolated`), `--config KEY = VALUE` overrides, then the command line's options (`overrides`).
    Loaded once per configuration file; raises ConfigError."""

    def __init__(
        self,
        config_file: Path | None = None,
        inline: Sequence[dict[str, object]] = (),
        isolated: bool = False,
        overrides: Callable[[Settings], Settings] = lambda s: s,
    ) -> None:
        self.config_file, self.inline, self.isolated, self.overrides = config_file, tuple(inline), isolated, overrides
        self._loaded: dict[Path | None, Settings] = {}
        self._by_folder: dict[Path, Path | None] = {}  # a run's files share folders: each is searched once
        self._searched: dict[Path, Path | None] = {}  # (`find_config`'s answers, by folder searched)

    def config_for(self, path: Path) -> Path | None:
        if self.isolated or self.config_file:
            return None if self.isolated else self.config_file
        folder = path.parent
        if folder not in self._by_folder:
            self._by_folder[folder] = find_config(path, self._searched)
        return self._by_folder[folder]

    def for_path(self, path: Path) -> Settings:
        config = self.config_for(path)
        if config not in self._loaded:
            self._loaded[config] = self.overrides(load_settings(config, self.inline))
        return self._loaded[config]


def validate(settings: Settings, where: str | None = None) -> None:
    """Raise ConfigError when a selector names no rule, saying where it was written (`where`, else
    the settings' configuration file, else the command line).

    Checked against the rule modules' file names (`tl101_....py`), so that validating a
    configuration does not import the rules; a test keeps the two lists equal.
    """
    known = rule_codes_on_disk() | {UNUSED_NOQA_CODE}
    checks = [("select", settings.select or ()), ("ignore", settings.ignore), ("extend-select", settings.extend_select)]
    checks += [("per-file-ignores", codes) for _, codes in settings.per_file_ignores]
    for where_in, selectors in checks:
        for s in selectors:
            if s != "ALL" and not any(code.startswith(s) for code in known):
                where = where or settings.config_path or "command line"
                raise ConfigError(
                    f"{where}: {where_in}: {s!r} matches no rule code (codes look like TL101; prefixes like TL4 select a group)"
                )


_RULE_MODULE = re.compile(r"(tl\d+)_\w+\.py$")


def rule_codes_on_disk() -> frozenset[str]:
    """The codes of the rule modules in trainlint/rules, read from their file names."""
    folder = Path(__file__).with_name("rules")
    return frozenset(m.group(1).upper() for name in os.listdir(folder) if (m := _RULE_MODULE.match(name)))


def with_overrides(settings: Settings, **overrides: object) -> Settings:
    """Command-line options win over the file; None means "not given"."""
    given = {k: v for k, v in overrides.items() if v is not None}
    # a bad code given here is blamed on the command line, not on the configuration file
    validate(replace(Settings(), **{k: v for k, v in given.items() if k in _SELECTORS}))  # type: ignore[arg-type]
    origins = dict(settings.origins) | {k.replace("_", "-"): "command line" for k in given}
    merged = replace(settings, **given, origins=tuple(sorted(origins.items())))  # type: ignore[arg-type]
    validate(merged)
    return merged


KEY_HELP = {
    "extend": "Another configuration file (pyproject.toml or trainlint.toml) whose settings this one extends; relative to this file.",
    "select": "Rule codes or prefixes to enable, replacing the defaults (\"ALL\" for every rule).",
    "ignore": "Rule codes or prefixes to disable.",
    "extend-select": "Rule codes or prefixes to enable on top of the selection (e.g. rules that are off by default).",
    "exclude": "Gitignore-style patterns of files and folders to skip, relative to this file's folder (`!` re-includes).",
    "extend-exclude": "Patterns added to `exclude` (handy in a shared base configuration).",
    "per-file-ignores": "Gitignore-style pattern -> codes to disable in matching files; a pattern starting with `!` applies to the files it does not match.",
    "step-functions": "Names of functions an in-house framework calls once per training step.",
    "gate-names": "Names of flags that gate periodic work (logging, evaluation).",
    "max-file-size": "Bytes; larger files get a TL000 diagnostic.",
    "max-line-length": "Characters; a file with a longer line is not parsed (TL000).",
    "max-nesting": "Nested brackets; deeper files are not parsed (TL000).",
    "max-chain": "Operands, calls or elifs chained in one expression or statement before a file is refused (TL000).",
    "file-timeout": "CPU seconds one file's analysis may take (TL000 past it).",
    "file-memory": "MB of memory one worker may use for a file (TL000 past it).",
    "preview": "Run the rules still in preview.",
    "baseline": "A baseline file (written by --write-baseline): findings recorded in it are not reported. Relative to this file.",
    "lint-test-code": "Check test code (tests/, test_*.py) as training code with the per-step rules.",
    "output-format": "How `trainlint check` prints findings when --output-format is not given (text, or ruff's name for it, full; concise, json, ...).",
    "cache-dir": "Where `trainlint check` caches results, relative to this file (--cache-dir and TRAINLINT_CACHE_DIR win).",
    "force-exclude": "Apply excludes to files named explicitly too, as --force-exclude does (for pre-commit and editors).",
    "verify-acknowledge": "Problem codes of `trainlint verify run` (TLR...) that are deliberate: still reported, under Acknowledged, but not failing the run.",
}
_JSON_TYPES = {list: "array", dict: "object", str: "string", int: "integer", float: "number", bool: "boolean"}


def json_schema() -> dict[str, object]:
    """The JSON schema of [tool.trainlint] (and of a trainlint.toml), for editors that complete and check TOML."""
    codes = {"type": "string", "pattern": "^(ALL|TL[0-9]{0,3})$"}
    properties: dict[str, object] = {}
    for key, kind in KNOWN_KEYS.items():
        prop: dict[str, object] = {"description": KEY_HELP[key], "type": _JSON_TYPES[kind]}
        if key in ("select", "ignore", "extend-select"):
            prop["items"] = codes
        elif kind is list:
            prop["items"] = {"type": "string"}
        elif key == "verify-acknowledge":
            prop["items"] = {"type": "string", "pattern": "^TLR[0-9]{3}$"}
        elif key == "per-file-ignores":
            prop["additionalProperties"] = {"type": "array", "items": codes}
        if key in _POSITIVE:
            prop["exclusiveMinimum"] = 0
        if key == "output-format":
            prop["enum"] = list(OUTPUT_FORMATS)
        properties[key] = prop
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "https://raw.githubusercontent.com/trainlint/trainlint/main/trainlint.schema.json",
        "title": "trainlint configuration ([tool.trainlint] in pyproject.toml, or a trainlint.toml)",
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
    }


SCHEMA_FILE = Path(__file__).resolve().parents[1] / "trainlint.schema.json"

if __name__ == "__main__":  # regenerate the published schema: python -m trainlint.config
    import json

    SCHEMA_FILE.write_text(json.dumps(json_schema(), indent=2) + "\n", encoding="utf-8")

