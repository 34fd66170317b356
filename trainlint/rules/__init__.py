"""The rule registry: every rule class, in code order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainlint.rules.rule import Rule
from trainlint.rules.tl101_low_precision_params_trained import LowPrecisionParamsTrained
from trainlint.rules.tl102_fp16_autocast_without_scaler import Fp16AutocastWithoutScaler
from trainlint.rules.tl103_scaler_with_bf16 import ScalerWithBf16
from trainlint.rules.tl104_adam_eps_underflows import AdamEpsUnderflows
from trainlint.rules.tl105_backward_under_autocast import BackwardUnderAutocast
from trainlint.rules.tl201_clip_before_unscale import ClipBeforeUnscale
from trainlint.rules.tl203_scaler_step_without_update import ScalerStepWithoutUpdate
from trainlint.rules.tl204_deepspeed_fp16_without_clipping import DeepspeedFp16WithoutClipping
from trainlint.rules.tl205_clip_after_step import ClipAfterStep
from trainlint.rules.tl302_autograd_history_accumulated import AutogradHistoryAccumulated
from trainlint.rules.tl303_eval_forward_with_grad import EvalForwardWithGrad
from trainlint.rules.tl304_allocator_flush_in_step import AllocatorFlushInStep
from trainlint.rules.tl402_device_synchronize_in_step import DeviceSynchronizeInStep
from trainlint.rules.tl404_anomaly_detection_enabled import AnomalyDetectionEnabled
from trainlint.rules.tl405_dataloader_not_pinned import DataLoaderNotPinned
from trainlint.rules.tl406_host_tensor_moved_per_step import HostTensorMovedPerStep
from trainlint.rules.tl501_zero_grad_missing import ZeroGradMissing
from trainlint.rules.tl502_scheduler_before_optimizer import SchedulerBeforeOptimizer
from trainlint.rules.tl503_eval_mode_not_reset import EvalModeNotReset
from trainlint.rules.tl511_validation_in_train_mode import ValidationInTrainMode
from trainlint.rules.tl507_layer_replaced_after_optimizer import LayerReplacedAfterOptimizer
from trainlint.rules.tl508_sampler_epoch_not_set import SamplerEpochNotSet
from trainlint.rules.tl509_probabilities_into_logits_loss import ProbabilitiesIntoLogitsLoss
from trainlint.rules.tl510_ddp_model_moved_after_wrap import DdpModelMovedAfterWrap
from trainlint.rules.tl504_freeze_flag_misspelled import FreezeFlagMisspelled
from trainlint.rules.tl505_dropout_ignores_eval_mode import DropoutIgnoresEvalMode
from trainlint.rules.tl506_submodules_not_registered import SubmodulesNotRegistered
from trainlint.rules.tl202_fp16_without_clipping import Fp16WithoutClipping
from trainlint.rules.tl301_retain_graph_in_loop import RetainGraphInLoop
from trainlint.rules.tl401_host_sync_in_step import HostSyncInStep
from trainlint.rules.tl403_memory_stats_in_step import MemoryStatsInStep

if TYPE_CHECKING:
    from trainlint.config import Settings

ALL_RULES: tuple[type[Rule], ...] = tuple(
    sorted(
        (
            LowPrecisionParamsTrained,
            Fp16WithoutClipping,
            RetainGraphInLoop,
            HostSyncInStep,
            MemoryStatsInStep,
            Fp16AutocastWithoutScaler,
            ScalerWithBf16,
            AdamEpsUnderflows,
            BackwardUnderAutocast,
            ClipBeforeUnscale,
            ScalerStepWithoutUpdate,
            DeepspeedFp16WithoutClipping,
            ClipAfterStep,
            AutogradHistoryAccumulated,
            EvalForwardWithGrad,
            AllocatorFlushInStep,
            DeviceSynchronizeInStep,
            AnomalyDetectionEnabled,
            DataLoaderNotPinned,
            HostTensorMovedPerStep,
            ZeroGradMissing,
            SchedulerBeforeOptimizer,
            EvalModeNotReset,
            ValidationInTrainMode,
            LayerReplacedAfterOptimizer,
            SamplerEpochNotSet,
            ProbabilitiesIntoLogitsLoss,
            DdpModelMovedAfterWrap,
            FreezeFlagMisspelled,
            DropoutIgnoresEvalMode,
            SubmodulesNotRegistered,
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
    select: list[str] | None, ignore: list[str], extend_select: list[str] | None = None, preview: bool = False
) -> list[type[Rule]]:
    """Rules enabled by ruff-style selectors: `select` replaces the defaults, `extend_select` adds to them.

    A rule in preview is enabled only in preview mode (as in ruff); there, its selectors and the
    defaults treat it as any other rule, so `--select ALL --preview` enables every rule."""
    _check_selectors(select or [], "select")
    _check_selectors(ignore, "ignore")
    _check_selectors(extend_select or [], "extend-select")

    def specificity(selectors: list[str], code: str) -> int:
        return max((len(s) if s != "ALL" else 0 for s in selectors if _matches(s, code)), default=-1)

    chosen = []
    for rule in ALL_RULES:
        if rule.preview and not preview:
            continue
        if select is not None:
            on = specificity(select, rule.code)
        else:
            on = 0 if rule.default_enabled else -1
        on = max(on, specificity(extend_select or [], rule.code))
        off = specificity(ignore, rule.code)
        if on >= 0 and on > off:  # a selector and an ignore equally specific: the ignore wins
            chosen.append(rule)
    return chosen


def enabled_codes(settings: Settings) -> tuple[str, ...]:
    """The codes of the rules a configuration enables."""
    return tuple(r.code for r in select_rules(*settings.rule_selectors(), preview=settings.preview))


def preview_selected_without_preview(settings: Settings) -> list[str]:
    """Preview rules a selector names by their exact code while preview mode is off: they stay off."""
    if settings.preview:
        return []
    named = {*(settings.select or ()), *settings.extend_select}
    return sorted(code for code in named if code in RULES_BY_CODE and RULES_BY_CODE[code].preview)
