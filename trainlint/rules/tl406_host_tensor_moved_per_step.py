"""TL406 host-tensor-moved-per-step."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from trainlint.diagnostics import Applicability, Severity
from trainlint.model import Call, Site, TrainingModel
from trainlint.model.moving_helpers import filled_with_data
from trainlint.model.environments import observed, wraps_observation
from trainlint.model.gates import is_cached_value
from trainlint.model.torchnames import DETERMINISTIC_FACTORIES as DETERMINISTIC, LEGACY_CONSTRUCTORS, RANDOM_FACTORIES as RANDOM, literal_string
from trainlint.model.kept_tensors import kept_array_passed, kept_on_host, rebuilt_each_round
from trainlint.model.moving_helpers import moved_host_tensors, moved_parameter
from trainlint.model.plain_bindings import is_cuda_type, is_dtype, plain_bindings
from trainlint.model.lattice import HOST, Kind
from trainlint.model.arithmetic import built_on_host
from trainlint.model.data_sources import numpy_built
from trainlint.model.walk import child_nodes, iter_nodes
from trainlint.rules.rule import Finding, NodeEdit, NodeFix, Rule, listed, shorten

# what `torch.device(...)` accepts as a string: a device type and an optional index
_DEVICE_STRING = re.compile(r"(cpu|cuda|mps|xpu|xla|meta|hpu|npu|mtia|ipu|privateuseone)(:\d+)?")
# factory keywords that do not change what `device=` adds (`requires_grad=True` would: the factory's
# leaf would be on the device, where `.to()` gives a non-leaf copy of a host leaf)
_PLAIN_KEYWORDS = frozenset({"dtype", "layout"})
_FALSE_KEYWORDS = frozenset({"requires_grad", "pin_memory"})
# `.to()`/`.cuda()` keywords that only say how to copy: dropping them leaves the same values
_COPY_KEYWORDS = frozenset({"non_blocking", "copy"})
# computed on the device, these may differ from the host's result in the last bits
_COMPUTED = frozenset({"linspace", "logspace", "hann_window", "hamming_window", "bartlett_window", "blackman_window", "kaiser_window"})


def _moves_device(model: TrainingModel, call: Call) -> bool:
    """`.cuda()`, `.to(device)`, `.type_as(x)` of a tensor `x`, `.type(torch.cuda.FloatTensor)`: a copy
    to a device (not `.to(torch.float16)` or `.to("cpu")`)."""
    if call.method == "cuda":
        return True
    if call.method == "type":
        return len(call.node.args) == 1 and is_cuda_type(model, call.node.args[0].value, call.site)
    if call.method == "type_as":
        return len(call.node.args) == 1 and _device_tensor_value(model, call.node.args[0].value, call.site)
    if not call.node.args:
        return False
    first = call.node.args[0]
    if first.star or (first.keyword is not None and first.keyword.value != "device"):
        return False
    if is_dtype(model, first.value, call.site):
        return False
    return not model.values.spells_cpu(first.value, call.site.function, call.site)


def _device_tensor_value(model: TrainingModel, expr: cst.BaseExpression, site: Site) -> bool:
    """`x` in `.type_as(x)`, which moves to `x`'s device: not known to live on the host (as `device`
    in `.to(device)` is not known to be the CPU)."""
    value = model.value(expr, site)
    return not value.on_host and value.kind not in (Kind.MODULE, Kind.OPTIMIZER, Kind.OBJECT)


def _proven_device(model: TrainingModel, expr: cst.BaseExpression, site: Site, depth: int = 0) -> bool:
    """A device beyond doubt: `"cuda:0"`, `torch.device(...)`, a tensor's `.device`, a conditional
    between those, or a name every reaching binding of which is one."""
    literal = literal_string(expr)
    if literal is not None:
        return _DEVICE_STRING.fullmatch(literal) is not None
    if isinstance(expr, cst.Call):
        return model.imports.resolve(expr.func) == "torch.device"
    if isinstance(expr, cst.Attribute) and expr.attr.value == "device":
        return model.value(expr.value, site).is_tensor
    if isinstance(expr, cst.IfExp):
        return _proven_device(model, expr.body, site, depth) and _proven_device(model, expr.orelse, site, depth)
    if isinstance(expr, cst.Name) and depth < 3:
        assigns = plain_bindings(model, expr.value, site)
        return bool(assigns) and all(_proven_device(model, a.value, a.site, depth + 1) for a in assigns)
    return False


def _without_effects(expr: cst.BaseExpression) -> bool:
    """Evaluating it runs no code of the program's but the call it is (`torch.device("cuda", 0)`),
    so it may as well be evaluated before the factory runs as after."""
    effects = [n for n in iter_nodes(expr) if isinstance(n, (cst.Call, cst.Await, cst.Yield, cst.NamedExpr))]
    return not effects or effects == [expr]


def _integral(model: TrainingModel, expr: cst.BaseExpression, site: Site, depth: int = 0) -> bool:
    """An integer beyond doubt: a literal, `len(...)`, a shape or size, or a name bound to one."""
    if isinstance(expr, cst.Integer):
        return True
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return _integral(model, expr.expression, site, depth)
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Attribute) and expr.value.attr.value == "shape":
        return True
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Name) and func.value == "len" and model.local_function("len") is None:
            return True
        return isinstance(func, cst.Attribute) and func.attr.value in ("size", "numel", "dim") and bool(expr.args) == (func.attr.value == "size")
    if isinstance(expr, cst.Name) and depth < 3:
        assigns = plain_bindings(model, expr.value, site)
        return bool(assigns) and all(_integral(model, a.value, a.site, depth + 1) for a in assigns)
    return False


def _has_comment(node: cst.CSTNode, skip: tuple[cst.CSTNode, ...]) -> bool:
    """A comment in `node` outside the subtrees `skip`."""
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Comment):
            return True
        stack.extend(c for c in child_nodes(current) if not any(c is s for s in skip))
    return False


class HostTensorMovedPerStep(Rule):
    code = "TL406"
    name = "host-tensor-moved-per-step"
    severity = Severity.INFO
    summary = "A tensor built on the host (`torch.zeros(...)`, `torch.tensor(...)`) then moved with `.cuda()`/`.to(device)` every step."
    hint = "Create it on the device: `torch.zeros(n, device=device)`."
    # (`torch.cuda.FloatTensor(array)` copies too, also as `Tensor = torch.cuda.FloatTensor if cuda else
    # torch.FloatTensor` called, or given to `.type(Tensor)`)
    requires = (".cuda(", ".to(", *(f"cuda.{name}" for name in LEGACY_CONSTRUCTORS))
    per_step = True
    why = (
        "Building a tensor on the CPU and copying it fills host memory, then issues a pageable "
        "host-to-device copy that blocks the host - every step. The tuning guide: \"Instead of calling "
        "torch.rand(size).cuda() ... produce the output directly on the target device\"; the profiler's "
        "ExtraCUDACopyPattern reports exactly this. A table an object keeps on the host (a NumPy schedule "
        "built in `__init__`, or an `nn.Parameter` a plain object that is no `nn.Module` keeps: nothing moves it with a model) crosses again at every call that moves it (also wrapped on the way, `nn.Parameter(self.pe, requires_grad=False).to(device)`), also through a helper it is "
        "passed to (`_extract_into_tensor(self.sqrt_alphas_cumprod, t, shape)`, whose "
        "`th.from_numpy(arr).to(device=t.device)` is reported with the attribute): register it as a buffer. "
        "A tensor built on either path by a factory (`torch.rand(n) * 2 - 1` or `torch.randn(n)`) is built on "
        "the host, and so is one a branch the loop never changes builds anew on each round before the move "
        "rebinds it (`if opt.mode == \"S\": noise = torch.randn(n)`, then `noise = Variable(noise.cuda())`: "
        "the previous round's device tensor reaches the move only on a round where no branch ran). A "
        "distribution built from numbers draws on the host (`noise = Normal(0, 1)`, then `z = noise.sample()` "
        "and `z.to(device)` in a policy's step); one built from device tensors draws there. A quasi-random engine draws on the host always (`self.rng = torch.quasirandom.SobolEngine(1)`, then `self.rng.draw(n)[:, 0].to(self.device)` for a diffusion step's timesteps). A helper that gives back what it is given moved (`to_var(x)`, `utils.cuda([imgs, z])` returning `[x.cuda() for x in xs]`) moves it at each call: reported there, naming the host tensors handed to it. "
        "A legacy CUDA constructor given an array NumPy built from numbers copies it from the host too (AutoGAN's noise, "
        "`torch.cuda.FloatTensor(np.random.normal(0, 1, (n, d)))`); given sizes it allocates on the device, and given the batch's own array it moves data. "
        "The same holds for the type under a name of its own, chosen at run time as a device is "
        "(`Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`, in a function by the input's "
        "`is_cuda`, or kept on `self`): `Tensor(np.random.normal(...))` copies numbers, and "
        "`torch.zeros(n, 4).type(Tensor)` moves a host tensor to the device (`imgs.type(Tensor)` moves the "
        "batch, data). "
        "One finding per statement: the moves of one statement (a dict of `torch.tensor(...).to(device)` "
        "entries) are one defect, reported at the first, naming the others, and fixed together when each "
        "can be; moves in separate statements are separate findings."
    )
    story = "NVIDIA/TransformerEngine #1941 (`torch.tensor([0])` copies \"causing a lot of CPU syncs\"); mmsegmentation #3231 (`torch.rand(...).to(device)` vs `device=`)."
    example = """\
