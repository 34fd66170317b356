"""TL303 eval-forward-with-grad."""

from __future__ import annotations

import re
from typing import Callable, Iterable, Iterator

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import Call, Function, TrainingModel
from trainlint.model.hooks import LIBRARY_NO_GRAD_HOOKS, library_step_hook
from trainlint.model.decoding_loops import decoding_forward
from trainlint.model.evaluation import (
    discarded_by_callers, evaluated_here, frozen_modules, grad_disabled, grad_off_everywhere, inside_forward, last_mode,
    prediction_forward, prediction_loop_forwards, runs_module, step_list_evaluations, step_prediction, trains_any,
)
from trainlint.model.graph_uses import differentiates
from trainlint.model.modes import loop_ancestors
from trainlint.model.modes import function_trains as _trains
from trainlint.model.modes import mode_switch as _mode
from trainlint.model.modes import mode_switches as _switches
from trainlint.model.lattice import Kind
from trainlint.model.names import dotted, tokens
from trainlint.model.training import LOOP_TEXT
from trainlint.rules.rule import Finding, Rule, shorten

# `convert_module(model)`, `load_model(path)`: verbs acting on a model, not a forward pass through one
NOT_FORWARD_VERBS = frozenset(
    """convert load build get set wrap unwrap setup prepare save create init make move copy freeze unfreeze
    compile register print log reset apply count summarize summarise export""".split()
)


_EVAL_CALL = re.compile(r"\.[\s\\]*eval[\s\\]*\(|\.[\s\\]*train[\s\\]*\([\s\\]*(mode[\s\\]*=[\s\\]*)?False")
_DEF = re.compile(r"\bdef[ \t\\]+(\w+)")


# a module decorating its prediction helper with a wrapper of its own (for the examples)
_WRAPPED_PREDICT = """
import torch as t
from torch import nn

def {name}(f):
    def new_f(*args, **kwargs):
{body}
    return new_f

class Detector(nn.Module):
    def forward(self, x):
        return self.head(x)

    @{name}
    def predict(self, imgs):
        self.eval()
        return [self(img).argmax(1) for img in imgs]
"""


# a forward two calls below the evaluation loop's `with torch.no_grad():` (for the examples)
_TILED = """
import torch
def run_tiles(lq, model):
    outs = []
    for tile in lq.split(64, dim=-1):
        outs.append(model(tile).detach().cpu())
    return torch.cat(outs, -1)
def run_clip(lq, model):
    return run_tiles(lq, model)
def main(model, loader, first, device):
    model.eval()
    for lq in loader:
        with torch.no_grad():
            out = run_clip(lq.to(device), model)
        save(out.numpy())
{last}"""


