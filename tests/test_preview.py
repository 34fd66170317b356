"""Rules in preview: off until preview mode is on, then selected like any other rule (as in ruff)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainlint.cli import main
from trainlint.config import ConfigError, Settings, load_settings
from trainlint.lsp.options import parse_options
from trainlint.rules import ALL_RULES, enabled_codes, preview_selected_without_preview

PREVIEW = [r.code for r in ALL_RULES if r.preview]
STABLE_DEFAULT = [r.code for r in ALL_RULES if not r.preview and r.default_enabled]

needs_preview_rule = pytest.mark.skipif(not PREVIEW, reason="no rule is in preview")


@needs_preview_rule
def test_preview_rules_are_off_by_default_and_on_in_preview_mode():
    assert not set(PREVIEW) & set(enabled_codes(Settings()))
    assert not set(PREVIEW) & set(enabled_codes(Settings(select=("ALL",))))
    assert set(PREVIEW) <= set(enabled_codes(Settings(select=("ALL",), preview=True)))
    assert set(STABLE_DEFAULT) <= set(enabled_codes(Settings(preview=True)))


@needs_preview_rule
def test_naming_a_preview_rule_without_preview_warns_and_leaves_it_off(tmp_path: Path):
    code = PREVIEW[0]
    settings = Settings(select=(code,))
    assert enabled_codes(settings) == ()
    assert preview_selected_without_preview(settings) == [code]
    assert preview_selected_without_preview(Settings(select=(code,), preview=True)) == []
    (tmp_path / "a.py").write_text("x = 1\n")
    result = CliRunner().invoke(main, ["check", "--select", code, str(tmp_path / "a.py")])
    assert f"{code} is a preview rule" in result.output
    result = CliRunner().invoke(main, ["check", "--select", code, "--preview", "--show-settings", str(tmp_path / "a.py")])
    assert f'"{code}"' in result.output and "preview = true" in result.output


def test_preview_is_read_from_the_configuration(tmp_path: Path):
    config = tmp_path / "pyproject.toml"
    config.write_text("[tool.trainlint]\npreview = true\n")
    assert load_settings(config).preview is True
    config.write_text('[tool.trainlint]\npreview = "yes"\n')
    with pytest.raises(ConfigError, match="preview: expected bool"):
        load_settings(config)


def test_the_command_line_overrides_the_configured_preview(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text("[tool.trainlint]\npreview = true\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    out = CliRunner().invoke(main, ["check", "--no-preview", "--show-settings", str(tmp_path / "a.py")]).output
    assert "preview = false" in out


def test_the_editor_can_turn_preview_on():
    options = parse_options({"trainlint": {"preview": True}}, None)
    assert options.apply(Settings()).preview is True
    assert parse_options({}, None).apply(Settings(preview=True)).preview is True
    with pytest.raises(ConfigError, match="preview"):
        parse_options({"preview": "on"}, None)


@needs_preview_rule
def test_rules_listing_marks_preview_rules():
    rows = json.loads(CliRunner().invoke(main, ["rules", "--format", "json"]).output)
    by_code = {r["code"]: r for r in rows}
    assert all(by_code[c]["preview"] and not by_code[c]["default"] for c in PREVIEW)
    text = CliRunner().invoke(main, ["rules"]).output
    assert "preview" in text
