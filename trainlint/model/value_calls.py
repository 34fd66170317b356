"""What calls return: torch factories and functions, library constructors, methods of tensors and
modules, project functions through their summaries. A mixin of `ValueModel` (`values.py`), which
evaluates every other kind of expression."""

from __future__ import annotations

from functools import cached_property
from dataclasses import replace
from typing import TYPE_CHECKING

import libcst as cst

from trainlint.model.arithmetic import arithmetic
from trainlint.model.builtin_calls import builtin_call
from trainlint.model.lattice import ACCEL, BOOL, CYCLE, HOST, HOST_DATA, NAMESPACE_CLASSES, NUMBER, PARSED_OPTIONS, STRING, UNKNOWN, UNKNOWN_DEVICE, Kind, Value, join_graph
from trainlint.model.arguments import LambdaCalls, argument_for, computed_value
from trainlint.model.containers import MODULE_CONTAINERS, held_modules, namespace_value, returned_dict
from trainlint.model.function_values import FUNCTION_WRAPPERS, FunctionCalls
from trainlint.model.chosen_classes import ChosenClasses
from trainlint.model.candidates import registered_builders
from trainlint.model.device_arguments import DeviceArguments, moved_to_device
from trainlint.model.data_sources import ARRAY_METHODS, numpy_built
from trainlint.model.distributions import DISTRIBUTIONS, QUASIRANDOM, distribution, sampled
from trainlint.model.environments import holds_data, wrapped_data
from trainlint.model.layer_swaps import parameter_free
from trainlint.model.names import dotted, target_names, tokens
from trainlint.model.plain_bindings import host_type, is_cuda_type
from trainlint.model.torchnames import (
    CUDA_SYNC_OBJECTS, DETERMINISTIC_FACTORIES, GRAD_SCALER, LEGACY_CONSTRUCTORS, LIBRARY_LOSS_SCALERS, RANDOM_FACTORIES,
    dtype_name, is_false, is_scheduler_factory, is_true, literal_string, runs_without_grad,
)

if TYPE_CHECKING:
    from trainlint.model.facts import Function, Site


