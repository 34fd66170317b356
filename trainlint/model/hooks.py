"""Library step hooks (methods a training library calls once per step), the words that mark a
class as a framework's internals, and the paths that mark a file as test code."""

from __future__ import annotations

from typing import Any, Callable


# What a library's trainer calls once per training step, by the library and the class users derive
# from (resolved through the subclass's imports and its project bases, in any module): facts of
# the library's API, not guesses from names.
_LIGHTNING_MODULE = frozenset(
    {
        "training_step", "training_step_end", "on_train_batch_start", "on_train_batch_end", "on_before_backward",
        "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad", "optimizer_step", "backward",
        "optimizer_zero_grad",
    }
)
_LIGHTNING_CALLBACK = frozenset(
    {"on_train_batch_start", "on_train_batch_end", "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad"}
)
_HF_TRAINER = frozenset({"compute_loss", "training_step"})
_HF_CALLBACK = frozenset({"on_step_begin", "on_step_end", "on_substep_end", "on_pre_optimizer_step", "on_optimizer_step"})
_PREFERENCE_TRAINER = _HF_TRAINER | {"get_batch_loss_metrics"}  # its `compute_loss` calls this every step
# coqui's `trainer` package: `Trainer.train_step` calls the model's `train_step` (or its `optimize`)
# and `format_batch`/`format_batch_on_device` for each batch
_COQUI_MODEL = frozenset({"train_step", "optimize", "format_batch", "format_batch_on_device", "on_train_step_start", "on_train_step_end"})
# trl's `PPOTrainer.step(queries, responses, scores)` (trl up to 0.11) runs the PPO update: it calls
# these once per step (the forward passes of policy and reference, the minibatch updates)
_TRL_PPO = frozenset({"batched_forward_pass", "compute_rewards", "compute_advantages", "train_minibatch", "loss", "record_step_stats"})
LIBRARY_STEP_HOOKS: dict[tuple[str, str], frozenset[str]] = {
    ("lightning", "LightningModule"): _LIGHTNING_MODULE,
    ("pytorch_lightning", "LightningModule"): _LIGHTNING_MODULE,
    ("lightning", "Callback"): _LIGHTNING_CALLBACK,
    ("pytorch_lightning", "Callback"): _LIGHTNING_CALLBACK,
    ("transformers", "Trainer"): _HF_TRAINER,
    ("transformers", "Seq2SeqTrainer"): _HF_TRAINER,
    ("transformers", "TrainerCallback"): _HF_CALLBACK,
    **{("trl", name): _PREFERENCE_TRAINER for name in ("DPOTrainer", "CPOTrainer", "ORPOTrainer", "KTOTrainer", "BCOTrainer")},
    **{("trl", name): _HF_TRAINER for name in ("SFTTrainer", "RewardTrainer", "GRPOTrainer", "PRMTrainer", "GKDTrainer")},
    ("trl", "PPOTrainer"): _TRL_PPO,
    ("trainer", "TrainerModel"): _COQUI_MODEL,
    ("detectron2", "HookBase"): frozenset({"before_step", "after_step"}),
    ("detectron2", "TrainerBase"): frozenset({"run_step"}),
    ("mmengine", "Hook"): frozenset({"before_train_iter", "after_train_iter"}),
}
LIBRARY_HOOK_NAMES = frozenset().union(*LIBRARY_STEP_HOOKS.values())
# A library's model registries whose classes its trainer runs every step: detectron2's `build_model`
# builds the class `cfg.MODEL.META_ARCHITECTURE` names from `META_ARCH_REGISTRY`, and the `run_step`
# of its trainers (`SimpleTrainer`, `AMPTrainer`, and `DefaultTrainer` through them) calls
# `self.model(data)` for every batch: the registered class's `forward`, in training mode.
LIBRARY_REGISTRY_STEP_HOOKS: dict[tuple[str, str], frozenset[str]] = {("detectron2", "META_ARCH_REGISTRY"): frozenset({"forward"})}
LIBRARY_REGISTRY_HOOK_NAMES = frozenset().union(*LIBRARY_REGISTRY_STEP_HOOKS.values())
# A library's builders that build the class its registry holds under the name a configuration gives
# (detectron2's `build_sem_seg_head(cfg, shape)` builds `SEM_SEG_HEADS_REGISTRY.get(name)(cfg, shape)`):
# what they return is one of the project's classes registered there, as "library.REGISTRY".
LIBRARY_REGISTRY_BUILDERS: dict[tuple[str, str], str] = {
    ("detectron2", builder): f"detectron2.{registry}"
    for builder, registry in (
        ("build_model", "META_ARCH_REGISTRY"), ("build_backbone", "BACKBONE_REGISTRY"), ("build_sem_seg_head", "SEM_SEG_HEADS_REGISTRY"),
        ("build_roi_heads", "ROI_HEADS_REGISTRY"), ("build_proposal_generator", "PROPOSAL_GENERATOR_REGISTRY"),
        ("build_box_head", "ROI_BOX_HEAD_REGISTRY"), ("build_mask_head", "ROI_MASK_HEAD_REGISTRY"),
        ("build_keypoint_head", "ROI_KEYPOINT_HEAD_REGISTRY"), ("build_rpn_head", "RPN_HEAD_REGISTRY"),
    )
}
# (lower case, for the prefilter: a module that registers a class in one can hold a step hook)
LIBRARY_REGISTRY_TOKENS = tuple(sorted({name.lower() for _, name in LIBRARY_REGISTRY_STEP_HOOKS}))
# Attributes a library's trainer calls once per step: the HF `Trainer`'s `compute_loss` calls
# `self.compute_loss_func(outputs, labels, num_items_in_batch=...)` when it is set (transformers 4.46+),
# so a function a subclass binds there (`self.compute_loss_func = dft_loss_func`) runs every step.
_HF_LOSS_FUNC = frozenset({"compute_loss_func"})
LIBRARY_HOOK_ATTRIBUTES: dict[tuple[str, str], frozenset[str]] = {
    **{("transformers", name): _HF_LOSS_FUNC for name in ("Trainer", "Seq2SeqTrainer")},
    **{("trl", name): _HF_LOSS_FUNC for name in ("SFTTrainer", "RewardTrainer", "GRPOTrainer", "PRMTrainer", "GKDTrainer")},
}
# What a library runs with autograd off: its evaluation hooks (Lightning wraps `validation_step` in
# `torch.no_grad()`; the HF `Trainer`'s `prediction_step` runs under it, and `evaluate` drives it).
_LIGHTNING_NO_GRAD = frozenset({"validation_step", "test_step", "predict_step"})
_HF_NO_GRAD = frozenset({"evaluate", "evaluation_loop", "prediction_step", "predict"})
LIBRARY_NO_GRAD_HOOKS: dict[tuple[str, str], frozenset[str]] = {
    ("lightning", "LightningModule"): _LIGHTNING_NO_GRAD,
    ("pytorch_lightning", "LightningModule"): _LIGHTNING_NO_GRAD,
    **{("transformers", name): _HF_NO_GRAD for name in ("Trainer", "Seq2SeqTrainer")},
    **{("trl", name): _HF_NO_GRAD for name in ("DPOTrainer", "CPOTrainer", "ORPOTrainer", "KTOTrainer", "SFTTrainer", "RewardTrainer", "GRPOTrainer", "PPOTrainer")},
}
# A library's own methods that perform a whole training step when a subclass calls them on itself
# (`stats = self.step(queries, responses, rewards)` in a `PPOTrainer` subclass's loop).
LIBRARY_STEP_METHODS: dict[tuple[str, str], frozenset[str]] = {("trl", "PPOTrainer"): frozenset({"step"})}
# What a library's trainer passes to a hook's parameter: the result of another method of the same
# object (coqui's `Trainer` calls `model.train_step(batch, criterion)` with `model.get_criterion()`).
LIBRARY_HOOK_ARGUMENTS: dict[tuple[str, str], dict[tuple[str, str], str]] = {
    ("trainer", "TrainerModel"): {("train_step", "criterion"): "get_criterion", ("optimize", "criterion"): "get_criterion"},
}