import torch

for x in loader:
    mask = torch.ones(x.shape[0]).to(device)
    loss = model(x, mask)
    loss.backward()
    optimizer.step()
"""
    fixed_example = """\
import torch

for x in loader:
    mask = torch.ones(x.shape[0], device=device)
    loss = model(x, mask)
    loss.backward()
    optimizer.step()
"""
    not_flagged = (
        "Moving the batch from the DataLoader (`x.to(device)`: use `pin_memory=True` and `non_blocking=True`), a host tensor a count of the batch's data is added to (`tokens += (labels != pad).sum()`; a factory's tensor scaled by a factor, `torch.arange(half) * -scale`, is still the factory's and is flagged), a host tensor the function fills with the batch's own values before moving it (a padded batch: `seq_tensor[i, :n] = torch.LongTensor(seq)`), or that a function of the module fills so and returns (a histogram of each image's labels: `vect[i] = torch.histc(target[i].cpu().float(), ...) > 0`), filled with numbers, host constants or device values it is flagged, a tensor built under a test that changes from round to round (`if step == 0:`, `if buf is None:`, a random draw) before the move rebinds it (then it moves once), or "
        "the batch a loop draws from in-memory data (`torch.tensor(x).to(device)` for `x` of `zip(xs, ys)`, not the count of a `for z in range(n):`, also in a helper every call hands it to, and the batch's own lists unpacked: `torch.LongTensor([*map(len, comp_ids)]).cuda()`, `[*chain(*comp_ids)]`; a "
        "`torch.from_numpy` of an array NumPy built in the step from numbers, `np.zeros_like(v)` filled on the host, "
        "a `np.meshgrid` of `np.arange`s raveled, stacked and transposed, a draw of a count `np.random.permutation(n)` or of such an array `npr.choice(np.arange(0, n), size=k)`, one indexed (`np.arange(n)[None, :]`) or sliced by the loop's index as a batch is (`perm[i:i + n]`), "
        "an array of numbers written in the code `np.array([1, 0, 0, 0, 1, 0, 0, 0, 1])` or of a number it chose (`np.array(rot_label)`), the labels of an episode `np.repeat(range(n_way), n_query)`, "
        "is flagged, while a shuffle or a stack of the batch's own arrays is data), rows a step appends from its batch (`labels.append(classes[int(v)])` for each `v` of the loader's labels, then `torch.tensor(labels).to(device)`; not from a loop over a device tensor), rows a comprehension makes of a collection the code holds (a batched seq2seq's `torch.LongTensor([pad_seq(s, n) for s in input_seqs]).cuda()` of pairs drawn from the corpus, not of values read back from the device, `torch.tensor([mapping[a] for a in target.tolist()]).cuda()`, which cross a second time and are flagged; "
        "rows made of a `range`, of a string written in the code, or of a tensor's elements read back with `.item()` are flagged), a batch a loader cuts from the data it holds at a position it computes "
        "(`torch.tensor(self.tokens[pos:pos + n].astype(np.int32)).cuda()`), a tensor made from what a function "
        "read and the batches cut from it (`data = torch.tensor(encode(text))`, then "
        "`torch.stack([data[i:i + n] for i in ix]).to(device)`; also through a legacy constructor and a name bound to "
        "part of what a function returned: `states, rewards = memory.sample(n)`, then `torch.FloatTensor(states).to(device)`, or a field of it, `torch.tensor(batch[\"actions\"])` of `batch = buffer.sample(n)`, also such fields joined by NumPy, `np.concatenate([obs, goal], axis=1)`; the loader's batch converted, augmented and wrapped again, `points = points.data.numpy()`, then `torch.Tensor(points).cuda()` or `torch.tensor(states, dtype=torch.float).to(device)`, also through NumPy's conversions and arithmetic with a number (`torch.FloatTensor(1 - np.float32(dones))`), and an observation a rollout rebinds to its own tensor (`state = torch.FloatTensor(state).to(device)`) or hands to a method of this module (`get_action(state)`); also in the buffer's own `sample`, `torch.FloatTensor(self.state[ind])` of the arrays its `add` fills), a tensor built and moved only while its name is unset (`br = x.cuda() if br is None else br`), a pinned buffer (`pin_memory=True`, "
        "made to be copied) and what `torch.from_file` reads, an environment's observation (`torch.tensor([self.state]).cuda()` of what `env.reset()` or "
        "`env.step(action)` returned, also `torch.FloatTensor(state)` in a policy's `select_action(state)` that the script calls with its observation, reshaped or copied: `state = copy.copy(next_state)`), "
        "rows picked by an index from a tensor the code holds (`storage[idx].cuda()`, `Variable(feats.index_select(0, idx)).cuda()`; rows of a factory's tensor built in the step are flagged, as are new axes of one, `torch.eye(n)[:, :, None, None].to(x.device)`), a tensor an object keeps and replaces with its copy (`self.window = self.window.to(x)`), "
        "casts (`.to(torch.long)`, `.to(dtype)`, `.to(dtype=...)`), moves to the host (`.to(\"cpu\")`), factories that "
        "already pass `device=` (or in a module that sets a CUDA default with `torch.set_default_device`, or that a script importing it may set one for: ssd.pytorch's `train.py` calls `torch.set_default_tensor_type(\"torch.cuda.FloatTensor\")`, so its loss's `torch.Tensor(num, n, 4)` is built on the device; elsewhere that legacy constructor of the default type builds on the host and is flagged, as are the typed ones, `torch.LongTensor(n)`), an empty one (`torch.Tensor([]).to(device)`, `torch.zeros((0, 1)).to(x.device)`: nothing crosses), the branch for data with nothing in it (`if len(tgt_boxes) == 0: return torch.as_tensor(0.).to(\"cuda\")`: the rare steps whose batch has no targets), a branch only a call passing an optional argument takes (the `else` of `if batch_size is None:` in a `forward` that every training step, in another module, calls as `model(text)`; the prediction after training passes `batch_size`; `if gen_image:` in a `forward` that the training loop a script hands the model to calls as `model(x)`, and what that branch runs in other modules; a branch on what an object keeps from a constructor parameter that no construction gives, `if self.remap is not None:` of taming's quantizer that the project builds without `remap`, handed on or not), a cache filled once per key (`if i not in self.sr_u: self.sr_u[i] = torch.ones(n).normal_().cuda()`; a filter, `if i not in self.skip:`, is no cache, and code outside training steps (the `forward` of each block of an `nn.ModuleList` or `nn.Sequential` the step's model runs is inside them, as TL401's page says; code past a `continue` or `return` of its block is not). The fix is safe (applied by `--fix`) only when "
        "the argument is surely a device (`\"cuda:0\"`, `torch.device(...)`, a tensor's `.device`, or a name bound "
        "only to those) and the factory's values cannot change with it (no `**kwargs`, `requires_grad=True`, "
        "random draw, `linspace` or fractional `arange`); otherwise it is offered as unsafe, or not at all."
    )
    verification = "`trainlint verify run` records copies of host tensors to the device by line and per step (on CUDA)."
    valid = (
        # the same constant registered as a buffer, and one replaced by its copy on first use
        """
