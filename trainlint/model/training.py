"""The training-code model of a module: its facts plus what runs per step.

"Per step" (see the rule pages): the body of a step loop (a loop whose own body backpropagates or
steps an optimizer, directly or through a function of this module), the body of any function called
from per-step code, and framework step hooks (Lightning `training_step`, HF `Trainer.compute_loss`).
Statements under a gate (`if step % n == 0`, `if do_log:`) or in an `except` handler are per step
but not every step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Callable

import libcst as cst

from trainlint.config import AnalysisSettings
from trainlint.model.call_graph import CallGraph
from trainlint.model.chains import StepChains
from trainlint.model.extract import Extractor
from trainlint.model.facts import Assign, Call, ClassInfo, Condition, FormattedValue, Function, Loop, Site
from trainlint.model.hooks import LIBRARY_HOOK_NAMES, LIBRARY_REGISTRY_TOKENS, LIBRARY_STEP_METHODS, library_step_hook
from trainlint.model.lattice import Kind
from trainlint.model.added_methods import attach_added_methods
from trainlint.model.manual_updates import steps_its_items, updated_by_hand, updates_once
from trainlint.model.measuring_loops import measures_passes
from trainlint.model.names import ImportMap, dotted, keyed, star_reader, tokens
from trainlint.model.reaching import ReachingDefinitions
from trainlint.model.symbols import SymbolQueries
from trainlint.model.torchnames import decorated_no_grad, grad_off_decorators, helper_turns_grad_off, literal_string, wraps_under_no_grad
from trainlint.model.branches import branch_not_taken, presence_gate
from trainlint.model.gates import boundary_branches
from trainlint.model.walk import walk

# Libraries that place training on a device by themselves.
ACCELERATOR_LIBRARIES = (
    "accelerate", "deepspeed", "lightning", "pytorch_lightning", "torch_xla", "transformers", "detectron2", "mmengine",
    "mmcv", "composer", "torchtune", "torchtitan", "fairseq", "megatron", "apex",
)
# torch's device APIs (beside `torch.cuda`): a `torch.device` that is not the CPU, Apple's, Intel's
_DEVICE_APIS = ("torch.device", "torch.mps.", "torch.xpu.", "torch.accelerator.", "torch.backends.mps.")
# asking what devices there are puts no work on one (`use_cuda = torch.cuda.is_available()`, unused)
_DEVICE_QUERIES = frozenset({"is_available", "device_count", "get_device_name", "get_device_properties", "get_device_capability", "is_bf16_supported"})

# What a module needs in its text to hold a step of its own: a backward, an optimizer or scaler
# `.step`, a step hook, a loss-scaler call (`loss_scaler(loss, opt)`); see `could_step`.
_STEP_WORDS = ("backward", "scaler", *sorted(LIBRARY_HOOK_NAMES), *LIBRARY_REGISTRY_TOKENS)  # looked for in lower case
LOOP_TEXT = re.compile(r"^[ \t\f]*(?:async[ \t]+)?(?:for|while)\b", re.MULTILINE)  # a loop statement
STEP_CALL_TEXT = re.compile(r"\.[\s\\]*step\b")  # a `.step` attribute, as a call `opt.step()` has it
NOT_OPTIMIZER_WORDS = frozenset({"scheduler", "sched", "lr", "env", "envs", "environment", "sim", "ema"})

if TYPE_CHECKING:
    from trainlint.model.summary import Place, ProjectLookup
OTHER_FRAMEWORKS = ("mxnet", "tensorflow", "jax", "flax", "keras", "paddle", "mindspore", "oneflow")


def could_step(source: str, step_functions: frozenset[str] | tuple[str, ...], imports_project: "Callable[[], bool]") -> bool:
    """Whether a module with this text can hold a training step, so that a per-step rule can fire in it.

    A step loop or step function needs a backward or an optimizer step in the module, a step hook or
    a configured step function by name, a loss-scaler call, or, in a loop, a call into a project
    module that steps (`imports_project()`: whether it imports one; asked last, it reads the disk).
    """
    lowered = source.lower()  # `loss_scaler`, `GradScaler`, `lossScaler`; substring tests are fast
    if any(word in lowered for word in _STEP_WORDS) or any(fn in source for fn in step_functions):
        return True
    if "step" in source and STEP_CALL_TEXT.search(source):
        return True
    return LOOP_TEXT.search(source) is not None and imports_project()


@dataclass(eq=False)
class TrainingModel(SymbolQueries, CallGraph, ReachingDefinitions, StepChains):
    """Facts of one module and the per-step analysis over them."""

    module: cst.Module
    imports: ImportMap
    functions: list[Function]
    loops: list[Loop]
    calls: list[Call]
    assigns: list[Assign]
    conditions: list[Condition]
    formatted: list[FormattedValue]
    settings: AnalysisSettings = field(default_factory=AnalysisSettings)
    classes: list[ClassInfo] = field(default_factory=list)
    comprehensions: list[cst.BaseComp] = field(default_factory=list)
    reads_grads: bool = False  # some code of the module reads a `.grad`
    path: str = ""
    project: "ProjectLookup | None" = None
    # memoised answers of the project phase (the same qualname and call are asked about many times)
    _symbols: dict = field(default_factory=dict, init=False, repr=False)
    _call_summaries: dict = field(default_factory=dict, init=False, repr=False)
    # the index `trainlint.model.fix_safety` builds for this module's fixes, with its answers
    fix_safety_index: object = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def build(
        cls,
        module: cst.Module,
        settings: AnalysisSettings | None = None,
        path: str = "",
        project: "ProjectLookup | None" = None,
    ) -> "TrainingModel":
        """Extract the facts of a module and analyse its training step.

        `path` names the file (test code is recognised by it, and local imports are found from it);
        `project` supplies the summaries of the local modules it imports.
        """
        settings = settings or AnalysisSettings()
        imports = ImportMap(star_reader(module, path, project) if project is not None and path else None)
        extractor = Extractor(imports, settings.gate_names, grad_off_decorators(project, path))
        walk(module, extractor)  # libcst's visit would rebuild every node
        model = cls(
            module=module,
            imports=imports,
            functions=extractor.functions,
            loops=extractor.loops,
            calls=extractor.calls,
            assigns=extractor.assigns,
            conditions=extractor.conditions,
            formatted=extractor.formatted,
            comprehensions=extractor.comprehensions,
            reads_grads=extractor.reads_grads,
            settings=settings,
            classes=extractor.classes,
            path=path,
            project=project,
        )
        model._analyse()
        return model

    # -- step events ---------------------------------------------------------------------------
    def is_optimizer_like(self, text: str | None) -> bool:
        """An object whose value is not known, used as an optimizer or a gradient scaler is: built by
        `torch.optim` here; stepped and also cleared (`zero_grad()`), or also `update()`d after
        scaling a loss (`scale(loss)`): the optimizer's and GradScaler's protocols; or stepped, with at
        most a closure, after a backward pass in the same loop body (or function)."""
        if not text:
            return False
        if set(tokens(text.split(".")[-1])) & NOT_OPTIMIZER_WORDS:
            return False  # (a scheduler or an environment named as one: `lr_scheduler.step()`)
        return text in self.optimizer_names or text in self.duck_optimizers

    @cached_property
    def optimizer_names(self) -> frozenset[str]:
        """Names bound to optimizers built in this module (`opt = torch.optim.AdamW(...)`)."""
        names = set()
        for a in self.assigns:
            if isinstance(a.value, cst.Call):
                qual = self.imports.resolve(a.value.func) or ""
                if qual.startswith("torch.optim.") or (dotted(a.value.func) or "").endswith("Optimizer"):
                    names.update(a.targets)
        # the engine's step() updates weights, whatever the engine is called (`model` often)
        return frozenset(names) | self.engine_names

    @cached_property
    def uses_accelerator(self) -> bool:
        """Whether this module puts work on a device (`.cuda()`, `.to(device)`, `device=`, a launcher).
        A script with no sign of a device runs on the CPU, where reading a tensor waits for nothing. A
        module other modules run every step puts work where their steps do, one whose steps a library
        runs (its trainer places the model on the accelerator there is), and one whose training loops
        another module runs, where that module does."""
        if self._stepped_on_accelerator or any(self.imports.imports_module(m) for m in ACCELERATOR_LIBRARIES):
            return True
        if any(fn.name not in self.settings.step_functions and self._is_hook(fn) for fn in self.functions):
            return True
        cpu_only = self.imports.imports_module("intel_extension_for_pytorch") or any(
            (c.qualname or "").startswith("torch.cpu.amp") for c in self.calls
        )
        for call in self.calls:
            if (call.qualname or "").rpartition(".")[2] in _DEVICE_QUERIES:
                continue
            if call.method == "cuda" or (call.qualname or "").startswith("torch.cuda."):
                return True
            if cpu_only:
                continue
            if call.method == "to" and not (call.node.args and self._cpu_device(call.node.args[0].value, call.site)):
                return True
            if call.qualname == "torch.device" and call.node.args and self._cpu_device(call.node, call.site):
                continue
            if (call.qualname or "").startswith(_DEVICE_APIS):
                return True
            for a in call.node.args:
                if a.keyword is not None and a.keyword.value in ("device", "device_map") and not self._cpu_device(a.value, call.site):
                    return True
        # (`PPO.update`'s loop runs where `agent.update(rollouts)`'s script moves the policy)
        if not cpu_only and self.project is not None and self.path and any(loop.is_step for loop in self.loops):
            return self.project.callers_use_accelerator(self.path)
        return False

    def _cpu_device(self, expr: cst.BaseExpression, site: Site, depth: int = 0) -> bool:
        """`"cpu"`, `torch.device("cpu")`, or a name bound only to those: a device that is the host."""
        if literal_string(expr) is not None:
            return (literal_string(expr) or "").split(":")[0] == "cpu"
        if isinstance(expr, cst.Call) and self.imports.resolve(expr.func) == "torch.device" and expr.args:
            return self._cpu_device(expr.args[0].value, site, depth + 1)
        if isinstance(expr, cst.Name) and depth < 3:
            assigns = self.reaching(site.function, expr.value, site) or self.reaching(None, expr.value, None)
            return bool(assigns) and all(self._cpu_device(a.value, a.site, depth + 1) for a in assigns)
        return False

    @cached_property
    def engine_names(self) -> frozenset[str]:
        """Names bound to DeepSpeed engines: `engine, optimizer, _, _ = deepspeed.initialize(...)`.

        An engine's `step()` updates the weights and clears the gradients itself.
        """
        names = set()
        for a in self.assigns:
            if isinstance(a.value, cst.Call) and a.targets and self.imports.resolve(a.value.func) == "deepspeed.initialize":
                names.add(a.targets[0])
        return frozenset(names)

    def is_backward(self, call: Call) -> bool:
        """`loss.backward()`, `engine.backward(loss)`, `torch.autograd.backward(...)`.

        A `.backward` taking three or more positional arguments is a kernel's (`softmax_cuda.backward(
        grad, out, scale)`), not autograd's, which takes at most the gradient positionally in practice.
        """
        if call.qualname == "torch.autograd.backward":
            return True
        positional = sum(1 for a in call.node.args if a.keyword is None and not a.star)
        return call.method in ("backward", "manual_backward") and positional < 3

    def is_optimizer_step(self, call: Call) -> bool:
        """`optimizer.step()`, `scaler.step(opt)`, `engine.step()`: by what the receiver is, else its name."""
        if call.method != "step" or call.receiver is None:
            return False
        if isinstance(call.receiver, cst.Name) and call.receiver.value in ("self", "cls"):
            # a library base class's own step (`self.step(queries, responses, rewards)` in a trl PPOTrainer)
            fn = call.site.function
            return fn is not None and fn.class_name is not None and library_step_hook("step", self.class_bases(fn), LIBRARY_STEP_METHODS)
        kind = self.values.of(call.receiver, call.site.function, call.site).kind
        if kind in (Kind.OPTIMIZER, Kind.SCALER):
            return True
        if kind is Kind.MODULE:
            return self._engine_steps(call)  # (a DeepSpeed engine is a module that backpropagates and steps)
        if kind in (Kind.SCHEDULER, Kind.DATALOADER, Kind.NUMBER, Kind.COLLECTION):
            return False
        return self.is_optimizer_like(call.receiver_text or keyed(call.receiver)) or self._engine_steps(call)

    def _engine_steps(self, call: Call) -> bool:
        """`engine.backward(loss)` then `engine.step()` in the same function: an object that both
        backpropagates a loss and steps is a training engine (DeepSpeed's), its step the update."""
        return any(
            c.receiver_text == call.receiver_text and c.site.function is call.site.function and c.node.args and self.is_backward(c)
            for c in self.calls_by_method.get("backward", ())
        )

    @cached_property
    def _loop_reach(self) -> frozenset[Function]:
        """Functions of this module that run inside some loop of it (called from a loop, transitively)."""
        return self.called_from(frozenset(self.loops))

    def _may_step(self, call: Call) -> bool:
        """Whether a project call can make a loop of this module a training loop: it sits in a loop, or in a function
        that a loop calls (a model file's calls are never asked about), or calls a method its class inherits from a
        project base in another module (`_train_step` calling the base's `self._update_generator(loss)`: a step)."""
        fn = call.site.function
        return bool(call.site.loops) or (fn is not None and (fn in self._loop_reach or (call.receiver_text == "self" and bool(fn.class_bases) and self.callee(call) is None)))

    def project_steps(self, call: Call) -> bool:
        """A call into the project that updates weights (an imported step helper, a loss scaler)."""
        if not self._may_step(call):
            return False
        summary = self.project_call_summary(call)
        return summary is not None and summary.steps

    def project_backprops(self, call: Call) -> bool:
        if not self._may_step(call):
            return False
        summary = self.project_call_summary(call)
        return summary is not None and (summary.backprops or summary.steps)

    def is_step_event(self, call: Call) -> bool:
        return self.is_backward(call) or self.is_optimizer_step(call)

    def _analyse(self) -> None:
        attach_added_methods(self)  # (`@add_to_class(Trainer)`: before anything reads whose method what is)
        # functions other project modules call on every step (`trainer.py` runs `model(x)`, whose
        # class's `forward` is here), with the chains that reach them from the other files: known
        # before any value is asked, since their parameters' values are what those callers pass
        seeds = self.project.step_seeds(self.path) if self.project is not None and self.path else {}
        self._external_chains: dict[Function, tuple[tuple[Place, ...], ...]] = {}
        self._stepped_on_accelerator = False
        for fn in self.functions if seeds else ():
            seed = seeds.get(fn.qualified) if fn.parent is None else None
            if seed is not None and not fn.runs_once:
                self._external_chains[fn] = seed.chains
                self._stepped_on_accelerator |= seed.accelerator
        replica_loops: dict[int, bool] = {}
        # Functions that update weights (an optimizer step) or backpropagate outside any loop of their
        # own, directly or through such callees, to a fixpoint over calls.
        updating = self._unlooped_closure(
            lambda c: updates_once(self, c, replica_loops),
            updated_by_hand(self),
            any_loop=True,
        )
        backpropagating = self._unlooped_closure(
            lambda c: self.is_step_event(c) or self._runs_any(c, updating) or self.project_backprops(c)
        )
        # A loop that only backpropagates trains when weights are updated in it (by hand through `.grad`) or around it
        # (gradient accumulation), or when this module updates weights nowhere visible (a library does, not a framework's
        # hooks) and it measures nothing (measuring_loops.py). Reading `.grad` alone is an optimizer's or a helper's loop.
        updates_visible = (
            any(self.is_optimizer_step(c) or self.project_steps(c) for c in self.calls)
            or any(loop.uses_grad for loop in self.loops)
            or any(self._is_hook(fn) for fn in self.functions)  # a framework (Lightning, HF) runs the steps
        )
        for loop in self.loops:
            updates = any(
                self.is_optimizer_step(c) or self._runs_any(c, updating) or self.project_steps(c) for c in loop.direct_calls
            )
            backprops = any(
                self.is_backward(c) or self._runs_any(c, backpropagating) or self.project_backprops(c)
                for c in loop.direct_calls
            )
            loop.is_step = updates or (backprops and (loop.uses_grad or not (updates_visible or measures_passes(loop, self.calls, self.callees, self.imports.resolve))))
        # `for opt in optimizers: opt.step()` or a one-round `for _ in range(1):` in a loop: the loop around it trains
        for loop in self.loops:
            if loop.is_step and (loop.runs_once or loop.parent is not None and steps_its_items(self, loop)):
                loop.is_step = False
                if loop.parent is not None:
                    loop.parent.is_step = True
        for loop in self.loops:  # parents come before their children
            if not loop.is_step and loop.parent is not None and loop.parent.is_step:
                loop.is_step = any(self.is_backward(c) or self._runs_any(c, backpropagating) for c in loop.direct_calls)
        # `for batch in loader: trajectory = rollout(batch); for _ in range(ppo_epochs): ...; opt.step()`:
        # a loop over data around a counted inner step loop runs once per training step, not per epoch
        for loop in reversed(self.loops):
            parent = loop.parent
            if loop.is_step and parent is not None and not parent.is_step and loop.counted and self.iterates_loader(parent):
                parent.is_step = True
        # an `if` that holds the optimizer step (an accumulation boundary, `if step % k == 0` of a delayed actor
        # update, an early `continue` before the step) runs every step; a project call under no_grad backpropagates nothing
        self._step_branches: set[int] = set()
        for call in self.calls:
            if self.is_optimizer_step(call) or self._runs_any(call, updating) or (self.project_steps(call) and not call.site.grad_off):
                self._step_branches.update(id(n) for n in call.site.gate_nodes if n is not None)
        self._step_branches |= boundary_branches(self.module, self.calls, self.assigns, self._step_branches)
        # per-step functions: hooks, functions other modules run every step, and callees of ungated per-step code
        per_step = {fn for fn in self.functions if self._is_hook(fn)}
        # a function that updates the weights once per call (an optimizer step outside its own loops),
        # and that nothing here calls (a framework, a caller elsewhere, the user), is one training step
        # (`def train_step(batch)`), whatever its name
        called = {id(f) for c in self.calls for f in self.callees(c)} if updating else set()
        per_step |= {fn for fn in updating if id(fn) not in called and not fn.runs_once and not self.unbuilt_override(fn)}
        per_step |= set(self._external_chains)
        roots = frozenset(per_step)
        changed = True
        while changed:
            changed = False
            for call in self.calls:  # (the site first: most calls are in no step, and need no callees)
                if not self._in_step(call.site, per_step):
                    continue
                reached = [fn for fn in self.callees(call) if fn not in per_step]
                if reached and not self._gated(call.site, per_step):
                    per_step.update(reached)
                    changed = True
        self.step_functions: frozenset[Function] = frozenset(per_step)
        # the calls from per-step code that make each other function per step (for its call chains)
        self._step_callers: dict[Function, list[Call]] = {}
        for call in self.calls:
            if not self._in_step(call.site, per_step):
                continue
            reached = [fn for fn in self.callees(call) if fn in per_step and fn not in roots and fn is not call.site.function]
            if reached and not self._gated(call.site, per_step):
                for fn in reached:
                    self._step_callers.setdefault(fn, []).append(call)

    def _runs_any(self, call: Call, functions: "set[Function] | frozenset[Function]") -> bool:
        """Whether a call may run one of these functions of this module: `f()`, `self.f()`, or a
        method of an object whose class is here, known by its value (`tokenizer.train_step(x)`)."""
        direct = self.callee(call)
        if direct is not None:
            return direct in functions
        if call.qualname is not None:  # (a function of this module handed to another's: `timer(train_step)`)
            return any(f in functions for f in self.passed_functions(call))
        if call.method is not None and call.receiver_text != "self" and not any(f.name == call.method for f in functions):
            return False
        return any(f in functions for f in self.callees(call))  # (a function value too: `step = make_step(...)`)

    def iterates_loader(self, loop: Loop) -> bool:
        """`for batch in loader:`, `for i, b in enumerate(self._dataloader):`: a loop over a data loader,
        known by its value."""
        it = loop.node.iter if isinstance(loop.node, cst.For) else None
        if isinstance(it, cst.Call) and dotted(it.func) in ("enumerate", "zip", "tqdm", "tqdm.tqdm") and it.args:
            it = it.args[0].value
        return it is not None and self.value(it, None, loop.function).kind is Kind.DATALOADER

    def _unlooped_closure(self, event, seed: frozenset[Function] = frozenset(), any_loop: bool = False) -> set[Function]:
        """Functions with a call matching `event` outside their own loops (in any loop, with
        `any_loop`: the event says which loops it allows), or calling such a function (or one of
        `seed`) outside their own loops."""
        found: set[Function] = set(seed)
        changed = True
        while changed:
            changed = False
            for fn in self.functions:
                if fn in found:
                    continue
                for call in fn.calls:
                    if call.site.function is not fn:
                        continue
                    if (not call.site.loops or any_loop) and event(call) or not call.site.loops and self._runs_any(call, found):
                        found.add(fn)
                        changed = True
                        break
        return found

    # -- per-step queries ----------------------------------------------------------------------
    @staticmethod
    def _outermost_step_loop(site: Site) -> int | None:
        for i, loop in enumerate(site.loops):
            if loop.is_step:
                return i
        return None

    def _in_step(self, site: Site, step_functions: set[Function] | frozenset[Function]) -> bool:
        if self.is_test_code or (site.function is not None and site.function.runs_once):
            return False
        if site.function is not None and site.function in step_functions:
            return True
        return self._outermost_step_loop(site) is not None

    def _gated(self, site: Site, step_functions: set[Function] | frozenset[Function]) -> bool:
        if site.in_except or branch_not_taken(self, site) or presence_gate(self, site) is not None:
            return True
        if site.function is not None and site.function in step_functions:
            base = 0
        else:
            index = self._outermost_step_loop(site)
            if index is None:
                return False
            base = index + 1
        return any(
            depth >= base and not (node is not None and id(node) in self._step_branches)
            for depth, node in zip(site.gate_depths, site.gate_nodes or (None,) * len(site.gate_depths))
        )

    def in_step(self, site: Site) -> bool:
        """Whether code at this site runs inside a training step (gated or not)."""
        return self._in_step(site, self.step_functions)

    def every_step(self, site: Site) -> bool:
        """Whether code at this site runs on every training step: per step and not gated."""
        return self._in_step(site, self.step_functions) and not self._gated(site, self.step_functions)

    @cached_property
    def other_framework(self) -> bool:
        """A module of another deep-learning framework (MXNet, TensorFlow, JAX, ...) that does not import
        torch: its `float(loss)` and `.asnumpy()` follow that framework's rules, not PyTorch's."""
        return not self.imports.imports_module("torch") and any(self.imports.imports_module(m) for m in OTHER_FRAMEWORKS)

    @cached_property
    def has_training_step(self) -> bool:
        """Whether this module backpropagates or steps an optimizer anywhere."""
        return any(self.is_step_event(c) for c in self.calls)

    # -- helpers shared by ordering and lifetime rules -----------------------------------------
    @cached_property
    def step_containing_loops(self) -> frozenset[Loop]:
        """Loops that contain a step loop, or call a function that does (epoch loops and step loops)."""
        stepping_fns = {l.function for l in self.loops if l.is_step and l.function is not None}
        out: set[Loop] = set()
        for loop in self.loops:
            node: Loop | None = loop if loop.is_step or any(self._runs_any(c, stepping_fns) or self._runs_any(c, self.step_functions) for c in loop.direct_calls) else None
            while node is not None:
                out.add(node)
                node = node.parent
        return frozenset(out)

    def called_from(self, loops: frozenset[Loop]) -> frozenset[Function]:
        """Functions of this module called (transitively) from inside any of these loops."""
        found: set[Function] = set()
        frontier = [self.called_function(c) for c in self.calls if any(l in loops for l in c.site.loops)]
        while frontier:
            fn = frontier.pop()
            if fn is not None and fn not in found:
                found.add(fn)
                frontier.extend(self.called_function(c) for c in fn.calls)
        return frozenset(found)

    def under(self, site: Site, kind: str) -> bool:
        return any(w.kind == kind or (kind == "no_grad" and helper_turns_grad_off(w, self.functions, self.imports.resolve)) for w in site.withs)

    def under_no_grad_everywhere(self, fn: Function, seen: frozenset[int] = frozenset(), importers: bool = False) -> bool:
        """Whether a function runs without grad: decorated, or every call site of it (of a method no call resolves to, by name:
        `self.policy_old.act(state)`) is under no_grad or in a function of this module that runs without grad (`with
        torch.no_grad(): test(...)`, whose `test` runs the forward), and, for a method (and, for a rule's `importers`, a top-level function), no importer calls it with grad."""
        if decorated_no_grad(fn.decorators) or wraps_under_no_grad(fn, self.functions, self.calls):
            return True
        sites, seen = self._calls_by_callee.get(id(fn), []) or [c for c in self.calls if fn.class_name is not None and c.method == fn.name and c.receiver_text not in (None, "self", "cls", "super()") and not self.of_another_class(c, fn.class_name)], seen | {id(fn)}
        project = self.project if (fn.class_name is not None or (importers and fn.parent is None)) and self.path else None  # (other modules may call it)
        if not sites:  # called only by other modules, each under no_grad (`with torch.no_grad(): acc = net.predict(x)`)
            return project is not None and project.called_with_grad(self.path, fn.name, anywhere=importers) is False
        return all(self.under(c.site, "no_grad") or (c.site.function is not None and id(c.site.function) not in seen and self.under_no_grad_everywhere(
            c.site.function, seen, importers)) for c in sites) and not (project is not None and project.called_with_grad(self.path, fn.name))