TENSOR_NAMESPACES = ("torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special", "torch.distributions")
NOT_TENSOR_FUNCTIONS = frozenset(
    """no_grad enable_grad inference_mode device dtype manual_seed seed compile numel typename save load
    is_tensor is_floating_point set_grad_enabled autocast get_default_dtype set_default_dtype
    set_float32_matmul_precision use_deterministic_algorithms equal allclose""".split()
)
# methods that only torch tensors have (numpy spells them as functions: `np.isfinite(a)`)
TORCH_ONLY_METHODS = frozenset({"isfinite", "isnan", "isinf", "masked_fill", "unsqueeze"})
# what these give (indices, comparisons, integers), as methods or torch's functions, carries no graph
GRAPHLESS = frozenset("argmax argmin eq ne gt lt ge le isnan isinf isfinite long int bool round floor ceil".split())
# tensor methods whose result is a tensor on the receiver's device, keeping its graph
TENSOR_METHODS = frozenset(
    """sum mean clone float half bfloat16 double abs max min norm pow sqrt exp log std var view reshape
    squeeze unsqueeze argmax argmin eq ne gt lt ge le softmax log_softmax sigmoid tanh relu mul add sub
    div matmul mm bmm masked_fill contiguous flatten any all prod cumsum gather expand expand_as permute
    transpose t square neg sign clamp clamp_ type_as repeat narrow chunk split unbind index_select
    masked_select nansum logsumexp topk sort round floor ceil long int bool to_dense isnan isinf
    isfinite logical_and logical_or logical_not where detach_ mul_ add_ div_ sub_ float_power reciprocal
    rsqrt exp_ log1p expm1 trace diag diagonal triu tril nan_to_num count_nonzero unsqueeze_ squeeze_
    view_as reshape_as flip roll nonzero argwhere argsort unique cumprod amax amin ravel fill_ zero_ byte short
    new_zeros new_ones new_full new_empty new_tensor""".split()
)
CASTS = frozenset({"float", "half", "double", "bfloat16"})
# tensor methods combining the receiver with a second tensor: torch wants both on one device, so a
# device operand puts the result there (`pred.eq(target.to(device))`); numpy spells none of them
OPERAND_METHODS = frozenset("eq ne gt lt ge le mul add sub div matmul mm bmm logical_and logical_or".split())
NUMBER_METHODS = frozenset({"item", "tolist", "size", "dim", "numel", "nelement", "element_size", "get_device", "data_ptr", "stride"})
HOST_METHODS = frozenset({"numpy"})
# attributes that are tensors on what the analysis already knows is a tensor or a model's forward
# output: torch.Tensor's (`t.T`, `t.real`) and the ModelOutput fields of HF models (`out.loss`,
# `out.logits`): facts of the two APIs, asked only of such values, never of an unknown one
TENSOR_VALUED_ATTRIBUTES = frozenset(
    {"loss", "logits", "last_hidden_state", "hidden_states", "pooler_output", "grad", "data", "T", "mT", "real", "imag"}
)
HOST_ATTRIBUTES = frozenset({"shape", "device", "dtype", "ndim", "is_cuda", "requires_grad", "param_groups", "state", "training"})
MODULE_METHODS = frozenset({"to", "cuda", "cpu", "half", "bfloat16", "float", "double", "train", "eval", "requires_grad_", "to_empty", "apply", "type", "xpu"})
# the rest of torch.nn.Module's own API: calling one of these on a module runs no forward pass
MODULE_API_METHODS = MODULE_METHODS | frozenset(
    """parameters named_parameters buffers named_buffers children named_children modules named_modules state_dict
    load_state_dict zero_grad register_buffer register_parameter register_module add_module get_submodule
    get_parameter get_buffer register_forward_hook register_forward_pre_hook register_full_backward_hook
    register_backward_hook extra_repr share_memory""".split()
)
CONFIG_NAMES = frozenset({"args", "cfg", "config", "opt", "opts", "hparams", "hp", "flags", "FLAGS", "conf"})
PREDICATE_PREFIXES = ("is_", "has_", "should_", "can_", "use_")
HOST_CALL_WORDS = frozenset({"tokenizer", "tokenize", "encode", "decode", "processor", "feature", "extractor", "json", "yaml", "open", "read"})