import numpy as np
import torch
from torch import nn
class MelSpectrogram(nn.Module):
    def __init__(self, n_mels, n_fft):
        super().__init__()
        self.register_buffer("mel_basis", torch.from_numpy(np.load("mel.npy")).float())
        self.window = torch.hann_window(n_fft)
    def forward(self, spec):
        self.window = self.window.to(spec)
        return torch.matmul(self.mel_basis.to(spec), spec) * self.window.sum()
mel = MelSpectrogram(80, 1024)
for x, y in loader:
    loss = (model(x.cuda()) - mel(y.cuda())).abs().mean()
    loss.backward()
    optimizer.step()
""",
        """
import torch
for x in loader:
    x = x.to(device, non_blocking=True)
    mask = torch.ones(4, device=device)
    model(x, mask).backward()
    optimizer.step()
""",
        # an empty tensor: nothing crosses
        """
import torch
for x in loader:
    x = x.cuda()
    extra = torch.zeros((0, 4)).to(x.device)
    model(torch.cat([x, extra])).backward()
    optimizer.step()
""",
        """
import torch
for x in loader:
    conf_t = torch.cuda.LongTensor(x.size(0), 8732)
    model(x.cuda(), conf_t.cuda()).backward()
    optimizer.step()
""",
    )
    invalid = (
        # a constant the module keeps as a plain attribute, not a buffer (a mel filter bank)
        """