# The hook parameters a library passes its model to (the wrapped model of an HF or trl `Trainer`).
LIBRARY_MODEL_PARAMETERS: dict[tuple[str, str], frozenset[tuple[str, str]]] = {
    (library, trainer): frozenset({("compute_loss", "model"), ("training_step", "model"), ("prediction_step", "model")})
    for library, trainer in (("transformers", "Trainer"), ("trl", "SFTTrainer"), ("trl", "DPOTrainer"), ("trl", "RewardTrainer"))
}

# A hook parameter that a library sets to each of several values within one step: coqui's Trainer
# calls `model.train_step(batch, criterion, optimizer_idx)` once per optimizer, and Lightning's
# multi-optimizer `training_step(batch, batch_idx, optimizer_idx)` likewise, so `if optimizer_idx ==
# 0:` selects the generator's pass, which runs every step: no gate (the names are the APIs').
LIBRARY_PASS_INDEXES: dict[str, frozenset[str]] = {
    "train_step": frozenset({"optimizer_idx"}),  # coqui's TrainerModel
    "optimize": frozenset({"optimizer_idx"}),
    "training_step": frozenset({"optimizer_idx"}),  # Lightning before 2.0
}


def pass_indexes(method: str, params: tuple[str, ...]) -> frozenset[str]:
    """The parameters of hook `method` that index a pass within one step (never a step counter)."""
    return LIBRARY_PASS_INDEXES.get(method, frozenset()).intersection(params)


