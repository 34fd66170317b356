"""The rule registry: every rule class, in code order."""

from __future__ import annotations

from trainlint.rule import Rule
from trainlint.rules.tl101_low_precision_params_trained import LowPrecisionParamsTrained
from trainlint.rules.tl202_fp16_without_clipping import Fp16WithoutClipping
from trainlint.rules.tl301_retain_graph_in_loop import RetainGraphInLoop
from trainlint.rules.tl401_host_sync_in_step import HostSyncInStep
from trainlint.rules.tl403_memory_stats_in_step import MemoryStatsInStep

ALL_RULES: tuple[type[Rule], ...] = tuple(
    sorted(
        (
            LowPrecisionParamsTrained,
            Fp16WithoutClipping,
            RetainGraphInLoop,
            HostSyncInStep,
            MemoryStatsInStep,
        ),
        key=lambda r: r.code,
    )
)
RULES_BY_CODE: dict[str, type[Rule]] = {r.code: r for r in ALL_RULES}


class SelectionError(ValueError):
    """A code or prefix in select/ignore that names no rule."""


def _matches(selector: str, code: str) -> bool:
    return selector == "ALL" or code.startswith(selector)


def _check_selectors(selectors: list[str], where: str) -> None:
    for s in selectors:
        if s != "ALL" and not any(code.startswith(s) for code in RULES_BY_CODE):
            raise SelectionError(f"{where}: {s!r} matches no rule code (codes look like TL101; prefixes like TL4 select a group)")


def select_rules(
    select: list[str] | None, ignore: list[str], extend_select: list[str] | None = None
) -> list[type[Rule]]:
    """Rules enabled by ruff-style selectors: `select` replaces the defaults, `extend_select` adds to them."""
    _check_selectors(select or [], "select")
    _check_selectors(ignore, "ignore")
    _check_selectors(extend_select or [], "extend-select")

    def specificity(selectors: list[str], code: str) -> int:
        return max((len(s) if s != "ALL" else 0 for s in selectors if _matches(s, code)), default=-1)

    chosen = []
    for rule in ALL_RULES:
        if select is not None:
            on = specificity(select, rule.code)
        else:
            on = 0 if rule.default_enabled else -1
        on = max(on, specificity(extend_select or [], rule.code))
        off = specificity(ignore, rule.code)
        if on >= 0 and on > off:  # a selector and an ignore equally specific: the ignore wins
            chosen.append(rule)
    return chosen