import numpy as np
import torch
from torch import nn
class MelSpectrogram(nn.Module):
    def __init__(self, n_mels, n_fft):
        super().__init__()
        self.mel_basis = torch.from_numpy(np.load("mel.npy")).float()
    def forward(self, spec):
        return torch.matmul(self.mel_basis.to(spec), spec)
mel = MelSpectrogram(80, 1024)
for x, y in loader:
    loss = (model(x.cuda()) - mel(y.cuda())).abs().mean()
    loss.backward()
    optimizer.step()
""",
        """
import torch
for x in loader:
    noise = torch.randn(x.shape).cuda()
    model(x + noise).backward()
    optimizer.step()
""",
        # a signal window is a factory of sizes too (`torch.stft(..., window=torch.hann_window(n, device=...))`)
        """
import torch
for audio in loader:
    audio = audio.cuda()
    window = torch.hann_window(400).to(audio.device)
    model(torch.stft(audio, 400, window=window, return_complex=True).abs()).backward()
    optimizer.step()
""",
        """
import torch
for x, targets in loader:
    conf_t = torch.LongTensor(x.size(0), 8732)
    match(targets, conf_t)
    conf_t = conf_t.cuda()
    model(x.cuda(), conf_t).backward()
    optimizer.step()
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        groups: dict[int, list[tuple[Call, Finding]]] = {}
        for call, finding in self._moves(model):
            statement = call.site.statement
            groups.setdefault(id(statement) if statement is not None else id(call.node), []).append((call, finding))
        for group in groups.values():
            yield _one_per_statement(model, group)

    def _moves(self, model: TrainingModel) -> Iterator[tuple[Call, Finding]]:
        """Each move of a host tensor on a per-step line, with its call."""
        for call in model.calls:
            moved = moved_host_tensors(model, call)  # (`to_var(torch.randn(n, d))`, `utils.cuda([imgs, z])`)
            if moved:
                shown = ", ".join(f"`{shorten(model.module.code_for_node(e), 40)}`" for e in moved[:3])
                yield call, Finding(call.node, f"{shown} {'is' if len(moved) == 1 else 'are'} built on the host and copied to the device by `{shorten(model.module.code_for_node(call.node.func), 40)}` every step")
                continue
            if _cuda_copy_of_numbers(model, call):
                yield call, Finding(call.node, f"`{shorten(model.module.code_for_node(call.node), 50)}` copies an array NumPy built on the host from numbers to the device every step (build it there: `torch.randn(n, d, device=...)`)")
                continue
            if call.method not in ("cuda", "to", "type_as", "type") or not model.every_step(call.site) or not _moves_device(model, call):
                continue
            if call.site.function is not None and moved_parameter(model, call.site.function) is not None:
                continue  # (a moving helper's move: reported where a caller hands it a host tensor)
            factory = model.imports.resolve(call.receiver.func) or "" if isinstance(call.receiver, cst.Call) else ""
            name = factory.rsplit(".", 1)[-1]
            direct = factory.startswith("torch.") and factory.count(".") == 1 and name in DETERMINISTIC | RANDOM | LEGACY_CONSTRUCTORS
            if not direct and call.receiver is not None:
                # built on the host, from factories only, then copied: `alpha = torch.rand(n, 1); alpha = alpha.cuda()`
                if _minibatch(call.receiver) or _moved_once(model, call):
                    continue
                value = model.value(call.receiver, call.site)
                kept = kept_on_host(model, call, value)
                if kept is not None:
                    yield call, Finding(call.node, f"`{kept}` is a host tensor the object keeps (built once, not a buffer), copied to the device every step")
                    continue
                passed = kept_array_passed(model, call)
                if passed is not None:
                    yield call, Finding(call.node, f"`{passed[0]}`, passed as `{passed[1]}`, is a host array the object keeps (built once, not a buffer), copied to the device every step")
                    continue
                if isinstance(call.receiver, cst.Name) and not built_on_host(value):
                    value = rebuilt_each_round(model, call.receiver.value, call) or value
                built = (value.origin or "").removeprefix("torch.")
                if built_on_host(value) and not built.endswith("_like") and not wraps_observation(model, call.receiver, call.site.function, call.site) and not filled_with_data(model, call.receiver, call.site):
                    shown = shorten(model.module.code_for_node(call.receiver), 50)
                    if built == "from_numpy":  # (`path = np.zeros_like(v)` filled on the host, then wrapped)
                        yield call, Finding(call.node, f"`{shown}` wraps an array NumPy built on the host, copied to the device every step")
                        continue
                    yield call, Finding(call.node, f"`{shown}` is built on the host by `torch.{built}(...)` and copied to the device every step{_legacy(built)}")
                continue
            if not direct:
                continue
            if name.endswith("_like") or _empty(call.receiver, name):
                continue  # `torch.randn_like(x)` is built on x's device; `torch.zeros((0, 1))` holds nothing to copy
            if name in ("tensor", "as_tensor", *LEGACY_CONSTRUCTORS) and not built_on_host(model.value(call.receiver, call.site)):
                continue  # `torch.tensor(x)` of the batch a loop draws, `torch.FloatTensor(states)` of a replay buffer's sample: data
            if name in LEGACY_CONSTRUCTORS and call.receiver.args and observed(model, call.receiver.args[0].value, call.site.function, call.site):
                continue  # `torch.FloatTensor(state)` of an environment's observation, here or passed by the caller
            if any(a.keyword is not None and a.keyword.value == "device" for a in call.receiver.args):
                continue
            if name not in LEGACY_CONSTRUCTORS and model.values.default_device != HOST:
                continue  # the module made the device the default: the factory builds there
            # (no `device=` for a legacy constructor; `.type(torch.cuda.FloatTensor)` also casts)
            fix = _fix(model, call, name) if name not in LEGACY_CONSTRUCTORS and call.method != "type" else None
            yield call, Finding(call.node, f"`torch.{name}(...)` is built on the host and copied to the device every step{_legacy(name)}", fix=fix)


