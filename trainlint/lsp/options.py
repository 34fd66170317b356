"""Settings the editor sends: `initializationOptions` and `workspace/didChangeConfiguration`.

Accepted either flat or under a `trainlint` key (VS Code style `settings.trainlint`):

    {"select": ["TL3"], "ignore": ["TL401"], "preview": true, "configPath": "ci/pyproject.toml"}

`select` replaces the project's selection and `ignore` adds to the project's ignores, as the
command line's `--select` / `--ignore` do; `configPath` names the pyproject.toml to use for every
file instead of each file's nearest one (relative paths are taken from the workspace root).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainlint.config import ConfigError, Settings, with_overrides


@dataclass(frozen=True)
class EditorOptions:
    """The editor's overrides; None means "not given" (the project's configuration decides)."""

    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] | None = None
    config_path: Path | None = None
    preview: bool | None = None

    def apply(self, settings: Settings) -> Settings:
        """The project's settings with the editor's select/ignore on top; raises ConfigError."""
        ignore = settings.ignore + self.ignore if self.ignore is not None else None
        return with_overrides(settings, select=self.select, ignore=ignore, preview=self.preview)


def _codes(key: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):  # "TL1,TL302" as on the command line
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"editor setting {key!r}: expected a list of rule codes, got {value!r}")
    return tuple(v.strip() for v in value if v.strip())


def parse_options(raw: Any, root: Path | None) -> EditorOptions:
    """Validate the editor's settings object; raises ConfigError saying what is wrong."""
    if raw is None:
        return EditorOptions()
    if not isinstance(raw, dict):
        raise ConfigError(f"editor settings: expected an object, got {raw!r}")
    if isinstance(raw.get("trainlint"), dict):
        raw = raw["trainlint"]
    config = raw.get("configPath")
    if config is not None and not isinstance(config, str):
        raise ConfigError(f"editor setting 'configPath': expected a path, got {config!r}")
    config_path = None
    if config:
        config_path = Path(config).expanduser()
        if not config_path.is_absolute() and root is not None:
            config_path = root / config_path
        if not config_path.is_file():
            raise ConfigError(f"editor setting 'configPath': {config_path} is not a file")
    preview = raw.get("preview")
    if preview is not None and not isinstance(preview, bool):
        raise ConfigError(f"editor setting 'preview': expected true or false, got {preview!r}")
    options = EditorOptions(_codes("select", raw.get("select")), _codes("ignore", raw.get("ignore")), config_path, preview)
    options.apply(Settings())  # unknown rule codes are reported now, not on every lint
    return options