class EvalForwardWithGrad(Rule):
    code = "TL303"
    name = "eval-forward-with-grad"
    severity = Severity.WARNING
    summary = "Forward passes in evaluation code outside `torch.no_grad()` / `torch.inference_mode()`."
    hint = "Wrap evaluation in `with torch.no_grad():` (or decorate the function with `@torch.inference_mode()`)."
    requires = ("eval", "train(", "argmax", ".max(", ".numpy(", ".tolist(", "backward", "multinomial", "topk(")

    @classmethod
    def may_fire(cls, source: str, imports_project: Callable[[], bool]) -> bool:
        # a module switched to evaluation (`.eval()`, `.train(False)`) and run in a loop or a function
        if _EVAL_CALL.search(source):
            return LOOP_TEXT.search(source) is not None or _DEF.search(source) is not None
        # a helper returning predictions or a loop keeping them, or, in a module that trains, a helper
        # running a module over batches whose result its callers do not backpropagate
        looped, defined = LOOP_TEXT.search(source) is not None, _DEF.search(source) is not None
        if any(t in source for t in ("argmax", ".max(", ".numpy(", ".tolist(", "multinomial", "topk(")):  # labels (`torch.max(outputs, 1)`), host arrays, tokens drawn
            return looped or defined
        return "backward" in source and defined
    why = (
        "Outside `no_grad`, every forward pass on parameters that require grad records an autograd graph and "
        "saves its activations for a backward that never comes. Evaluation then uses several times the "
        "memory it needs (and OOMs on batch sizes that train fine) and runs slower; accumulated metrics keep "
        "the graphs alive."
    )
    story = "skorch #218 (OOM narrowed to the validation step; fixed by `no_grad`), OpenNMT-py #1141, hszhao/semseg #60."
    example = """\
import torch

def evaluate(model, loader):
    model.eval()
    total = 0
    for x, y in loader:
        total += criterion(model(x), y).item()
    return total
"""
    fixed_example = """\
import torch

@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total = 0
    for x, y in loader:
        total += criterion(model(x), y).item()
    return total
"""
    not_flagged = (
        "Evaluation under `no_grad`/`inference_mode` (a `with` block, also of a function of the module that returns `torch.no_grad()` and on its other paths only a context that does nothing, as `with _get_no_grad_ctx_mgr():` whose helper gives `contextlib.suppress()` to PyTorch before 0.4, a decorator, also a project's own that applies one (YOLO's `@smart_inference_mode()`, returning `(torch.inference_mode if ok else torch.no_grad)()(fn)`), a module that turns autograd off at its top level with `torch.set_grad_enabled(False)` under no test and never on again, or every call site inside "
        "one, or in a function of the module whose every call site is: `with torch.no_grad(): run_clip(...)`, whose `run_clip` runs the forward through `run_tiles`; a method only while no module importing its module calls a method of that name outside no_grad, as a script's `gan.visualize_results(epoch)` after training does; a method or a function its own module never calls is under no_grad when modules importing its module call it only under no_grad (in a `with` block, or in a function of theirs every call of which is under one), `@torch.no_grad() def test(agent, env): ... agent.get_greedy_action(obs)`, Decision Transformer's `evaluate_episode(model, env)` that experiment.py runs under `with torch.no_grad():`; when no importer calls it, the modules that call a method of that name say, other than those defining one or importing a module that does: an evaluator handed the decoder by a training script, never importing the decoder's module, running `self.decoder.generate(x)` under `torch.no_grad()`; a call by the name on an object known to be of another class, `searcher.generate(x)` after `searcher = BeamSearch(self)`, is no call of it), loops that backpropagate (also through `torch.autograd.grad`, directly or in a method of the module: FROMP's `self.cac_grad(loss, outputs)`, or one calling such a method, `self.cac_jacobian(preds, outputs)`; meta-learning, adversarial evaluation, fine-tuning with batch-norm "
        "statistics frozen by `eval()`), a loss or layer without parameters given an output made under `no_grad` (`with torch.no_grad(): output = model(x)`, then `criterion(output, y)`; in a prediction loop, any module given one: `loss_fct = FocalLoss(2) if focal else CrossEntropyLoss()`), an object whose class has no base but `object` whatever its methods are called (a `forward` of numpy code is no module's), modules frozen with `requires_grad_(False)` or by a loop setting `requires_grad = False` on each of their parameters (`for k, v in model.named_parameters(): v.requires_grad = False`; a loop that freezes some, under an `if`, freezes none), a module switched back "
        "with `.train()`, a library's evaluation hooks, which it runs without grad (`validation_step` of a "
        "`LightningModule`, `evaluate`/`prediction_step` of an HF or trl `Trainer`: known from the class's bases, "
        "not the method's name), code that never runs (past an early `return` of its block, or in an `except` handler), a probe of a layer's output size that gives back only the size (`self.features(torch.zeros(1, *shape)).view(1, -1).size(1)`, whose graph dies at once), and test code (`tests/`, a `test_*.py` that defines a test: a `test_agent.py` that trains is no test module). Evaluation is found by what the code does: a module switched to eval "
        "mode (`.eval()`, `.train(False)`) and run (a method of it given a tensor or what the `for` around it draws runs it, `lm_model.log_prob(word_t)`; not a method of it given nothing, `self._device()`, nor one of this module), in the function that switched it, in a helper its caller "
        "switched it for, or in a loop of a training driver that validates between epochs; or a prediction "
        "helper: a function that runs a module (known as one by its value) and gives back only what no backward "
        "can reach (`argmax` labels, strings, numbers, a tuple of them as `return predicted_class, predicted_probability` of two `.item()`s, host arrays: a knowledge-graph model's `predict` giving back `score.cpu().data.numpy()`, an agent's `eval_step` giving back `to_np(q.argmax(-1))`; a list it fills with host arrays), keeping nothing that may carry a graph on objects, in its arguments or in an object it holds (`self.memory.store(out)`), and differentiating nothing (a backward or `torch.autograd.grad`, also in a function nested in it; a counter or a setting it updates, `self.time_step += 1`, keeps no graph) (a module run by name, `encoder.forward(x)`, runs as `encoder(x)` does, and so does a method of a module class of the project that returns what its layers give, `model.prediction(word)` for `def prediction(self, inputs): return self.embedding_v(inputs)`, or a tuple of it, a policy's own `action, log_pi, mean = self.policy.sample(state)`, while a library model's `generate` or `sample` records none), also one the training loop runs every step and that trains nothing (a policy's `select_action` returning `self.actor(state).cpu().data.numpy().flatten()`, a DQN's own `act` running `self.forward(state)` for the action the loop hands the environment). A "
        "submodule of a module switched to eval mode is in eval mode (`net.eval()`, then `net.decoder(x)`). "
        "A loop of the script itself that runs a module, trains nothing and keeps only what no backward can reach (labels, host arrays, numbers) is a prediction loop; so is such a loop in a function that trains, with or without an eval switch (a periodic test inside the training loop, `if episode % 5000 == 0: for i in range(TEST_EPISODE): ...`, counting `total_rewards += np.sum(rewards)`), and predictions read with `_, predicted = torch.max(out.data, 1)` are `argmax`'s. "
        "The script's top level (a notebook's cells) is evaluation code like a function's body: its first forward in a loop, of a module it switched to eval mode, outside `no_grad`, in no loop that backpropagates (the epoch loop around the step loop does not count: the test set's loop inside it, after `model.eval()`, is reported), is reported; one forward outside any loop (a model file's `if __name__ == \"__main__\":` self-check) is a demonstration. "
        "A loop that feeds what a module gives, through `argmax`, back to that module as its next input (greedy decoding: `Y, state = decoder(outputs[-1], state)`, then `outputs.append(Y.argmax(2))`), in a function that neither backpropagates nor trains, records graphs no backward can use; so does one feeding back a token drawn with `torch.multinomial` or picked with `topk` (a GPT's `generate`: `idx_next = torch.multinomial(probs, 1)`, then `idx = torch.cat((idx, idx_next), 1)`; also `self(idx)` in a method of the model) where the function returns only what it fed back (a sampler returning the log-probabilities too leaves them to a caller's backward). "
        "A function (not a method) that runs a module over the batches of a loop, trains nothing, and whose every caller in the module lets what it returns die without a backward is evaluation code too. A driver that runs a list of step functions over batches (`for step in steps: step(batch, state)`), called once with steps of which one backpropagates and once, outside no_grad, with steps that share a module-running step with them and none of which backpropagates, evaluates with grad: the second call is reported (the steps are known from the list or tuple passed, or the caller's default). Calls of a diffusers pipeline run under no_grad (the library's `__call__` says so). "
        "A function's name never makes it evaluation code. An evaluation function gets one finding, at its first forward in a loop (else its first): one `no_grad` around its body, or a decorator, fixes every forward of it, those of other branches too."
    )
    verification = "`trainlint verify run` records, by line, the script's outermost forward calls that run with autograd on (in eval mode or not)."
    valid = (
        # a model file's self-check: one forward of the script outside any loop is a demonstration
        "import torch\nnet = torch.nn.Linear(4, 2).cuda()\nnet.eval()\nprint(net(torch.rand(1, 4).cuda()).shape)\n",
        # an evaluation switched off by an early `return`: the loop after it never runs
        """
def test(model, loader):
    return
    model.eval()
    for batch, label in loader:
        print(model(batch.cuda()).argmax(1).eq(label.cuda()).sum().item())
""",
        # the same loop under no_grad, and one keeping the outputs themselves (for a later backward)
        """
import torch
net = torch.nn.Linear(4, 2).cuda()
preds, outputs = [], []
with torch.no_grad():
    for X in test_iter:
        preds.extend(net(X.cuda()).argmax(dim=1).cpu().numpy())
for X in batches:
    outputs.append(net(X.cuda()))
""",
        # a loss over several batches that the caller backpropagates (and a diffusers pipeline, which
        # runs under no_grad itself)
        """
import torch
from diffusers import StableDiffusionPipeline
def chunked_loss(net, chunks, loss):
    total = 0.0
    for x, y in chunks:
        total += loss(net(x), y)
    return total / len(chunks)

def sample(unet, prompts):
    pipeline = StableDiffusionPipeline.from_pretrained("sd", unet=unet)
    for prompt in prompts:
        pipeline(prompt).images[0].save(prompt + ".png")

def train(net, batches, optimizer, loss):
    net = net.cuda()
    for chunks in batches:
        optimizer.zero_grad()
        chunked_loss(net, chunks, loss).backward()
        optimizer.step()
    sample(net, ["a cat"])
""",
        # preparing a model for inference is not a forward pass through it
        """
def load_for_eval(paths, fabric):
    for path in paths:
        model = load_model(path)
        model.eval()
        model = fabric.convert_module(model)
""",
        """
import torch
def validate(model, loader):
    model.eval()
    with torch.no_grad():
        for x in loader:
            out = model(x)
""",
        """
import torch
def evaluate(model, loader):
    for x in loader:
        out = model(x)

with torch.inference_mode():
    evaluate(model, val_loader)
""",
        # frozen in the chain that switches it: no graph is recorded
        """
import torch
def compute_metric(sampler, batches):
    sampler.eval().requires_grad_(False)
    return [sampler(c) for c in batches]
""",
        # a helper of a module's own forward pass (ranking answers when not training): the forward's
        # callers decide whether a graph is recorded
        """
import torch
from torch import nn
class VQA(nn.Module):
    def __init__(self):
        super().__init__()
        self.decoder = nn.Linear(8, 8)

    def forward(self, x, train=True):
        if train:
            return self.decoder(x).mean()
        return self.rank_answer(x)

    def rank_answer(self, x):
        scores = self.decoder(x)
        _, ids = scores.topk(3, dim=1)
        return ids

model = VQA().cuda()
model.eval()
""",
        # the module's own decorator runs what it wraps under no_grad
        _WRAPPED_PREDICT.format(name="nograd", body="        with t.no_grad():\n            return f(*args, **kwargs)"),
        # every parameter frozen by a loop over them (a test script's idiom): no graph is recorded
        """
import torch
def denoise(model, images, device):
    model.eval()
    for k, v in model.named_parameters():
        v.requires_grad = False
    model = model.to(device)
    for img in images:
        out = model(img.to(device))
        save(out.cpu().numpy())
""",
        # the forward two calls below a `with torch.no_grad():`: every call of each helper is inside it
        _TILED.format(last=""),
    )
    invalid = (
        # the script's own test loop: a module switched to eval mode, run over a loader outside no_grad
        "import torch\nnet = torch.nn.Linear(4, 2).cuda()\nnet.eval()\nfor x in loader:\n    print(net(x.cuda()).argmax(1))\n",
        # a decorator of the module that does not turn autograd off
        _WRAPPED_PREDICT.format(name="logged", body="        print(f.__name__)\n        return f(*args, **kwargs)"),
        # some parameters frozen (under an `if`): the others still record a graph
        """
import torch
def denoise(model, images, device):
    model.eval()
    for k, v in model.named_parameters():
        if "backbone" in k:
            v.requires_grad = False
    model = model.to(device)
    for img in images:
        out = model(img.to(device))
        save(out.cpu().numpy())
""",
        # a notebook's test-set loop keeping only labels
        """
import torch
net = torch.nn.Linear(4, 2).cuda()
preds = []
for X in test_iter:
    y_hat = net(X.cuda())
    preds.extend(y_hat.argmax(dim=1).cpu().numpy())
""",
        # greedy decoding: the `argmax` fed back cuts every graph the loop records
        """
import torch
decoder = torch.nn.GRU(8, 8)
def translate(bos, state, num_steps):
    outputs = [bos]
    for _ in range(num_steps):
        Y, state = decoder(outputs[-1], state)
        outputs.append(Y.argmax(2))
    return outputs
""",
        # an evaluation helper known by its use: its only caller logs what it returns
        """
import torch
def evaluate_loss(data_iter, net, loss):
    l_sum, n = 0.0, 0
    for features, labels in data_iter:
        outputs = net(features)
        l_sum += loss(outputs, labels).sum()
        n += labels.numel()
    return l_sum / n

def train(net, train_iter, valid_iter, trainer, loss, epochs):
    net = net.cuda()
    for epoch in range(epochs):
        for features, labels in train_iter:
            trainer.zero_grad()
            loss(net(features), labels).sum().backward()
            trainer.step()
        valid_loss = evaluate_loss(valid_iter, net, loss)
        print(f"valid loss {valid_loss.detach().cpu():.3f}")
""",
        """
import torch
def validate(model, loader):
    model.eval()
    for x, y in loader:
        loss = criterion(model(x), y)
""",
        # a training driver validating its EMA copy between epochs
        """
import torch
def train(model, ema, loader, valid_batches, optimizer):
    for epoch in range(10):
        for x, y in loader:
            criterion(model(x), y).backward()
            optimizer.step()
        for x, y in valid_batches:
            ema.train(False)
            correct = (ema(x).argmax(1) == y).sum()
""",
        # the same helpers, one of whose calls runs outside no_grad: that call records the graph
        _TILED.format(last="    save(run_clip(first.to(device), model).numpy())\n"),
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        reported: set[int] = set()  # (a loop of a function that trains may be both an evaluation loop and a prediction loop)
        for finding in self._findings(model):
            if id(finding.node) not in reported:
                reported.add(id(finding.node))
                yield finding

    def _findings(self, model: TrainingModel) -> Iterator[Finding]:
        if model.is_test_code or grad_off_everywhere(model):
            return  # a test suite's inference checks; a module that turned autograd off at its top level
        switches, frozen = _switches(model), frozen_modules(model)
        sites: dict[Function, list[Call]] = {}  # the calls of each function of this module
        for call in model.calls if switches else ():
            callee = model.callee(call)
            if callee is not None:
                sites.setdefault(callee, []).append(call)
        for forward in prediction_loop_forwards(model, frozen_modules(model)):
            yield Finding(forward.node, "forward pass in a prediction loop records an autograd graph: the loop keeps only what no backward can reach")
        for call, trained, step in step_list_evaluations(model):
            code = model.module.code_for_node
            name = f"{step.parent.name}.{step.name}" if step.parent is not None else step.name  # (a closure: its factory's)
            yield Finding(
                call.node,
                f"`{shorten(code(call.node), 50)}` runs `{name}` over batches with autograd on, and none of its steps "
                f"backpropagates the graph that records (`{shorten(code(trained.node), 50)}` runs the same step with a backward)",
            )
        for fn in model.functions:
            if fn in model.step_functions:
                # (run every step: a helper giving back only predictions, `select_action`, still records a graph)
                forward = step_prediction(model, fn)
                if forward is not None:
                    yield Finding(forward.node, f"forward pass in `{fn.name}` records an autograd graph: it returns only predictions, which no backward can reach")
                continue
            if fn.class_name and library_step_hook(fn.name, model.class_bases(fn), LIBRARY_NO_GRAD_HOOKS):
                continue  # a library's evaluation hook, which the library runs under no_grad
            if _trains(model, fn) or any(differentiates(model, c) for c in fn.calls):
                # a driver that trains (or differentiates) and evaluates: its evaluation loops, where it switches a module to eval
                yield from self._evaluation_loops(model, fn, switches, frozen)
                continue
            # (whether every caller runs it under no_grad asks the callers' summaries: only for a forward found)
            finding = self._forward_recorded(model, fn, switches, frozen, sites)
            if finding is not None and not model.under_no_grad_everywhere(fn, importers=True):
                yield finding
        yield from self._script_evaluation(model, switches, frozen)

    def _forward_recorded(self, model: TrainingModel, fn: Function, switches: list[Call], frozen: set[str], sites: dict[Function, list[Call]]) -> Finding | None:
        """The finding of a function that is no training step and trains nothing, when it runs a
        forward pass that records a graph no backward reaches (what its callers do aside)."""
        here, by_callers = evaluated_here(fn, switches), _evaluated_by_callers(fn, sites.get(fn, ()), switches)
        if not here and not by_callers:
            forward = prediction_forward(model, fn)
            if forward is not None and not inside_forward(model, fn):
                return Finding(forward.node, f"forward pass in `{fn.name}` records an autograd graph: it returns only predictions, which no backward can reach")
            forward = decoding_forward(model, fn)
            if forward is not None:
                return Finding(forward.node, f"forward pass in a decoding loop of `{fn.name}` records an autograd graph: each turn feeds back a token it picked (`argmax`, a sample), through which no backward passes")
            forward = discarded_by_callers(model, fn, sites.get(fn, ()) if switches else model.calls_of(fn))
            return None if forward is None else Finding(forward.node, f"forward pass in a loop of `{fn.name}` records an autograd graph: no caller backpropagates what it returns")
        forwards = []
        for call in fn.calls:
            if call.site.function is not fn or model.under(call.site, "no_grad") or model.callee(call) is not None:
                continue  # (a helper of this module is judged on its own: `@torch.no_grad()` on it)
            if call.site.in_except:
                continue  # an error path, or code past a `return` that never runs
            if grad_disabled(fn, call):
                continue  # after `torch.set_grad_enabled(False)`
            callee = dotted(call.node.func) or ""
            mode = last_mode(callee, call, switches)
            if (runs_module(model, call, callee, here) and mode is False) or (runs_module(model, call, callee, by_callers) and mode is not True):
                pass  # a module in eval mode (or a submodule of one), run: a forward pass, in a loop or not
            elif not call.site.loops or not _module_forward(model, call, callee):
                continue
            if callee in frozen or model.value(call.node, call.site).graph is False:
                continue  # a frozen module (`requires_grad_(False)`) records no graph
            forwards.append(call)
        if not forwards:
            return None
        call = next((c for c in forwards if c.site.loops), forwards[0])  # (the first in a loop, where the memory grows, else the first)
        return Finding(call.node, f"forward pass in `{fn.name}` records an autograd graph: evaluation holds activations it never backpropagates")

    def _script_evaluation(self, model: TrainingModel, switches: list[Call], frozen: set[str]) -> Iterator[Finding]:
        """The script's top level (a notebook's cells): the first forward in a loop (over a test set, an environment's
        steps) of a module it switched to eval mode, outside no_grad, in no loop that backpropagates. (One forward
        out of any loop is a demonstration: a model file's self-check, a notebook showing an output's shape.)"""
        evaluated, forwards = evaluated_here(None, switches), []
        training: dict[int, bool] = {id(a): False for step in model.loops if step.is_step for a in loop_ancestors(step)}  # (by loop: whether a call in it trains; an epoch loop around a step loop is judged by its other loops)
        for call in model.calls if evaluated else ():
            callee = dotted(call.node.func) or ""
            if call.site.function is not None or not call.site.loops or call.site.in_except or model.under(call.site, "no_grad") or grad_disabled(None, call, model):
                continue
            if last_mode(callee, call, switches) is not False or not runs_module(model, call, callee, evaluated):
                continue
            for loop in call.site.loops:
                if id(loop) not in training:
                    training[id(loop)] = trains_any(model, (c for c in model.calls if loop in c.site.loops))
            if any(training[id(loop)] for loop in call.site.loops):
                continue  # (a loop that backpropagates: adversarial examples, fine-tuning with frozen statistics)
            if callee not in frozen and model.value(call.node, call.site).graph is not False:
                forwards.append(call)
        if forwards:
            yield Finding(forwards[0].node, "forward pass in a loop at the script's top level records an autograd graph: evaluation holds activations it never backpropagates")

    def _evaluation_loops(self, model: TrainingModel, fn: Function, switches: list[Call], frozen: set[str]) -> Iterator[Finding]:
        """In a function that trains: the loops that run a module it switched to eval mode (in the loop,
        or before it with no switch back), outside no_grad and without backpropagating. Each forward a
        graph starts from is reported (test-time augmentation runs the model twice); one fed by another's
        output is part of that graph."""
        switched = {s.receiver_text for s in switches}
        for loop in model.loops:
            if loop.function is not fn or loop.is_step:
                continue
            inside = [c for c in fn.calls if loop in c.site.loops]
            if not inside or any(loop in loop_ancestors(other) for other in model.loops if other.is_step):
                continue  # (an epoch loop around the step)
            if trains_any(model, inside):
                continue
            sources: set[cst.CSTNode | None] = set()
            outputs: set[str] = set()  # what the forwards reported give
            for call in inside:
                callee = dotted(call.node.func) or ""
                if model.under(call.site, "no_grad") or grad_disabled(fn, call) or last_mode(callee, call, switches) is not False:
                    continue
                if callee not in switched and not _module_forward(model, call, callee) and (not call.node.args or model.callee(call) is not None):
                    continue  # (`self._device()`, `self.model._device()`: a method of the module switched, no forward)
                if callee in frozen or model.value(call.node, call.site).graph is False:
                    continue
                if any(outputs & model.roots_of(a.value, fn) for a in call.node.args) or call.site.statement in sources:
                    continue
                yield Finding(call.node, f"forward pass in an evaluation loop of `{fn.name}` records an autograd graph: evaluation holds activations it never backpropagates")
                sources.add(call.site.statement)
                outputs |= {t for a in model.assigns_in(call.site.statement) for t in a.targets}


def _evaluated_by_callers(fn: Function, sites: "Iterable[Call]", switches: list[Call]) -> set[str]:
    """The parameters of `fn` whose argument a caller of this module switched to eval mode before the
    call (`net.eval()` then `test_net(net, ...)`): they name modules the function runs in eval mode."""
    out: set[str] = set()
    params = [p for p in fn.params if p not in ("self", "cls")]
    for site in sites:
        for index, arg in enumerate(a for a in site.node.args if not a.star):
            param = arg.keyword.value if arg.keyword is not None else (params[index] if index < len(params) else None)
            text = dotted(arg.value)
            if param and text and any(
                s.receiver_text == text and s.site.function is site.site.function and s.site.order < site.site.order
                and _mode(s) is False for s in switches
            ):
                out.add(param)
    return out


def _module_forward(model: TrainingModel, call: Call, callee: str) -> bool:
    """A call of a module, known as one by its value (not a verb acting on one: `load_model(p)`)."""
    words = tokens(callee.rsplit(".", 1)[-1])
    if words and words[0] in NOT_FORWARD_VERBS:
        return False
    return model.value(call.node.func, call.site).kind is Kind.MODULE
