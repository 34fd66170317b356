"""Per-module summaries: what each function and class of a module does, for the modules that import it.

A summary says what calling a function does (updates weights, backpropagates, clears gradients,
clips, scales the loss, waits for the device, reads its tensor arguments on the host, returns a
cast model or a host tensor), so that a step loop in `train.py` whose step, loss scaler or logger
lives in `utils.py` is analysed as one. Summaries are plain data: they cross process boundaries
and can be cached by content hash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from trainlint.model.lattice import UNKNOWN, Kind, Value

SYNCHRONIZE = frozenset(
    {"torch.cuda.synchronize", "torch.xpu.synchronize", "torch.mps.synchronize", "torch.accelerator.synchronize"}
)
VALUE_READS = frozenset({"item", "tolist"})
ARGUMENT_READS = VALUE_READS | {"cpu"}  # reads of a tensor argument the callers report (`targets.cpu()` too)
ENV_WORDS = frozenset({"env", "envs", "environment", "environments"})


@dataclass(frozen=True)
class FunctionSummary:
    """What one call of a function does."""

    where: str = ""  # "`StepTimer.click` in utils.py", the definition
    steps: bool = False  # updates weights (an optimizer or loss-scaler step) on every call
    backprops: bool = False  # backpropagates on every call
    trains: bool = False  # runs a training loop of its own (an epoch function)
    clears_grads: bool = False
    clips: bool = False  # clips gradients (possibly only when asked, `clip_grad=...`)
    scales: bool = False  # scales the loss (a GradScaler inside)
    synchronizes: tuple[str, ...] = ()  # device synchronisations on every call, as code text
    syncs: tuple[str, ...] = ()  # reads of accelerator tensors on the host on every call (`t.cuda()...item()`)
    reads_arguments: bool = False  # reads the values of its tensor arguments on the host (`v.item()`)
    no_grad: bool = False
    sets_train_mode: bool = False  # calls `.train()` on a module (restores training mode)
    # may backpropagate a value it is given (or its object holds): unless proven otherwise; None:
    # not yet known, asked of the defining module when a fix needs it (`fix_safety`), as few calls do
    differentiates_arguments: bool | None = True
    returns: Value = UNKNOWN
    defined: tuple[str, str] = ("", "")  # the defining module's path and the function's qualified name
    # every `return` gives back this parameter as it came ("0 model": its position among the
    # arguments, and its name): a call's value is what it is given (`model = load_ckpt(model, ckpt)`)
    returns_argument: str | None = None
    # attributes of `self` it calls on every call (`self.vae_layer(x)`): what the object's class (a
    # subclass in another module) sets them to runs every time too
    self_calls: tuple[str, ...] = ()
    # a parameter it steps on every call ("0 optimizer": `optimizer.step()`), which it cannot tell is
    # an optimizer: a call that passes one there updates the weights
    steps_parameter: str | None = None
    # clips only when this parameter ("1 clip_grad") is given something (`if clip_grad is not None:`)
    clips_parameter: str | None = None
    # a decorator factory setting what it decorates on the class it is given (d2l's `add_to_class`)
    adds_methods: bool = False
    # a method setting its caller's arguments as attributes of `self` (d2l's `save_hyperparameters`)
    saves_arguments: bool = False
    # layers it replaces on every call by new modules with parameters, of its receiver or a parameter
    # ("self.head", "0 model.fc"): `model.reset_classifier(10)` swaps `model.head` (`layer_swaps`)
    replaces_layers: tuple[str, ...] = ()
    # the modules whose parameters the optimizer it returns holds ("0 model"): `build_optimizer(model)`
    optimizes: tuple[str, ...] = ()
    # every `return` gives the output of this activation ("softmax", "sigmoid"): probabilities (`activations`)
    returns_activation: str | None = None
    # what it does with the values it is given, each fact about one parameter ("evaluates 0 model",
    # "epochs 1 loader": `parameter_facts`)
    parameter_facts: tuple[str, ...] = ()
    # parameters it calls on every call ("0 fn": `timer(fn)` runs `fn()`): what a call passes there
    # runs whenever the call does (a step handed to a timing or retrying helper)
    calls_parameters: tuple[str, ...] = ()
    # methods it calls on `self` on every call, outside loops (`update` runs `self._update_with_batch`):
    # on an object of a subclass, that subclass's overrides run (the template-method pattern)
    self_methods: tuple[str, ...] = ()
    # the parameters whose values it reads on the host ("0 targets"; "*" for any, `**kwargs`'s values):
    # of a call's arguments, those a caller reports (`reads_arguments`)
    read_parameters: tuple[str, ...] = ()
    # ("list", "0 output", "1 target"): what it returns, tensors (or a list of them) computed by tensor
    # methods from those parameters, where they are (`computed_returns`)
    returns_computed: tuple[str, ...] = ()
    # a decorator (or a factory of one) that runs what it decorates without grad: YOLO's
    # `smart_inference_mode()` returning `(torch.inference_mode if ok else torch.no_grad)()(fn)`
    turns_grad_off: bool = False
    # some `return` gives back this parameter as it came, the others `returns_besides` (a dict of losses
    # reduced across processes, or given back as it is on one process): a call's value is the join
    passes_argument: str | None = None
    returns_besides: Value = UNKNOWN


@dataclass(frozen=True)
class ClassSummary:
    """A class: what its instances are and what their methods do (`__call__` for `obj(...)`)."""

    kind: Kind = Kind.OBJECT
    methods: dict[str, FunctionSummary] = field(default_factory=dict)
    # (outlines only) the bases as the module's imports spell them: "trainer.TrainerModel",
    # ".base.BaseTTS"; a base defined in the same module by its bare name
    bases: tuple[str, ...] = ()
    # this module's functions and classes registered under the class by a decorator built from it
    # (`@DistributedPlugin("fsdp2").register()`): what its instances dispatch to by name
    registered: tuple[str, ...] = ()
    # the objects its instances hold (`self.lstm = Lstm(...)`): attribute -> instance of a class,
    # named as any module finds it ("file::Lstm"), for `model.lstm.reset_state()` in another module
    attributes: dict[str, Value] = field(default_factory=dict)
    # the names of `class_attributes.FLAG_ATTRIBUTES` (`requires_grad`, `require_grad`, ...) that no
    # instance holds as its own attribute: the class and its bases (its module's or `torch.nn`'s) never
    # define, assign or read them on `self`; empty when a base is one the module cannot see (read by
    # Python's own parser for outlines and full summaries alike, `project.importers`)
    lacks: tuple[str, ...] = ()
    # (outlines only) attributes its constructor sets from its parameters (`self.loss = loss`), as
    # "loss=0 loss" (attribute, position among the explicit parameters, name): an object handed to
    # the constructor is the attribute's, and runs where a method calls it (`self.loss(x, y)`)
    holds: tuple[str, ...] = ()


def registry_root(decorator: object) -> str | None:
    """The name a registering decorator is built from: `R` in `@R("name").register()` or
    `@R.register("name")` (libcst or ast nodes), else None."""
    if type(decorator).__name__ != "Call":
        return None
    node = decorator
    while type(node).__name__ in ("Call", "Attribute"):
        node = node.func if type(node).__name__ == "Call" else node.value  # type: ignore[attr-defined]
    name = getattr(node, "id", None) or getattr(node, "value", None) if type(node).__name__ == "Name" else None
    return name if isinstance(name, str) else None


# a place in a file: (path, 1-based line, 1-based column)
Place = tuple[str, int, int]


# a step call's target that names a method called on `self` ("self::Base.compute_loss"): the
# overrides of subclasses in other modules run too
DISPATCH = "self::"
# the kind of `ProjectLookup.class_candidates` question `getattr(module, "build_%s" % name)` asks,
# followed by the constant start of the name
ATTRIBUTES = "attributes:"
# the kind of the question an object known only by a method called on it asks, followed by the method
DEFINING = "defining:"


@dataclass(frozen=True)
class StepCall:
    """A call this module makes on every training step into a name of another project module."""

    target: str  # as this module's imports spell it: "utils.all_reduce", "models.losses.SetCriterion.forward"
    chain: tuple[Place, ...]  # the calls from the step loop down to this one (this call last)
    accelerator: bool = False  # the step runs on an accelerator (the calling module puts work on one)
    # "" when the module's own step loop (or a library's step hook) makes the call; else the function
    # of this module ("f", "Class.method") that makes it whenever it runs, so every step where that
    # function runs every step (the chain then starts in its body)
    when: str = ""
    # a parameter of `when` ("1 gen_image": its place among the explicit parameters, and its name),
    # False or None by default, under whose test the call is made (`if gen_image: return
    # self.gen_image(...)`): not per step where every step call of `when` leaves it so
    flag: str = ""


UNSET_FLAG_FACTS = frozenset({"default", "False", "none"})  # what a call leaves a flag that is False or None by default


def given_facts(seeds: "dict[tuple[str, str], tuple[str, ...]]", owner: str, keys: "list[str]") -> list[str] | None:
    """From facts of `ProjectLookup.passed_arguments`: what each call of `owner` ("f", "Class.method",
    "Class" for its constructor) passes for the parameter keyed `keys` (its name, its place), "default"
    where it passes none; None when no call is known."""
    calls = seeds.get((owner, ""), ())
    if not calls:
        return None
    facts: dict[str, str] = {}
    for key in keys:
        for entry in seeds.get((owner, key), ()):
            call, _, fact = entry.rpartition(":")
            facts[call] = fact
    return [facts.get(call, "default") for call in calls]


@dataclass(frozen=True)
class Argument:
    """An instance of a project class that this module passes to a function or class of another
    project module, resolved to the files that define both: what that module's parameter holds (or,
    with no `class_path`, a fact of what one call passes: `class_name` "=N:tensor", "=N" the call)."""

    callee_path: str
    callee: str  # "train_one_epoch", "Trainer" (its constructor), "Trainer.fit"
    key: str  # a parameter's name, or its position among the explicit parameters ("0", "1", ...)
    class_path: str
    class_name: str


@dataclass(frozen=True)
class Seed:
    """How other modules make a function per step: the call chains that reach it, and whether any of
    those steps runs on an accelerator."""

    chains: tuple[tuple[Place, ...], ...]
    accelerator: bool


@dataclass(frozen=True)
class ModuleSummary:
    """The summaries of a module's top-level functions and classes, its re-exported names, and the
    calls it makes every step into other project modules (what makes their functions per step)."""

    functions: dict[str, FunctionSummary] = field(default_factory=dict)
    classes: dict[str, ClassSummary] = field(default_factory=dict)
    exports: dict[str, str] = field(default_factory=dict)  # imported names, for re-exports
    step_calls: tuple[StepCall, ...] = ()
    arguments: tuple[Argument, ...] = ()  # instances of project classes passed to other modules
    outline: bool = False  # names only, read without analysis (a module with no training code)
    # (outlines only) `@book.add_to_class(book.Trainer)` on a top-level `def f`: the decorator, the
    # class (each as the imports spell it in full) and "f"
    attached: tuple[tuple[str, str, str], ...] = ()
    uses_accelerator: bool = False  # its own code puts work on a device (`TrainingModel.uses_accelerator`)
    # the methods it calls with autograd on, on objects other than `self` (`gan.visualize_results(n)`)
    graded_methods: tuple[str, ...] = ()
    quiet_methods: tuple[str, ...] = ()  # the methods it calls on other objects with autograd off only


EMPTY = ModuleSummary()


class ProjectLookup(Protocol):
    """What the model asks of the project phase, which knows files, caches and other modules."""

    def symbol(self, from_file: str, qualname: str) -> FunctionSummary | ClassSummary | None:
        """The summary of a name a module imports from a local module (None for libraries)."""
        ...

    def class_methods(self, from_file: str, qualname: str) -> dict[str, FunctionSummary] | None:
        """The methods of a project class with those it inherits from project bases in any module."""
        ...

    def qualify(self, from_file: str, qualname: str) -> str | None:
        """A name as module `from_file` spells it, as any module can find it ("file::Name")."""
        ...

    def passed_arguments(self, path: str, facts: bool = False, receivers: bool = False) -> dict[tuple[str, str], tuple[str, ...]]:
        """For the functions and classes of module `path`: (name, parameter key) -> the classes whose
        instances other project modules pass there, each as "file::Class"; with `facts`, what each
        call they make every step passes ("=file#N:tensor", (name, "") -> "=file#N" for each call),
        the importers' calls, and with `receivers` also those of the modules the importers hand
        objects of its classes to (which branch decisions read; values read the importers' only)."""
        ...

    def star_names(self, from_file: str, module: str) -> dict[str, str]:
        """What `from module import *` binds in module `from_file` when `module` is the project's: each
        name as that module's imports would spell it ({} for a library's module)."""
        ...

    def callers_use_accelerator(self, path: str) -> bool:
        """Whether a project module importing module `path` puts work on a device (the modules it runs
        the training loops of there work where it does)."""
        ...

    def callers_set_default_device(self, path: str) -> bool:
        """Whether a project module importing module `path` may make a device the default for new
        tensors (`torch.set_default_tensor_type("torch.cuda.FloatTensor")`): `torch.Tensor(n)` of
        module `path` is then no host tensor."""
        ...

    def called_with_grad(self, path: str, method: str, anywhere: bool = False) -> bool | None:
        """Whether a project module importing module `path` calls a method of that name, on an object
        other than `self`, with autograd on (a method its own module calls only under no_grad may
        still run with grad from a script: `gan.visualize_results(epoch)`); False when they call it
        only under no_grad (`with torch.no_grad(): acc = network.predict(x)`), None when none calls it.
        `anywhere`: when no importer calls it, as the modules calling it by name say (an evaluator
        handed the object by a module it does not import)."""
        ...

    def step_seeds(self, path: str) -> dict[str, Seed]:
        """The functions of module `path` ("f", "Class.method") that other project modules call on
        every training step, each with the call chains (from the step loop down) that reach it."""
        ...

    def method_home(self, from_file: str, qualname: str, method: str) -> str | None:
        """Where an object of project class `qualname` finds `method`: "file::Class.method" of the class
        or of the nearest project base that defines it; None when none does."""
        ...

    def unbuilt(self, path: str, class_name: str, base: str) -> bool:
        """Whether the project builds objects of other classes deriving from `base` ("file::Base") but
        never one of class `class_name` of module `path`."""
        ...

    def constructed_values(self, path: str, class_name: str, param: str, index: int) -> frozenset[object] | None:
        """What the constructions of class `class_name` of module `path` give its constructor's
        parameter `param` (explicit parameter `index`): None, True, False, or "default" for those that
        give none; None where the project does not build it by name only, or gives other values."""
        ...

    def class_candidates(self, from_file: str, kind: str, qualname: str) -> tuple[str, ...]:
        """The project classes ("file::Class") an object may be that module `from_file` builds from
        `qualname`: a dict of classes ("table"), a registry ("registry"), a declared base ("base")."""
        ...

    def differentiates(self, path: str, qualified: str) -> bool:
        """Whether function `qualified` of module `path` may differentiate a value it is given
        (`FunctionSummary.differentiates_arguments`, computed only when a fix asks)."""
        ...