def _one_per_statement(model: TrainingModel, group: list[tuple[Call, Finding]]) -> Finding:
    """One finding per statement: the moves of one statement (a dict of `torch.tensor(...).to(device)`
    entries) are one defect, reported at the first, naming the others, with their fixes as one."""
    group.sort(key=lambda pair: pair[0].site.order)
    first = group[0][1]
    if len(group) == 1:
        return first
    others = [f"`{shorten(model.module.code_for_node(call.node), 40)}`" for call, _ in group[1:]]
    fixes = [f.fix for _, f in group if f.fix is not None]
    fix = None
    if len(fixes) == len(group):  # (all or nothing: a fix that left one move would not end the defect)
        safe = all(f.applicability == Applicability.SAFE for f in fixes)
        edits = tuple(e for f in fixes for e in f.edits)
        fix = NodeFix(f"create each on the device ({len(fixes)} tensors)", edits, Applicability.SAFE if safe else Applicability.UNSAFE)
    return Finding(first.node, f"{first.message} (and, in the same statement, {listed(others)})", fix=fix, facts={**first.facts, "moves": len(group)})


def _empty(factory: cst.Call, name: str) -> bool:
    """A factory sized 0 along an axis (`torch.zeros((0, 1))`, `torch.empty(0, 4)`) or of no elements (`torch.tensor([])`)."""
    if name in ("tensor", "as_tensor") and factory.args and isinstance(factory.args[0].value, (cst.List, cst.Tuple)):
        return not factory.args[0].value.elements  # `torch.tensor([])`
    if name not in ("zeros", "ones", "empty", "full", "rand", "randn"):
        return False
    sizes = [a.value for a in factory.args if a.keyword is None]
    sizes = sizes[:1] if name == "full" else sizes
    if len(sizes) == 1 and isinstance(sizes[0], (cst.Tuple, cst.List)):
        sizes = [e.value for e in sizes[0].elements]
    return any(isinstance(s, cst.Integer) and s.evaluated_value == 0 for s in sizes)