def library_argument(method: str, parameter: str, bases: tuple[str, ...]) -> str | None:
    """The method of the same object whose result a library passes for `parameter` of hook `method`."""
    for base in bases:
        root, _, rest = base.partition(".")
        passed = LIBRARY_HOOK_ARGUMENTS.get((root, rest.rsplit(".", 1)[-1])) if rest else None
        if passed is not None and (method, parameter) in passed:
            return passed[(method, parameter)]
    return None


def library_model_parameter(method: str, parameter: str, bases: tuple[str, ...]) -> bool:
    """Whether a library passes its model to `parameter` of hook `method` of a class with these bases."""
    for base in bases:
        root, _, rest = base.partition(".")
        if (method, parameter) in LIBRARY_MODEL_PARAMETERS.get((root, rest.rsplit(".", 1)[-1]), ()):
            return True
    return False


def library_step_hook(method: str, bases: tuple[str, ...], table: dict[tuple[str, str], frozenset[str]] = LIBRARY_STEP_HOOKS) -> bool:
    """Whether a library calls `method` of a class with these bases (as imports spell them) every step
    (with `table=LIBRARY_STEP_METHODS`: whether the library's own `method` performs a step)."""
    for base in bases:
        root, _, rest = base.partition(".")
        hooks = table.get((root, rest.rsplit(".", 1)[-1])) if rest else None
        if hooks is not None and method in hooks:
            return True
    return False


def library_registry(builder: str | None) -> str | None:
    """The library registry ("detectron2.SEM_SEG_HEADS_REGISTRY") whose class a library function
    (as imports spell it: `detectron2.modeling.build_sem_seg_head`) builds, or None."""
    root, _, rest = (builder or "").partition(".")
    return LIBRARY_REGISTRY_BUILDERS.get((root, rest.rpartition(".")[2])) if rest else None


def registered_hook(method: str, class_name: str, local_class: "Callable[[str], Any]", resolve: "Callable[[Any], str | None]") -> bool:
    """Whether a library's trainer calls `method` of the module's class `class_name` (its `ClassInfo`
    found by `local_class`, asked only for a method a registry's classes have run) every step because its
    decorators register it in one of the library's model registries (`@META_ARCH_REGISTRY.register()`,
    its name resolved through the module's imports)."""
    info = local_class(class_name) if method in LIBRARY_REGISTRY_HOOK_NAMES else None
    if info is None:
        return False
    registries = []
    for decorator in info.node.decorators:
        func = getattr(decorator.decorator, "func", None)
        if type(func).__name__ == "Attribute" and func.attr.value == "register":
            registries.append(resolve(func.value) or "")
    return library_step_hook(method, tuple(registries), LIBRARY_REGISTRY_STEP_HOOKS)


# classes of frameworks that implement steps for their users' loops
FRAMEWORK_WORDS = frozenset(
    """precision plugin strategy accelerator callback algorithm hook trainer loop engine wrapper optimizer
    scaler mixin amp connector""".split()
)