class CallValues(LambdaCalls, FunctionCalls, DeviceArguments, ChosenClasses):
    """The call-evaluating half of `ValueModel` (`of` is the evaluator's, declared on `LambdaCalls`)."""

    @cached_property
    def default_device(self) -> str:
        """Where a factory without `device=` builds its tensor: the host, unless the module changes the
        default (`torch.set_default_device("cuda")`, `torch.set_default_tensor_type("torch.cuda.FloatTensor")`)
        or a script importing it may (ssd.pytorch's `train.py`, for its `torch.Tensor(num, n, 4)`)."""
        for call in self.model.calls:
            if call.qualname in ("torch.set_default_device", "torch.set_default_tensor_type") and call.node.args:
                arg = call.node.args[0].value
                text = literal_string(arg) or self.model.module.code_for_node(arg)
                if "cuda" in text or "cpu" not in text:
                    return "cuda" if "cuda" in text else UNKNOWN_DEVICE
        project, path = self.model.project, self.model.path
        return UNKNOWN_DEVICE if project is not None and path and project.callers_set_default_device(path) else HOST

    # -- calls ---------------------------------------------------------------------------------
    def _call(self, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value:
        if any(a.keyword is not None and a.keyword.value == "return_tensors" and literal_string(a.value) == "pt" for a in call.args):
            return Value(Kind.COLLECTION, HOST, element=Value(Kind.TENSOR, HOST, False))  # a tokenizer's batch, built on the host
        m = self.model
        func = call.func
        known = m.call_at(call)  # (its callee as the imports before it say, where the function imports that name)
        qual = m.imports.resolve_in(func, fn, known.qualname) if known is not None else m.imports.resolve(func)
        if qual is not None:  # (`REGISTRY.get(name)` of a registry of the project's builder functions: one of them)
            value = (registered_builders(m, qual[:-4]) if qual.endswith(".get") else None) or self._library_call(qual, call, fn, at)
            if value is not None:
                return value
        if qual is None and at is not None and isinstance(func, (cst.Name, cst.Attribute)) and is_cuda_type(m, func, at):
            return Value(Kind.TENSOR, ACCEL, False)  # `dtype(array)` of `dtype = torch.cuda.FloatTensor if cuda else ...`
        own = m.imports.own_name(func)  # `f`, or `d2l.f` where `d2l` is this module itself
        if isinstance(func, cst.Attribute) and dotted(func.value) == "self" and own is None and not m.own_method(fn, func.attr.value):
            held = self.of(func, fn, at)  # `self.tokenizer(text)` after `self.tokenizer = list_str_to_tensor`
            if held.kind is Kind.UNKNOWN and isinstance(func.value, cst.Name):
                held = self.called_attribute(fn, f"self.{func.attr.value}")
            if held.kind is Kind.FUNCTION:
                return self._called_function(held, call, fn, at)
        if isinstance(func, cst.Attribute) and (own is None or qual is not None):
            return self._method_call(func.attr.value, func.value, call, fn, at)
        if isinstance(func, (cst.Name, cst.Attribute)) and own is not None:
            name = own
            if qual is None:
                built = builtin_call(name, call, lambda e: self.of(e, fn, at))
                if built is not None:
                    return built
                local = m.visible_function(name, fn) if not m.reaching(fn, name, at) and name not in (fn.params if fn else ()) else None
                if local is not None:
                    inlined = self._expression_call(local, call, fn, at)
                    return inlined if inlined is not None else self.returns(local)
                inlined = self._lambda_call(name, call, fn, at)
                if inlined is not None:
                    return inlined
                cls = m.local_class(name)
                if cls is not None:
                    return m.instance_of_local_class(name)
                chosen = self._chosen_class(name, call, fn, at)
                if chosen is not None:
                    return chosen
            if qual is None and (name[:1].isupper() or name.startswith(PREDICATE_PREFIXES)) and not m.reaching(fn, name, at):
                return self._by_words(name, at)  # `Net(cfg)`: an object of a class we cannot see
            callee = self.of(func, fn, at)
            if callee.kind is Kind.MODULE:
                return self._module_call(at, callee, call, fn)
            if callee.kind is Kind.FUNCTION:
                return self._called_function(callee, call, fn, at)
            # `loss_scaler(loss, optimizer)`: what its class's `__call__` returns (passed in by another module)
            called = m.method_value(callee, "__call__") if callee.kind in (Kind.OBJECT, Kind.SCALER) else None
            if called is None and callee.kind is Kind.UNKNOWN and fn is not None and isinstance(func, cst.Name):
                called = m.passed_call_returns(fn, name) if not m.reaching(fn, name, at) else None
            return called if called is not None else self._by_words(name, at)
        if isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name):
            chosen = self._class_from_dict(func.value.value, call, fn, at)
            if chosen is not None:
                return chosen
        callee = self.of(func, fn, at)
        if callee.kind is Kind.MODULE:
            return self._module_call(at, callee, call, fn)
        if callee.kind is Kind.FUNCTION:  # `loss_map[loss](outputs, targets)` of a dict of bound methods
            return self._called_function(callee, call, fn, at)
        return UNKNOWN

    def _module_call(self, at: "Site | None", module: Value, call: cst.Call, fn: "Function | None") -> Value:
        """Calling a module runs its `forward`: a forward pass's output, or the dict of tensors its class's
        `forward` gives back (a criterion's losses, `returned_dict`)."""
        output = self._forward(at, module, [self.of(a.value, fn, at) for a in call.args])
        return returned_dict(self.model.method_value(module, "forward") if module.origin else None, output) or output

    def _forward(self, at: "Site | None", module: Value | None = None, inputs: "list[Value] | None" = None) -> Value:
        """The output of a forward pass: a tensor with a graph, unless autograd is off there, the module is frozen
        (`requires_grad_(False)`), or it has no parameters and its input no graph (`criterion(out, y)`, `out` made under no_grad)."""
        no_grad = at is not None and any(w.kind == "no_grad" for w in at.withs)
        stateless = bool(inputs) and module is not None and parameter_free(module) and inputs[0].is_tensor and inputs[0].graph is False and not any(i.graph for i in inputs)  # type: ignore
        frozen = module is not None and (module.graph is False or runs_without_grad(module.origin) or stateless)
        return Value(Kind.TENSOR, UNKNOWN_DEVICE, False if no_grad or frozen else True)

    def _by_words(self, name: str, at: "Site | None") -> Value:
        if name.startswith(PREDICATE_PREFIXES):
            return BOOL  # `is_peft_model(model)`: a predicate
        if name[:1].isupper():  # `Net(cfg)`: constructing an object, not a forward pass
            return Value(Kind.OBJECT)
        if set(tokens(name)) & HOST_CALL_WORDS:
            return Value(Kind.COLLECTION, HOST)
        return UNKNOWN

    def _library_call(self, qual: str, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value | None:
        m = self.model
        namespace, _, last = qual.rpartition(".")
        symbol = m.project_symbol(qual)
        passed = argument_for(call, getattr(symbol, "returns_argument", None))
        if passed is not None:  # `model = load_ckpt(model, ckpt)`: it gives back what it is given
            return self.of(passed, fn, at)
        passed = argument_for(call, getattr(symbol, "passes_argument", None))
        if passed is not None:  # `reduce_dict(loss_dict)`: what it is given on one path, what it computes on the others
            return self.of(passed, fn, at) | symbol.returns_besides  # type: ignore[union-attr]
        # (`prec1, prec5 = accuracy(output, target, topk=(1, 5))`: tensors where its arguments were)
        project = computed_value(call, getattr(symbol, "returns_computed", ()), lambda e: self.of(e, fn, at)) or m.project_value(qual)
        if project is not None:
            return project
        if qual in NAMESPACE_CLASSES:
            return namespace_value(call, lambda e: self.of(e, fn, at))
        if qual.startswith((DISTRIBUTIONS, QUASIRANDOM)):
            return distribution(qual, call, lambda e: self.of(e, fn, at), self.default_device)
        if qual in LIBRARY_LOSS_SCALERS:
            return Value(Kind.SCALER, origin=qual)
        if qual in GRAD_SCALER or qual.endswith("ShardedGradScaler"):
            enabled_arg = _kwarg(call, "enabled")
            enabled = False if is_false(enabled_arg) else (True if enabled_arg is None or is_true(enabled_arg) else None)
            if enabled_arg is not None and enabled is None:
                resolved = self.of(enabled_arg, fn, at)
                enabled = None if resolved.kind is not Kind.BOOL else None
            return Value(Kind.SCALER, origin=qual, enabled=enabled)
        if is_scheduler_factory(qual):
            return Value(Kind.SCHEDULER, origin=qual)
        if qual in CUDA_SYNC_OBJECTS:
            return Value(Kind.OBJECT, origin=qual)
        if qual.startswith("torch.optim.") and last[:1].isupper():
            return Value(Kind.OPTIMIZER, origin=qual)
        if last.endswith("DataLoader"):  # (torchdata's `StatefulDataLoader` too)
            return Value(Kind.DATALOADER, origin=qual)
        if qual in ("accelerate.Accelerator", "accelerate.accelerator.Accelerator"):
            return Value(Kind.OBJECT, origin="accelerate.Accelerator")  # its `prepare` returns what it is given
        if qual in FUNCTION_WRAPPERS and call.args:  # `torch.compile(train_step)`, `partial(loss, alpha=a)`
            wrapped = self.of(call.args[0].value, fn, at)
            if wrapped.kind is Kind.FUNCTION:
                return wrapped
        if qual in ("copy.deepcopy", "copy.copy", "torch.autograd.Variable") or last in ("convert_sync_batchnorm", "convert_syncbn_model"):
            # (sync-BatchNorm conversions give back the module they are given; `Variable(t)`, the tensor)
            return self.of(call.args[0].value, fn, at) if call.args else UNKNOWN
        if qual.startswith(("numpy.", "math.", "random.", "time.", "os.", "json.", "pickle.")):
            return NUMBER if qual.startswith(("math.", "time.", "random.")) else HOST_DATA
        if last in ("from_pretrained", "from_config", "from_single_file"):
            owner = namespace.rsplit(".", 1)[-1]
            if any(w in owner for w in ("Tokenizer", "Processor", "Config", "Scheduler", "FeatureExtractor")):
                return Value(Kind.OBJECT, HOST, origin=qual)
            # models and pipelines (which hold models and move with `.to()`)
            dtype = dtype_name(_kwarg(call, "torch_dtype") or _kwarg(call, "dtype"), m.imports)
            return Value(Kind.MODULE, dtype=dtype, origin=qual)
        if namespace.startswith("torch.nn.parallel") or last in ("DistributedDataParallel", "DataParallel", "FullyShardedDataParallel"):
            # calling the wrapper runs the wrapped module's `forward`: it is that module, for the analysis
            inner = self.of(call.args[0].value, fn, at) if call.args and call.args[0].keyword is None else UNKNOWN
            return inner if inner.kind is Kind.MODULE and inner.origin else Value(Kind.MODULE, origin=qual)
        if namespace.startswith("torch.nn") and last[:1].isupper() and not namespace.startswith("torch.nn.utils"):
            if last in MODULE_CONTAINERS:  # `nn.ModuleList([Block(c) for _ in range(n)])`: what it holds
                given = [(self.of(a.value, fn, at), bool(a.star)) for a in call.args if a.keyword is None]
                return Value(Kind.MODULE, origin=qual, element=held_modules(last, given))
            return Value(Kind.MODULE, origin=qual)
        if qual in ("torch.compile",) and call.args:
            return self.of(call.args[0].value, fn, at)
        if (last in LEGACY_CONSTRUCTORS and namespace in ("torch", "torch.cuda")) or (qual == "torch.Tensor" and call.args):
            # (`torch.FloatTensor(states)` of what a replay buffer's `sample` returned: data, as `torch.tensor(x)`'s;
            # `torch.Tensor(n, 4)`, of the default tensor type, is built where the default device is)
            given = call.args[0].value if namespace == "torch" and len(call.args) == 1 else None
            data = given is not None and wrapped_data(self.model, self.of, self._iterated, given, fn, at)
            device = "cuda" if namespace == "torch.cuda" else self.default_device if last == "Tensor" else HOST
            return Value(Kind.TENSOR, device, False, origin=None if data or (last == "Tensor" and device != HOST) else qual)
        if qual in ("torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_norm"):
            return Value(Kind.TENSOR, UNKNOWN_DEVICE, False)  # the total norm: a 0-dim tensor where the gradients are
        if qual == "torch.nn.utils.rnn.pad_sequence":
            return self._torch_function(last, call, fn, at)  # (one tensor, where its inputs are)
        if namespace in TENSOR_NAMESPACES and last[:1].islower():
            if last in NOT_TENSOR_FUNCTIONS or last.startswith(("is_", "get_", "set_", "_")):
                return UNKNOWN if last not in ("is_tensor", "is_floating_point", "equal", "allclose") else BOOL
            return self._torch_function(last, call, fn, at)
        return None

    def _torch_function(self, name: str, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value:
        device_arg = _kwarg(call, "device")
        dtype = dtype_name(_kwarg(call, "dtype"), self.model.imports)
        sized_draw = name == "normal" and _kwarg(call, "size") is not None  # `torch.normal(0, 1, size=(n, d))`
        if name in ("tensor", "as_tensor") and call.args and device_arg is None:
            source = self.of(call.args[0].value, fn, at)
            if source.kind is Kind.TENSOR and source.device != HOST:
                # a copy (or, for `as_tensor`, the tensor itself) where the data is, not the host
                return Value(Kind.TENSOR, source.device, source.graph if name == "as_tensor" else False, dtype or source.dtype)
        if name == "from_numpy" and call.args and numpy_built(self.model, self.model.imports.resolve, self.of, call.args[0].value, fn, at):
            # an array NumPy made here from numbers (`perm[i:i + n]` of `np.random.permutation(len(X))`),
            # sliced by a loop's index as a batch is, is built on the host: no data in it
            return Value(Kind.TENSOR, HOST, False, dtype, origin="torch.from_numpy")
        if name in ("tensor", "as_tensor", "from_numpy") and call.args and holds_data(self.model, self.of, self._iterated, call.args[0].value, fn, at, read=name != "from_numpy"):
            # `for x, y in zip(xs, ys): torch.tensor(x).to("cuda")`: the batch the loop draws (as a loader's)
            # or an environment's observation, on the host by nature (no constant built on the device)
            device = self.built_on(device_arg, fn, at)
            return Value(Kind.TENSOR, device, False, dtype)
        if name == "from_numpy":
            # one it receives (a batch, an environment's observation) is data
            return Value(Kind.TENSOR, HOST, False, dtype)
        if name == "from_file" or is_true(_kwarg(call, "pin_memory")):  # data read from disk; a buffer made for copies
            return Value(Kind.TENSOR, HOST if name == "from_file" else self.default_device, False, dtype)
        if name in DETERMINISTIC_FACTORIES | RANDOM_FACTORIES or sized_draw or name in ("from_numpy", "as_strided", "zeros_like"):
            if name.endswith("_like") and call.args:
                source = self.of(call.args[0].value, fn, at)
                device = self.built_on(device_arg, fn, at) if device_arg is not None else source.device if source.kind is Kind.TENSOR else UNKNOWN_DEVICE
                return Value(Kind.TENSOR, device, False, dtype)
            device = self.built_on(device_arg, fn, at)
            return Value(Kind.TENSOR, device, False, dtype, origin=f"torch.{name}")
        args: list[Value] = []
        for a in call.args:
            if a.keyword is None and isinstance(a.value, (cst.List, cst.Tuple)):
                # `torch.cat([torch.ones(b, 1), torch.zeros(b, t)])`: each element's own value (a
                # literal's joined element would forget that every one was built on the host)
                args.extend(self.of(e.value, fn, at) for e in a.value.elements if isinstance(e, cst.Element))
            elif a.keyword is None:
                args.append(self.of(a.value, fn, at))
        elements: list[Value] = []
        for a in args:
            if a.kind is Kind.COLLECTION and a.element is not None:
                elements.append(a.element)
            else:
                elements.append(a)
        tensors = [e for e in elements if e.kind is Kind.TENSOR]
        if not tensors:
            return Value(Kind.TENSOR, UNKNOWN_DEVICE, None, dtype)
        out = arithmetic(tensors)
        if any(e.kind not in (Kind.TENSOR, Kind.NUMBER) for e in elements):
            out = replace(out, origin=None)  # `torch.cat([torch.ones(b, 1), data])`: not host-built only
        return replace(out, dtype=dtype or out.dtype, graph=False if name in GRAPHLESS else out.graph)

    def _iterated(self, expr: cst.BaseExpression, fn: "Function | None", at: "Site | None") -> bool:
        """A name bound by an enclosing `for` loop's target (and not reassigned since), other than the
        count of a `for z in range(n):` (`torch.tensor(z)` is a number the code chose, not data)."""
        if not isinstance(expr, cst.Name) or at is None or self.model.reaching(fn, expr.value, at):
            return False
        drawn = self._loop_variable(fn, expr.value, at)  # type: ignore[attr-defined]
        return drawn is not None and not self._counted(expr.value, at)

    def _counted(self, name: str, at: "Site") -> bool:
        """`name` is the target of the innermost loop binding it, and that loop runs over `range(...)`."""
        for loop in reversed(at.loops):
            if isinstance(loop.node, cst.For) and name in target_names(loop.node.target):
                it = loop.node.iter
                return isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "range" and isinstance(loop.node.target, cst.Name)
        return False

    def _method_call(self, method: str, receiver: cst.BaseExpression, call: cst.Call, fn: "Function | None", at: "Site | None") -> Value:
        m = self.model
        base = self.of(receiver, fn, at)
        if base is CYCLE and method in MODULE_METHODS | TENSOR_METHODS:
            return CYCLE
        if method == "parse_args" and base.kind is Kind.UNKNOWN:  # argparse's namespace of settings, host data
            return Value(Kind.OBJECT, HOST, origin=PARSED_OPTIONS)
        if method == "type_as" and call.args and base.kind in (Kind.TENSOR, Kind.UNKNOWN):  # x's dtype, on x's device
            other = self.of(call.args[0].value, fn, at)  # (`y_true.type_as(x)` of an unseen value: a tensor there)
            if other.kind is Kind.TENSOR:
                return replace(base, kind=Kind.TENSOR, device=other.device, dtype=other.dtype)
        if base.kind in (Kind.TENSOR, Kind.UNKNOWN) and base.device != ACCEL and method in OPERAND_METHODS and call.args:
            other = self.of(call.args[0].value, fn, at)
            if other.device == ACCEL and other.kind in (Kind.TENSOR, Kind.UNKNOWN):
                return Value(Kind.TENSOR, ACCEL, False if method in GRAPHLESS else join_graph(base.graph, other.graph))
        if base.kind is Kind.TENSOR:
            if method in NUMBER_METHODS:
                return NUMBER if method != "tolist" else Value(Kind.COLLECTION, HOST, element=NUMBER)
            if method in HOST_METHODS:
                return HOST_DATA
            if method == "cpu":
                return replace(base, device=HOST)
            if method == "cuda":
                return replace(base, device=ACCEL)
            if method in ("detach", "detach_"):
                return replace(base, graph=False)
            if method == "to":
                return self._moved(base, call, fn, at)
            if method == "type":  # `x.type(torch.long)` converts; `x.type()` names the type
                if call.args and at is not None and is_cuda_type(m, call.args[0].value, at):
                    return replace(base, device=ACCEL)
                if call.args and host_type(m, call.args[0].value):
                    return replace(base, device=HOST)  # `mask.type(torch.FloatTensor)`: a copy on the host
                return base if call.args else STRING
            if method in TENSOR_METHODS or method.endswith("_"):
                out = base
                if method in ("half", "float", "bfloat16", "double"):
                    out = replace(out, dtype={"half": "float16", "float": "float32", "double": "float64"}.get(method, method))
                if method in GRAPHLESS:
                    out = replace(out, graph=False)
                return out
            return UNKNOWN
        if base.kind is Kind.MODULE:
            if method in MODULE_METHODS:
                dtype = base.dtype
                if method in ("half", "bfloat16"):
                    dtype = "float16" if method == "half" else "bfloat16"
                elif method == "float":
                    dtype = "float32"
                elif method == "to":
                    for a in call.args:
                        if a.keyword is None or a.keyword.value == "dtype":
                            d = dtype_name(a.value, m.imports)
                            if d is not None and not isinstance(a.value, cst.SimpleString):
                                dtype = d
                device = base.device
                if method == "cpu":
                    device = HOST
                elif method == "cuda":
                    device = ACCEL
                graph = base.graph
                if method == "requires_grad_":
                    # a frozen module: its forward records no graph (for inputs that need none)
                    graph = False if call.args and is_false(call.args[0].value) else None
                return replace(base, dtype=dtype, device=device, graph=graph)
            if method in ("parameters", "named_parameters", "state_dict", "modules", "children", "buffers"):
                return Value(Kind.COLLECTION, base.device, origin="parameters")
            if method == "forward":
                return self._forward(at)
            summary = m.method_value(base, method)  # (a policy's own `sample`, running its layers, first)
            if summary is not None:
                return summary
            if method in ("generate", "sample"):
                return Value(Kind.TENSOR, base.device, False)
            return UNKNOWN
        if base.kind in (Kind.NUMBER, Kind.STRING, Kind.BOOL, Kind.HOST_ARRAY, Kind.NONE):
            if method in ("item", "tolist", "cpu", "numpy", "mean", "sum", "max", "min", "std"):
                return NUMBER if base.kind is not Kind.HOST_ARRAY else HOST_DATA
            if base.kind is Kind.HOST_ARRAY and method in ARRAY_METHODS:
                return HOST_DATA  # (`q.cpu().data.numpy().flatten()`: still an array on the host)
            return STRING if base.kind is Kind.STRING else UNKNOWN
        if base.kind is Kind.COLLECTION:
            if method in ("get", "pop", "popleft") and base.element is not None:
                return base.element
            if method == "items":  # (key, value) pairs: a key is not what the dict holds
                pair = (UNKNOWN, base.element) if base.element is not None else None
                return Value(Kind.COLLECTION, base.device, element=Value(Kind.COLLECTION, HOST, items=pair) if pair else None)
            if method == "keys":
                return Value(Kind.COLLECTION, base.device)
            if method in ("values", "copy"):
                return base
            if base.device == HOST and method in ("tolist", "item"):
                return NUMBER
            return UNKNOWN
        if base.kind in (Kind.OBJECT, Kind.SCALER, Kind.OPTIMIZER, Kind.SCHEDULER):
            if base.kind is Kind.SCALER and method == "scale" and call.args:
                return self.of(call.args[0].value, fn, at)
            summary = m.method_value(base, method) or sampled(base, method)
            return summary if summary is not None else UNKNOWN
        # an unknown receiver: the method's name is the evidence
        if moved_to_device(base) and method in TENSOR_METHODS and method not in MODULE_API_METHODS:
            # `(y >= 0).sum()` of a batch moved with `y.to(device)`: only a tensor computes there
            return Value(Kind.TENSOR, base.device)
        if method == "cuda" or (method == "to" and call.args):
            # `y.to(device)` of an unseen batch: a tensor, module or batch object moved (`moved_to_device`)
            moved = self._moved(base, call, fn, at) if method == "to" else replace(base, device=ACCEL)
            return Value(Kind.UNKNOWN, moved.device) if moved.device == ACCEL else UNKNOWN
        if base.device == HOST and method in TENSOR_METHODS and (method not in MODULE_API_METHODS or (method in CASTS and isinstance(receiver, cst.Subscript))):
            # `lengths.cpu().int()`: what a tensor method computes from a host value stays on the host
            # (a cast of an item, `batch["reward"].float()`, too: a module casts itself in place)
            return Value(Kind.UNKNOWN, HOST)
        if method in ("item",):
            return NUMBER
        if method == "tolist":
            return Value(Kind.COLLECTION, HOST, element=NUMBER)
        if method == "numpy":
            return HOST_DATA
        if method in ("detach",):
            return Value(Kind.TENSOR, UNKNOWN_DEVICE, False)
        if method == "cpu":
            return Value(Kind.UNKNOWN, HOST)
        if method in ("self", "cls"):
            return UNKNOWN
        local = m.bound_method(receiver, method, fn)
        if local is not None:
            return self._dispatched(local, receiver)
        words = set(tokens(method))
        if words & HOST_CALL_WORDS:
            return Value(Kind.COLLECTION, HOST)
        if method in ("forward", "__call__"):
            return self._forward(at)
        held = self.of(call.func, fn, at)  # `self.model(x)`: an attribute holding a module, called
        if held.kind is Kind.MODULE:
            return self._forward(at, held)
        if method in TORCH_ONLY_METHODS:
            # `entropy.isfinite()`: numpy arrays, pandas and Python objects have no such method
            return Value(Kind.TENSOR, graph=False if method.startswith("is") else None)
        if method in TENSOR_METHODS and any(a.keyword is not None and a.keyword.value in ("dim", "keepdim") for a in call.args):
            # `labels.sum(dim=2)`: torch's reductions say `dim`; numpy's, pandas' and Python's never do
            return Value(Kind.TENSOR)
        return UNKNOWN


def _kwarg(call: cst.Call, name: str) -> cst.BaseExpression | None:
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)