def _cuda_copy_of_numbers(model: TrainingModel, call: Call) -> bool:
    """`torch.cuda.FloatTensor(np.random.normal(0, 1, (n, d)))` every step: a legacy CUDA constructor
    given an array NumPy built from numbers copies it from the host (given sizes, it allocates there)."""
    if len(call.node.args) != 1 or call.node.args[0].keyword is not None or not is_cuda_type(model, call.node.func, call.site):
        return False  # (also `dtype(array)` of `dtype = torch.cuda.FloatTensor if x.is_cuda else torch.FloatTensor`)
    return model.every_step(call.site) and numpy_built(model, model.imports.resolve, model.values.of, call.node.args[0].value, call.site.function, call.site)


def _minibatch(receiver: cst.BaseExpression) -> bool:
    """`obs[:, idx]`, `returns[idx].to(torch.float32)`, `Variable(feats.index_select(0, idx))`: rows
    of a host buffer picked by an index, a minibatch of stored data (as a DataLoader's batch is), not
    a tensor the step builds."""
    while isinstance(receiver, cst.Call):
        if isinstance(receiver.func, cst.Attribute):
            if receiver.func.attr.value == "index_select" and len(receiver.args) == 2 and not isinstance(receiver.func.value, cst.Call):
                return True  # (rows of a tensor the code holds; `torch.eye(n).index_select(...)` is built here)
            receiver = receiver.func.value
        elif isinstance(receiver.func, cst.Name) and receiver.args and (receiver.func.value == "Variable" or len(receiver.args) == 1):
            receiver = receiver.args[0].value  # (the legacy `Variable`, a helper's view: `flatten01(obs[:, idx])`)
        else:
            break
    if not isinstance(receiver, cst.Subscript):
        return False
    for element in receiver.slice:
        index = element.slice
        if isinstance(index, cst.Index) and not isinstance(index.value, (cst.Integer, cst.UnaryOperation, cst.Ellipsis)) and not _new_axis(index.value):
            return True  # (`torch.eye(n)[:, :, None, None]` adds axes: it picks nothing)
    return False


def _new_axis(expr: cst.BaseExpression) -> bool:
    """`None` as an index: a new axis."""
    return isinstance(expr, cst.Name) and expr.value == "None"


def _moved_once(model: TrainingModel, call: Call) -> bool:
    """`self.noise = self.noise.to(y)`: the moved tensor replaces the host one the object keeps, so the
    copy happens once (a local name rebuilt each step is copied each step); also `br = x.cuda() if br
    is None else br`, built and moved on the first step only."""
    statement = call.site.statement
    if statement is not None and any(isinstance(n, cst.IfExp) and is_cached_value(n) and _contains(n.body, call.node) for n in iter_nodes(statement)):
        return True
    if not isinstance(call.receiver, cst.Attribute):
        return False
    text = model.module.code_for_node(call.receiver)
    return any(text in a.targets and _contains(a.value, call.node) for a in model.assigns_in(call.site.statement))


def _contains(expr: cst.CSTNode, node: cst.CSTNode) -> bool:
    return any(n is node for n in iter_nodes(expr))


def _legacy(name: str) -> str:
    """What to say of a legacy typed constructor, which cannot be given a device."""
    if name == "Tensor":
        return " (the legacy constructor of the default tensor type, on the CPU here: build it with `torch.empty(...)` or `torch.tensor(...)` and `device=...`)"
    return " (a legacy constructor, always on the CPU: build it with `torch.empty(..., dtype=..., device=...)`)" if name in LEGACY_CONSTRUCTORS else ""


def _fix(model: TrainingModel, call: Call, name: str) -> NodeFix | None:
    """`torch.zeros(n).to(device)` -> `torch.zeros(n, device=device)`: two edits, `, device=...`
    after the factory's last argument and the `.to(...)` removed, so that the factory's own text
    (its comments, its line breaks) is kept.

    Safe only when the result computes the same tensor: the argument is a device beyond doubt
    (`.to(other_tensor)` would also cast; `.to(torch.long)` is no move at all), the factory cannot
    already be given a device (`**kwargs`, `*args` of `as_tensor`), none of its keywords changes
    what `device=` means (`requires_grad=True`: a leaf on the device instead of a copy of a host
    leaf), its values do not depend on where they are computed (random draws, `linspace`, a
    float `arange`), and what `.to()` is left without (`non_blocking=`) changes no value.
    """
    factory = call.receiver
    assert isinstance(factory, cst.Call)
    device: cst.BaseExpression | None = None
    for arg in call.node.args:
        if arg.keyword is None and not arg.star and device is None and call.method == "to":
            device = arg.value
        elif arg.keyword is not None and arg.keyword.value == "device" and device is None and call.method == "to":
            device = arg.value
        elif not (arg.keyword is not None and arg.keyword.value in _COPY_KEYWORDS and _without_effects(arg.value)):
            return None  # `.to(device, torch.float16)`, `.cuda(1)`: more than a move
    if (call.method == "to" and device is None) or not factory.args or factory.lpar:
        return None
    if device is not None and (is_dtype(model, device, call.site) or model.value(device, call.site).is_tensor):
        return None  # a cast, or `.to(other)`: other's device and dtype
    if _has_comment(call.node, (factory, device) if device is not None else (factory,)):
        return None  # the `.to(...)` being removed holds a comment
    text = model.module.code_for_node(device).strip() if device is not None else '"cuda"'
    if "\n" in text:
        return None
    safe = name not in RANDOM and _plain_factory(model, factory, name, call.site) and (
        device is None or (_proven_device(model, device, call.site) and _without_effects(device))
    )
    edits = (
        NodeEdit(factory.args[-1], f", device={text}", "after"),
        NodeEdit(factory, "", "tail", until=call.node),
    )
    inner = model.module.code_for_node(factory)
    shown = f"{inner[:-1].rstrip()}, device={text})" if "\n" not in inner and "#" not in inner else f"{model.module.code_for_node(factory.func)}(..., device={text})"
    return NodeFix(f"create on the device: `{shown}`", edits, Applicability.SAFE if safe else Applicability.UNSAFE)


def _plain_factory(model: TrainingModel, factory: cst.Call, name: str, site: Site) -> bool:
    """The factory call gives the same values wherever it runs, and takes `device=` without a clash."""
    if name in _COMPUTED:
        return False
    positional = [a for a in factory.args if a.keyword is None]
    for arg in factory.args:
        if arg.star == "**":
            return False  # may hold `device=`
        if arg.star == "*" and name == "as_tensor":
            return False  # `as_tensor(data, dtype, device)` took them positionally once
        if arg.keyword is not None:
            key = arg.keyword.value
            if key not in _PLAIN_KEYWORDS and not (key in _FALSE_KEYWORDS and isinstance(arg.value, cst.Name) and arg.value.value == "False"):
                return False
    if name == "as_tensor" and len(positional) > 1:
        return False
    if name == "arange":
        return all(not a.star and _integral(model, a.value, site) for a in positional)
    return True
