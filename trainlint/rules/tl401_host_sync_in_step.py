"""TL401 host-sync-in-step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import libcst as cst

from trainlint.diagnostics import Severity
from trainlint.model import Call, Site, TrainingModel
from trainlint.model.environments import feeds_batch_source, feeds_environment
from trainlint.model.extract import calls_in
from trainlint.model.host_reads import (
    drained_by, header_calls as _header_calls, is_metric_log as _is_metric_log, truth_tested as _truth_tested, reported_at_callers as _reported_at_callers, passes_device_tensor as _passes_device_tensor,
    GIVEN_A_TENSOR, SYNC_METHODS, bare_numpy as _bare_numpy, chain_base as _chain_base, copies_to_host as _copies_to_host,
    count_argument as _count_argument, count_on_device as _count_on_device, converted_on_host as _converted_on_host, device_tensor as _device_tensor, formats_tensor as _formats_tensor, orders_tensors as _orders_tensors,
    in_optimizer_class as _in_optimizer_class, index_reads as _index_reads, INDEX_READS, sized_by_device_tensor as _sized_by_device_tensor, typed_to_host,
)
from trainlint.model.lattice import Kind
from trainlint.model.names import tokens
from trainlint.rules.rule import Finding, Rule, listed, shorten

HOST_COPIES = frozenset({"cpu", "numpy", "to"})
TO_KEYWORDS = frozenset({"device", "dtype", "non_blocking", "copy", "memory_format"})  # (those of `Tensor.to` and `Module.to`)
CONVERSIONS = frozenset({"float", "int", "bool"})
HOST_TESTS = frozenset({"math.isfinite", "math.isnan", "math.isinf", "torch.equal", "torch.allclose"})  # (a Python bool of the values)
ORDERING_BUILTINS = frozenset({"max", "min", "sorted"})
MODULE_RECEIVER_WORDS = frozenset({"model", "net", "module", "network", "self"})
# nn.Module's own API, which no tensor has: what they are called on is a module
MODULE_ONLY_METHODS = frozenset("parameters named_parameters state_dict buffers named_buffers modules named_modules children named_children".split())


class HostSyncInStep(Rule):
    code = "TL401"
    name = "host-sync-in-step"
    severity = Severity.WARNING
    summary = "A host-device synchronisation (`.item()`, `.cpu()`, `float(t)`, `print(t)`, ...) on every training step."
    hint = "Accumulate on the device (`running += loss.detach()`) and read values only when logging (`if step % log_every == 0:`)."
    # a step loop can also be one whose step, loss scaler or optimizer lives in another module
    # the reads themselves too: a loop whose step is a call into another module (`trainer.train_rlhf(batch)`)
    requires = ("backward", "step(", "training_step", "compute_loss", "get_batch_loss_metrics", "scaler", "optim", ".item(", ".cpu(", ".tolist(")
    per_step = True
    why = (
        "CUDA kernels run asynchronously: the host queues work and races ahead. Reading a tensor's value on "
        "the host (`.item()`, `.cpu()`, `.tolist()`, `.numpy()`, `.type(torch.FloatTensor)` (the host's type: a copy there), `float(t)`, `bool(t)`, `if t:`, `while t:`, a slice bound (`x[:, :max_len]` with `max_len` a 0-dim device tensor, turned into an int by `__index__`), a device tensor assigned into a tensor built on the host (`x_pad[:, :n] = x` after `x_pad = torch.zeros(...)`: a blocking copy to the host), Python's `max()`/`min()` over a tensor or a list of tensors or with a tensor among their arguments (`max(torch.norm(y) ** 2, 1e-6)`), a tensor given for a count such as `torch.topk`'s `k` or `repeat_interleave`'s `repeats` (whose sum torch reads to size the output, unless given `output_size`) or for the lengths `pack_padded_sequence` copies to the CPU (also `list(lengths)` of a device tensor), `torch.equal(a, b)` and `torch.allclose(a, b)` (a Python bool: the `if` testing it reads nothing more), printing or "
        "formatting it (an f-string, `.format`, or `%` in any call's argument: `pbar.set_postfix(loss='%.3f' % loss)`, also with a format string built from literals, `('%11s' * 2 + '%11.4g' * 5) % (epoch, mem, *mloss)`), or a module's lambda shim doing one of these, as d2l's `d2l.to(x, d2l.cpu())`) makes the host wait until every queued kernel has finished, so the GPU idles while "
        "the next step is prepared. Once per step this costs a few to tens of milliseconds; torchtune "
        "measured 40-50 ms of `cudaStreamSynchronize` per step from one `loss.item()`. What is read is "
        "known by its value as it flows: a counter that adds a device reduction (`self.tokens += (y >= 0).sum()` "
        "with `y` a batch moved to the device) is a device tensor afterwards, so `if self.tokens < limit:` "
        "reads it, and a `sum` of what may be tensors is no number (`sum(loss_dict_reduced.values()).item()` reads the losses); iterating a device tensor (`for t, l in zip(t_batch, losses):`) gives device tensors (a dict gives its keys: `for key in batch: assert key not in outputs` reads nothing), so "
        "`int(t * 10)` reads one per element (one finding for the statement), as do the rows of a batch moved there (`for token in caption:` of `captions.to(device)`, then `int(token)`), the values of a dict a comprehension unpacks (`{k: float(v) for k, v in losses.items()}`), and those of a batch moved key by key (`for k in batch: batch[k] = batch[k].to(device)`: `batch[\"mask\"].sum()` is there afterwards, here and in a helper given the batch, but not under a key the loop names, `if k != \"meta\":`); a module's `forward` holds what the calls of its instances in the same module pass it (`model(x.cuda(), mask.cuda())` in the script's loop: `if mask.any():` in `forward` reads a device tensor; given host tensors, nothing); a loss handed to a function that backpropagates it (`self._update_generator(gen_loss)`, whose body runs `gen_loss.backward()`) is a tensor with a graph whatever computed it, so `self._record_loss('g', gen_loss)` beside it reads one; the total norm `clip_grad_norm_` returns is a tensor where the gradients are, so `writer.add_scalar(\"grad_norm\", grad_norm, step)` reads it (so does a writer a project module holds, `TB_LOGGER.add_scalar(...)` of `from utils.logger import TB_LOGGER`, an object handing `add_scalar` on to a `SummaryWriter`); a helper's read on a path only a caller passing an optional argument takes (the `else` of `if step is None:` in a logger's `update(head, step=None, **kw)`; a model's `if gen_image: return self.gen_image(x)` that the training loop a script hands the model to never asks for, and the sampler of another module that branch calls) is no read of the calls that pass none; nor is a read on the first steps only (`if ni < 3:` with `ni = i + nb * epoch`, `if global_step < 10:`; every step of the first epochs, `if epoch < 3:`, is flagged) or on an epoch's last batch (`if i == len(pbar) - 1:`) or on data with nothing in it (`if len(tgt_boxes) == 0:`, `if targets.numel() == 0:`; an exit on it, `if len(boxes) == 0: continue`, leaves the rest to all the other steps); `t.type_as(x)` lives where `x` does (`torch.ones(n).type_as(out)` is on `out`'s device), as does a factory's tensor given `device=x.device` (`torch.ones(len(y), device=y.device)`), and one given a device by name (`torch.zeros(3, device=device)`, `device=self.device`) is where `.to(device)` would move it: on the accelerator, unless the argument spells the CPU; a buffer moves with its module (`self.register_buffer(\"update_count\", torch.tensor([0]))`, then `model.to(device)`), so `if self.update_count >= warmup:` and `w = a if self.update_count >= warmup else b` read it, while a tensor merely assigned to an attribute stays where it was built; and the `forward` of a custom "
        "`torch.autograd.Function` applied in a module's forward (`Fn.apply(x)`) runs every step, as its "
        "`backward` does on the backward pass. So does the `forward` of a model class registered in detectron2's "
        "`META_ARCH_REGISTRY` (detectron2's trainers build it from the configuration and call it for each batch; "
        "its `if self.training:` branch is the step's), whose attributes hold what its `@configurable` constructor "
        "gets from `from_config` (`self.criterion(outputs, targets)` runs the `SetCriterion` built there)."
    )
    story = (
        "Field report 004: a trainer that logged with `.item()` on CUDA tensors every step, reset memory "
        "statistics and synchronised: the first batch ran fast, every later batch 2-5x slower."
    )
    example = """\
import torch

for step, (x, y) in enumerate(loader):
    x, y = x.to(device), y.to(device)
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    running_loss += loss.item()      # waits for the GPU every step
"""
    fixed_example = """\
import torch

running_loss = torch.zeros((), device=device)
for step, (x, y) in enumerate(loader):
    x, y = x.to(device), y.to(device)
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    running_loss += loss.detach()    # stays on the device
    if step % log_every == 0:
        print(f"loss {running_loss.item() / log_every:.4f}")   # one sync per log_every steps
        running_loss.zero_()
"""
    not_flagged = (
        "Syncs in a one-round loop (`for _ in range(1):`, a module's `__main__` smoke test; inside a loop over batches, that loop trains), "
        "in a loop that measures rather than trains, in a module that updates no weight (a sweep over settings written in the code, `for channels in [1, 16, 30]:`, through a check that compares two implementations' gradients; a loop timing its passes), syncs under a gate (`if step % n == 0`, `if iteration in [10, 100, 1000]:`, `if do_log:`, an episode's end in a rollout (`if player.done:`), a debugging or verbosity level `if opt.debug > 0:`, a test-only run's flag `if opt.test:` (a loop shared by training and testing saves results only when testing) (another setting compared with a number, `if clip_val > 0:`, holds on every step and gates nothing), `if step == 0`, `if self.graph is None:` (or a module-level cache a function declares `global`), a name's first value in a loop (`if loss_ema is None: loss_ema = loss.item()`), state set from the negative value it starts at (`if Z < 0: self.params[2] = out.mean() * n`, the body runs on the first call) or from a zero-filled buffer the body replaces (`if self.freqs_cos[0, 0] == 0: self.freqs_cos = cos.to(x.device)`, whose test is itself a read), `if not len(self.q):`, a value given on logging steps only (`if storer is not None:` where every value `storer` can hold is None but under a periodic test: a loss's `storer = self._pre_call(is_train, storer)` returns it only when `self.n_train_steps % self.record_loss_every == 1`; also in the functions it is passed to, while `if writer is not None:` of a value set once holds every step, as does a flag set to `True` at an epoch's start, `if struc_flag:`), an early `if step != capture_step: return` or `if step - last < interval: return` (not an exit on a test true on few steps or items: after `if step % 100 == 0: continue` or `if num_boxes == 0: continue` the rest runs on all the others), a "
        "module's inference-only branch `if not self.training:` (also each `elif` and the `else` of `if self.training:`, or of `if is_train:` in a function that trains or evaluates as its flag says, and "
        "what follows its early `return`), an early "
        "`return` when not logging), on the error path (`except` handlers, `raise`, an assert's message, a "
        "branch that exits or skips a non-finite batch), after the training loop, in epoch-level code outside "
        "the step loop, in evaluation loops that do not backpropagate, in memoised helpers (`@lru_cache`), in "
        "test code (`tests/`, a `test_*.py` that defines a test), in modules with no sign of a device or whose only device is the CPU (`torch.device(\"cpu\")`, "
        "`torch.cpu.amp`, IPEX): there `.item()` waits for nothing (a module whose training loop names no device runs it where the modules importing it put their work: `PPO.update`'s minibatch loop, called as "
        "`agent.update(rollouts)` by a script that moves the policy with `.to(device)`, is flagged); inside optimizer and loss-scaler classes (named so, or a class of its own whose `step` and `zero_grad` work over an optimizer's `param_groups`: a LARS wrapper), "
        "whose step must read an overflow flag on the host (torch's `GradScaler.step` does too); reads of values "
        "known to live on the host (the loader's batch read before the loop body moves it, `max(lengths.tolist())` before `lengths = lengths.to(device)`; a batch of unknown place that the function moves later, `.cuda()`, `.to(device)` or a project helper that moves each argument it is given (`to_cuda(x, lengths, y)`), read before that move, or a batch the step copies to the device element by element under another name, which stays where it was (`obs = map_structure(batch, lambda x: x.to(device))` or `obs = {k: v.to(device) for k, v in batch.items()}`, then `batch[\"reward\"].float().mean().item()`; copies a statement drops, `[m.cuda() for m in nets]`, may move modules in place and tell nothing), also in what is computed from it on the way (`x, y, pred_mask = self.mask_out(x, lengths)`) and in the helpers it passes through, and through a `return` whose every caller in the module moves what it gets (XLM's `generate_batch`), while a forward's output moved to another device (a pipeline's stages) was on a device before its move; a Hugging Face tokenizer's `return_tensors=\"pt\"` batch until it is moved, `tokenizer(text, return_tensors=\"pt\")[\"input_ids\"][0].tolist()`; a `.cpu()` copy and what is computed from it, `lengths.cpu().int()` indexed, scaled or iterated, though a copy made on one path only, `if self.cpu: x = x.cpu()`, leaves the device value on the other; also where a helper is handed one: `log(model, loss.cpu(), correct.cpu())`, whose `__call__` passes them on to the method that reads them; numbers, numpy arrays (also what a helper of another module computes with NumPy, `np.log10(r) * 10.0`, which no device tensor can reach), a tokenizer's output, host-built "
        "tensors: `torch.Tensor([1, 2])` or `torch.tensor(pad)` built from numbers and never moved, a counter of numbers (`self.seen += len(y)`), a host tensor a device count is added into in place; `t.numpy()` with no copy before it, which torch refuses on a device tensor rather than copy it); the elements "
        "of a host list iterated (`for t, l in losses.tolist():`, where only the `tolist()` is reported); a "
        "custom autograd function applied only in evaluation; modules moved or offloaded (`vae.cpu()`); another class's `to`, called with a keyword `Tensor.to` does not take (flair's `sentence.to(device, pin_memory=True)`); and actions copied to a host environment "
        "(`envs.step(actions.cpu().numpy())`, also when a helper returns the action to the loop that steps the "
        "environment, in its module or in the script that calls it: `action = (policy.select_action(state) + noise).clip(-1, 1)`, then `env.step(action)`; also an action computed from the copy: `dist = self(state).data.cpu()`, then `return (dist * atoms).sum(2).argmax(1).numpy()[0]`) or priorities handed back to the replay buffer that gave the batch "
        "(`rb.update_priorities(data.indices, td_error.cpu().numpy())`, also with the indices unpacked beside the batch: `state, ..., indices, weights = buffer.sample(n, beta)`), which the algorithm needs. Under an `if` whose test reads a "
        "tensor (`if loss.item() > 1.0: print(loss.item())`, also `while (matching.sum(0) == 0).any():`), only the test is reported: the body (and the `else`) runs when the "
        "data says so, after the test's sync; so does the rest of the block after such an `if` that exits early (`if loss == 0: continue`), until the step "
        "queues device work again: `float(loss)` after `loss.backward()` and `optimizer.step()` waits for both and is reported (a scheduler's `.step()` queues none). A test's operands are read in Python's order: a flag after a tensor test gates nothing "
        "(`if (t.isnan().any() or t.isinf().any()) and DEBUG:` reads a tensor every step), a flag before it does "
        "(`if DEBUG and t.isnan().any():`, `if queue_full or not torch.all(q == 0):`). `float(x)`/`print(x)`/f-strings only "
        "when `x` is known to be a tensor at that point: a name rebound to `loss.item()` is a number. `loss.data[0]` taken as a number (added up, appended, handed to a meter's `update`, printed) is PyTorch 0.3's `.item()` and is flagged; `out.data[0]` handed to anything else is the first row, a tensor. A torch factory sized by a tensor on the device reads it on the host first (`torch.arange(lengths.max())`, `torch.randn(b, lengths.max(), 2)`, a tensor's own `dur.new_zeros([b, word_id.max() + 1])`); a shape (`x.shape[1]`) is a number. The "
        "optimizer-step branch is no gate: code under `if (i + 1) % accum == 0:` (with the step) or "
        "`if accelerator.sync_gradients:` runs on every training step and is flagged, as does a later `if` of the function testing exactly what the branch with the step tests, none of its names rebound (`if step % d_ratio == 0:` holding the generator's step, then another logging `G_loss.item()`). Nor is a rank test "
        "(`if rank == 0:`, `if is_main_process():`, `if pgm.pp_is_last_stage:`): it holds on every step of "
        "that rank, which pays the sync every step while the others wait for it at the next collective. "
        "One finding per statement: the syncs of one statement (a log call formatting four losses) are "
        "one defect with one fix, reported once, naming each; three statements in a row are three "
        "findings. A sync in a project helper is reported once: in the helper, with the call chains "
        "that run it every step, when the helper reads a value it computes (its own `loss.item()`); at "
        "each call site, where the value is known, when the helper only reads what it is passed "
        "(`metric_logger.update(loss=loss)`, whose `update` calls `v.item()`; `self.take_optimisation_step(opt, net, loss)`, a step helper the class inherits from a project base in another module, logging `loss.item()`; `log_data.add_metric('errG', errG)` on a parameter nothing says the class of, where the project's only classes defining `add_metric`, at most three, are ones it builds and all read it: a GAN's `train_step` handed the trainer's `MetricLog`), also where other calls pass what the analysis cannot see, and also a host copy of it, followed through the functions that hand it on as it came (`targets.cpu().numpy().tolist()` in a loss class's `preprocess`, which its `__call__` calls with the labels it is given: reported at `self.compute_loss(preds, targets)` in the step, where they are moved to the device), for the arguments the helper reads only (a prediction passed beside those labels is not read; the helper's reads of other arguments in the same statement go with them, one statement, one finding at the call: `zip(pitch.cpu().numpy(), src_len.cpu().numpy())`), but not through a module's `forward`, which keeps its reads: `at.tonumpy(bbox)` in a trainer's `forward` is reported there; where no caller of another module can see what it passes (an aligner's output from a library), the read stays reported in the helper. What every caller passes counts: a loss helper of another module testing `if num_pos == 0:` on a reduction of a target each caller moves to the device (`y.cuda()`) syncs every step, in the helper. What a helper of another module computes from the tensors it is given by tensor methods and arithmetic is where they are, at each call: the ImageNet example's `accuracy(output, target)`, a list its loop fills with `correct_k.mul_(100.0 / batch_size)`, gives device tensors to a step that passes device outputs and labels, so `top1.update(prec1.data[0], n)` reads the device (given host tensors, nothing); so does a loss of torch's functions, `F.mse_loss(F.softmax(a, dim=1), F.softmax(b, dim=1))`, given a model's outputs. A criterion whose `forward` returns a dict of losses holds them where they are (DETR's `SetCriterion`: `losses = {}` filled by `losses.update(self.get_loss(loss, outputs, targets))`, whose `get_loss` calls one of a dict of loss methods by key, `loss_map[loss](outputs, targets)`, each returning `{\"loss_ce\": loss_ce}`), also through a helper that gives the dict back as it came on one process and a reduced one on several (`reduce_dict(loss_dict)`): `metric_logger.update(**loss_dict_reduced_scaled)` in the step reads each loss. "
        "The step reaches code indirectly too, and a sync there is flagged: a function handed to a helper that "
        "calls it (`timer(train_step)`, each function `engine = schedule_a if cfg.a else schedule_b` may hold, the method a `functools.partial` wraps: `compute = partial(diffusion.training_losses, model, x)`, then `compute()`), a model a helper object of another module wraps before its base class calls it (`diffusion.training_losses(model, x, t)` after `diffusion = create_diffusion()`, whose `super().training_losses(self._wrap_model(model), *args)` hands a plain `_WrappedModel` to a base that calls `model(x_t, t)`: the wrapper's `__call__`, then the model's `forward`), the object a dict or a namespace holds under a constant key (`model.text_encoder(texts, lengths)` where a factory of another module returns `Munch(text_encoder=TextEncoder(), decoder=Decoder())`, also each wrapped in `nn.DataParallel` or with another namespace in a tuple, `nets, nets_ema = build_model(args)`; or `nets['head'](x)`: that object's `forward`, not the others'), each function a dict of at most three functions holds, called with a key (`loss_registry[config.loss](model, x, t)`, the dict in this module or another, and the model handed on to it); "
        "the method a project base class's per-step code runs on `self` in a subclass of another module "
        "(`BasePolicy.update` calling `self._update_with_batch(batch)`, whose override returns "
        "`Stats(loss=loss.item())`; also where only the overrides train: a base's loop calling `self._train_step(batch)`, abstract there, whose overrides "
        "backpropagate and step through the base's `self._update_generator(loss)`, its optimizers held in a dict, `self.optimizer['generator'].step()`), and the `forward` a base `nn.Module`'s `fit` runs when it calls the model through `self` (`self(x)`, or `model = self.train()`, perhaps wrapped in `DataParallel`, then `model(x)`): a Keras-like `BaseModel.fit` runs each subclass's `forward`; and the methods of an object whose class the project chooses at run time "
        "(`CRITERIA[cfg.loss]()`, `LOSSES.get(cfg.loss)()`, `criterion: Criterion = instantiate(cfg.criterion)`): "
        "the project classes that define the called method and could be built there (in the dict, also one bound in the function that subscripts it, registered in "
        "the registry, deriving from the declared base; a dict of factories, `DiT_models[args.model]()`, or a module's own names, `models_mae.__dict__[args.model]()`, holds the "
        "class each factory returns; another module's names picked by `getattr(base_model, 'build_%s' % args.model)()` are its classes and its factories' named with the constant start of the name; a builder function a registry holds, `build_func = MODULE_BUILD_FUNCS.get(args.modelname)`, returns what one of those its methods decorate returns (DINO's `@MODULE_BUILD_FUNCS.registe_with_name(module_name='dino') def build_dino(args)`); a factory choosing from a dict of modules, `method_dict[cfg['method']].config.get_trainer(...)`, builds what each module's function builds), whose chains say so (\"`criterion` may be `SetCriterion`, "
        "built from the configuration\"). Such an object handed to another module is followed there too, also through the script's own functions that pass it on (`main` building the criterion and calling `do_train(..., criterion)`, which hands it to `engine.train_one_epoch`), also one a factory of another module returns (`model = gnn_model(name, params)`, picking from a dict of per-net factories, handed to `train_epoch(model, ...)` in a third module) or returns in a tuple (`model, diffusion = create_model_and_diffusion(...)`, each place the class its own factory builds; a script's `build_model_main(args)` calling one factory per branch, `if args.modelname == \"dn_dab_detr\": model, criterion, postprocessors = build_DABDETR(args)`, `elif ...`, returns what each returns, up to eight classes, the factories found also through the packages above their modules that re-export them, `from models import build_DABDETR`): "
        "`diffusion.training_losses(model, x, t)` runs the `forward` of `model` (also once moved or wrapped: "
        "`DDP(model.to(device))`, or prepared by Accelerate, `model, optimizer = accelerator.prepare(model, optimizer)`) wherever `training_losses` calls it (or an object's `__call__`, `loss_fn(model, x)`), a method held in an attribute (`self.timestep_embedding = self.positional_embedding`) runs wherever the attribute is called, a loss handed to a class that keeps it (`DeepSupervisionWrapper(loss)`, whose `__init__` sets `self.loss = loss`) runs wherever a method of that class calls `self.loss(...)`, and `super().training_losses(...)` runs the "
        "base class's method in its own module. The blocks of a container of modules run where it runs: "
        "`for block in self.blocks: x = block(x)` and `self.layers[i](x)` over an `nn.ModuleList` (built from a list, or "
        "appended to), `self.body(x)` of an `nn.Sequential(*stages)`; a model restored with `torch.load` on one path and "
        "built from a project class on another runs that class's `forward`. Code past a `return`, `raise`, `continue` or "
        "`break` of its block never runs and is not flagged, nor does a branch a constant test rules out (the `elif` and `else` of `if True:`, the body of `if False:` or `if 0:`; a name holding the constant is a switch and rules out nothing). Not flagged: such an object with more than three candidate classes (a dict of objects subscripted by an option, `heads[cfg.head]`, too), a "
        "container holding more than eight classes of module, an object handed more than eight classes by other modules (a framework's trainer given each script's game is followed through all of them up to that), a "
        "class the dict, the registry or the base does not hold, and the override of a subclass the project never "
        "builds while it builds others of that base (named nowhere but in imports and `class` statements)."
    )
    verification = (
        "`trainlint verify` times a step with and without `.item()` on CUDA. `trainlint verify run` records "
        "each value read and copy to the host the script makes, by line and per step (a TorchFunctionMode; "
        "syncs inside torch are not the script's)."
    )
    valid = (
        # a parameter-server worker ships its gradients: the module moves to the host, nothing is read
        """
import torch
def run_worker(ps, batches):
    m = ps.get_model().cuda()
    for inputs, labels in batches:
        loss_fn(m(inputs), labels).backward()
        m = ps.update_and_fetch_model([p.grad for p in m.cpu().parameters()]).cuda()
""",
        """
import torch
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    if step % 100 == 0:
        print(loss.item())
""",
        """
import torch
losses = []
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss.detach())
print(torch.stack(losses).mean().item())
""",
        # a script with no sign of a device runs on the CPU, where reading a tensor waits for nothing
        """
for episode in range(1000):
    action = policy(state).sample()
    state, reward = env.step(action.item())
    loss = -log_prob * reward
    loss.backward()
    optimizer.step()
""",
        # a tensor built on the host: reading it waits for nothing on the GPU
        """
import torch
scale = torch.tensor([1.0])
for x, y in loader:
    loss = criterion(model(x), y) * scale[0].item()
    loss.backward()
    optimizer.step()
""",
        # built on the host from numbers and never moved: `.item()` waits for nothing
        """
import random
import torch
def random_shift(img, max_shift):
    pad = torch.Tensor([random.randint(0, max_shift), random.randint(0, max_shift)]) * 2 + 1
    return torch.roll(img, shifts=(int(pad[0].item()), int(pad[1].item())), dims=(-2, -1))
for x, y in loader:
    loss = criterion(model(random_shift(x, 4).cuda()), y.cuda())
    loss.backward()
    optimizer.step()
""",
        # an assert's message is formatted only when the assert fails
        """
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss).all(), f"loss {loss} is not finite"
""",
        # `losses` is a float by the time it is printed; the tensor binding comes later, in evaluation
        """
for epoch in range(3):
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        losses = 0.0
        print(f"loss {losses}")
    losses = torch.cat([criterion(model(x), y) for x, y in val_loader])
""",
        # an optimizer's own step must read its overflow flag: the sync is the implementation's
        """
class MixedPrecisionOptimizer:
    def step(self):
        self.unscale_and_check()
        if self.found_inf.item() > 0:
            return False
        self.optimizer.step()
        return True
""",
    )
    invalid = (
        # iterating a device tensor gives device tensors: `int(t * 10)` reads each one
        """
import torch
for x, y in loader:
    t_batch = torch.rand(x.shape[0], device="cuda")
    losses = criterion(model(x.cuda(), t_batch), y.cuda())
    losses.mean().backward()
    optimizer.step()
    for t, l in zip(t_batch, losses.detach()):
        loss_by_t[int(t * 10)] += l
""",
        # a loss class chosen from a dict of classes by a configuration string: each candidate's `forward` runs
        """
import torch.nn as nn
class SetCriterion(nn.Module):
    def forward(self, outputs, targets):
        loss = (outputs - targets).abs().mean()
        return loss / max(loss.detach().item(), 1.0)
class FocalCriterion(nn.Module):
    def forward(self, outputs, targets):
        return ((1 - outputs.sigmoid()) ** 2 * (outputs - targets).abs()).mean()
CRITERIA = {"set": SetCriterion, "focal": FocalCriterion}
def train(cfg, model, loader, optimizer):
    criterion = CRITERIA[cfg.loss]()
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
""",
        # the main process logs every step: that rank pays the sync, the others wait for it
        """
import torch
import torch.distributed as dist
for x, y in loader:
    loss = criterion(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
    if dist.get_rank() == 0:
        print(f"loss {loss.item():.3f}")
""",
        """
import torch
for x, y in loader:
    x, y = x.cuda(), y.cuda()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    total += loss.item()
""",
        """
def log_metrics(loss):
    print(f"loss={loss:.3f}")

for x, y in loader:
    loss = criterion(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
    log_metrics(loss)
""",
    )

    def check(self, model: TrainingModel) -> Iterator[Finding]:
        if not model.uses_accelerator:
            return
        chained: set[int] = set()
        modules: set[int] = set()  # results used as modules (`m.cpu().parameters()`): a module moved, not read
        for call in model.calls:
            if call.method in SYNC_METHODS and isinstance(call.receiver, cst.Call):
                chained.add(id(call.receiver))
            elif call.method in MODULE_ONLY_METHODS and isinstance(call.receiver, cst.Call):
                modules.add(id(call.receiver))

        def per_step(site: Site) -> bool:
            return model.every_step(site) and not _in_optimizer_class(site, model)

        synced = [
            cond for cond in model.conditions
            if per_step(cond.site)
            and any(_device_tensor(model.value(test, cond.site)) for test in _truth_tested(cond.node))
        ]
        reads = [
            (call, described) for call in model.calls
            if per_step(call.site) and not _reported_at_callers(model, call)
            for described in (self._describe(model, call, chained, modules),)
            if described and not feeds_environment(model, call) and not feeds_batch_source(model, call)
        ]
        # the body of `if torch.min(y) < -1: print(torch.min(y))` (`if loss.item() > 1:`, `while (m == 0).any():`)
        # runs after its test has drained the device's queue, and only when the data says so: one finding, the test's
        synced_tests = {id(cond.node) for cond in synced if cond.kind in ("if", "while")}
        read_nodes = {id(call.node) for call, _ in reads}
        synced_tests.update(
            id(cond.node) for cond in model.conditions
            if cond.kind == "if" and id(cond.node) not in synced_tests and any(id(c) in read_nodes for c in calls_in(cond.node))
        )
        after_sync = drained_by(model, synced_tests, per_step)
        syncs: list[_Sync] = []
        for call, described in reads:
            if not after_sync(call.site):
                kind = "host copy" if call.method in HOST_COPIES else "value read"  # for `trainlint verify run`
                # a count given a tensor is reported at the argument that is read
                anchor = _count_argument(call)[1] if described.startswith(GIVEN_A_TENSOR) else None
                syncs.append(_Sync(call.site, anchor or call.node, described, kind))
        for cond in synced:
            if not after_sync(cond.site):
                syncs.append(_Sync(cond.site, cond.node, f"`{'if' if cond.kind == 'ifexp' else cond.kind}` on a tensor's value", "value read"))
        for fv in model.formatted:
            if per_step(fv.site) and not after_sync(fv.site) and _device_tensor(model.value(fv.node.expression, fv.site)):
                text = model.module.code_for_node(fv.node.expression)
                syncs.append(_Sync(fv.site, fv.node, f"formatting tensor `{text}` in an f-string", "value read"))
        for site, node, how in _index_reads(model, lambda site: per_step(site) and not after_sync(site)):
            text = shorten(model.module.code_for_node(node), 40)
            syncs.append(_Sync(site, node, *INDEX_READS[how](text)))
        yield from _one_per_statement(model, syncs, _header_calls(model, [s.node for s in syncs]))

    def explain_call(self, model: TrainingModel, call: Call, line_of: Callable[[Any], int]) -> str | None:
        """Why a call on a line that runs every step is not a host sync, as `check` decided it."""
        from trainlint.model.why import describe_value, name_list

        code = model.module.code_for_node
        shown = f"`{shorten(code(call.node), 50)}`"
        if not model.uses_accelerator:
            return "the module shows no sign of an accelerator (no `.cuda()`, `.to(device)`, CUDA device): on the CPU a read waits for nothing"
        if _in_optimizer_class(call.site, model):
            fn = call.site.function
            return f"{shown} is in `{fn.class_name if fn else ''}`, an optimizer or loss-scaler class, whose step must read flags on the host"
        if call.method in SYNC_METHODS and not call.node.args and call.receiver is not None:
            base = _chain_base(call.receiver)
            if _bare_numpy(call):
                return f"{shown} converts without a copy: torch refuses `.numpy()` of a device tensor (TypeError), so where it runs the tensor is on the host"
            if base is not call.receiver:
                return f"{shown} continues a chain judged at its first copy (`{shorten(code(base), 40)}.{call.receiver.func.attr.value}()`)"  # type: ignore[attr-defined]
            value = model.value(base, call.site)
            if value.on_host or value.kind in NOT_DEVICE_DATA:
                return describe_value(model, base, call.site, line_of) + ": reading it waits for nothing on the accelerator"
            if call.method == "cpu" and MODULE_RECEIVER_WORDS & set(tokens(call.receiver_text or "")):
                return f"`{call.receiver_text}` is read as a module by " + name_list("rules.tl401_host_sync_in_step.MODULE_RECEIVER_WORDS") + ": its `.cpu()` moves weights"
            if call.method == "cpu" and call.discarded:
                return f"{shown} is a statement on its own: a module offloaded in place (a tensor's copy would be lost)"
        if feeds_environment(model, call):
            return f"{shown} is handed to a host environment's step (" + name_list("model.summary.ENV_WORDS") + "), which needs it on the host"
        if feeds_batch_source(model, call):
            return f"{shown} goes back to the buffer that gave the batch (priorities), which the algorithm needs on the host"
        if call.qualname is not None and call.qualname.split(".", 1)[0] == "torch":
            return None  # (torch's own calls: nothing more to say than that none is a read)
        args = [a.value for a in call.node.args if a.keyword is None and not a.star]
        if call.name in CONVERSIONS | {"print"} and args:
            return describe_value(model, args[0], call.site, line_of) + ": not a tensor the analysis knows of on the accelerator"
        return None

    def _describe(self, model: TrainingModel, call: Call, chained: set[int], modules: set[int]) -> str | None:
        code = model.module.code_for_node
        site = call.site
        own = model.imports.own_name(call.node.func) if call.qualname is None else None
        shim = model.values.inlined_lambda(own, call.node, site.function, site) if own is not None else None
        if shim is not None:
            # d2l's `to = lambda x, *args: x.to(*args)`: `d2l.to(loss, d2l.cpu())` is `loss.to(d2l.cpu())`
            return f"`{shorten(code(call.node), 60)}`" if _copies_to_host(model, shim, site) else None
        if call.method in SYNC_METHODS and id(call.node) not in chained and not call.node.args and call.receiver is not None and not _bare_numpy(call):
            receiver = model.value(_chain_base(call.receiver), site)
            if receiver.on_host or receiver.kind in NOT_DEVICE_DATA:
                return None
            if call.method == "cpu" and (MODULE_RECEIVER_WORDS & set(tokens(call.receiver_text or "")) or call.discarded or id(call.node) in modules):
                # (`vae.cpu()` as a statement: a module offloaded in place, a tensor's copy would be
                # lost; `m.cpu().parameters()`: a module moved to the host)
                return None
            return f"`{shorten(code(call.node), 60)}`"
        if call.method == "to" and call.node.args and call.receiver is not None:
            first = call.node.args[0]
            if model.values.spells_cpu(first.value, site.function, site) and (first.keyword is None or first.keyword.value == "device") and all(a.keyword is None or a.keyword.value in TO_KEYWORDS for a in call.node.args):
                receiver = model.value(call.receiver, site)
                if receiver.on_host or receiver.kind in NOT_DEVICE_DATA:
                    return None
                return f"`{shorten(code(call.node), 60)}`"
            return None
        if typed_to_host(model, call) or (call.name in CONVERSIONS and call.qualname is None and len(call.node.args) == 1 and _converted_on_host(model.value(call.node.args[0].value, site))):
            return f"`{shorten(code(call.node), 60)}`"  # (`mask.type(torch.FloatTensor)` copies to the host as well)
        if _sized_by_device_tensor(model, call, site):
            return f"`{shorten(code(call.node), 60)}`, whose size is a tensor on the device that torch reads,"
        if call.name in ORDERING_BUILTINS and call.qualname is None and _orders_tensors(model, call, site):
            return f"`{shorten(code(call.node), 60)}`, which compares tensors on the host,"
        if call.qualname in HOST_TESTS and any(a.keyword is None and _device_tensor(model.value(a.value, site)) for a in call.node.args):
            return f"`{shorten(code(call.node), 60)}`"
        keyword, count = _count_argument(call)
        if count is not None and _count_on_device(keyword, model.value(count, site)):
            return f"{GIVEN_A_TENSOR}{'s' if keyword == 'lengths' else ''} `{keyword}` of `{shorten(code(call.node), 50)}`"
        if call.name == "print" and call.qualname is None and any(a.keyword is None and _device_tensor(model.value(a.value, site)) for a in call.node.args):
            return f"printing a tensor (`{shorten(code(call.node), 60)}`)"
        if any(_formats_tensor(model, a.value, site) for a in call.node.args):  # (`pbar.set_postfix(loss="%.3f" % loss)` too)
            return f"formatting a tensor with `%` (`{shorten(code(call.node), 60)}`)"
        if call.method == "format" and isinstance(call.receiver, (cst.SimpleString, cst.ConcatenatedString)):
            if any(_device_tensor(model.value(a.value, site)) for a in call.node.args):
                return f"formatting a tensor (`{shorten(code(call.node), 60)}`)"
        if _is_metric_log(model, call):
            logged = [a.value for a in call.node.args] + [
                e.value for a in call.node.args if isinstance(a.value, cst.Dict) for e in a.value.elements if isinstance(e, cst.DictElement)
            ]
            tensors = [v for v in logged if _device_tensor(model.value(v, site))]
            if tensors:
                # name the value: in `wandb.log({...})` with ten entries the reader should not have to guess
                more = f" (and {len(tensors) - 1} more)" if len(tensors) > 1 else ""
                return f"`{shorten(code(tensors[0]), 40)}`{more} in `{_logged_call(code(call.node))}` is a tensor on the accelerator; logging it"
        summary = model.project_call_summary(call) if call.qualname is None or call.qualname.split(".", 1)[0] != "torch" else None
        if summary is not None and summary.syncs and model.project_target(call) is None and not model.callees(call):
            return f"`{shorten(code(call.node), 60)}`, which reads a device tensor on the host (`{shorten(summary.syncs[0], 40)}` in {summary.where}),"
        if summary is None and call.qualname is None:
            # a function of this module: its callers' arguments are read where they are passed
            callee = model.called_function(call)
            summary = model.summarizer.function(callee) if callee is not None else model.parameter_method_summary(call)
        if summary is not None and summary.reads_arguments:
            if _passes_device_tensor(model, call, summary):
                return f"`{shorten(code(call.node), 60)}`, which reads its tensor arguments on the host ({summary.where}),"
        return None


# values that are not device tensors even when their methods share a tensor's names
NOT_DEVICE_DATA = frozenset({Kind.MODULE, Kind.OPTIMIZER, Kind.SCALER, Kind.SCHEDULER, Kind.DATALOADER, Kind.OBJECT})


@dataclass(frozen=True)
class _Sync:
    """One host sync found on a per-step line, before the syncs of a statement are merged."""

    site: Site
    node: cst.CSTNode
    described: str
    kind: str


def _one_per_statement(model: TrainingModel, syncs: list[_Sync], headers: dict[int, int]) -> Iterator[Finding]:
    """One finding per statement: the syncs of one statement (a log call formatting four losses, an
    `if` testing two values) are one defect with one fix, reported at the first, naming the others;
    syncs of separate statements stay separate findings."""
    groups: dict[int, list[_Sync]] = {}
    for sync in syncs:
        key = id(sync.site.statement) if sync.site.statement is not None else headers.get(id(sync.node), id(sync.node))
        groups.setdefault(key, []).append(sync)
    for group in groups.values():
        group.sort(key=lambda s: s.site.order)
        first = group[0]
        others = [f"`{shorten(model.module.code_for_node(s.node), 40)}`" for s in group[1:]]
        also = f" (and, in the same statement, {listed(others)})" if others else ""
        kinds = {s.kind for s in group}
        kind = "host copy" if kinds == {"host copy"} else "value read"
        described = f"{first.described[:-1]}{also}," if first.described.endswith(",") else first.described + also  # ("`f(x)`, which ...,")
        yield Finding(
            first.node, f"{described} synchronises the host with the GPU on every training step",
            facts={"kind": kind, **({"syncs": len(group)} if others else {})},
        )


def _logged_call(text: str) -> str:
    """`wandb.log({...})`: a logging call as its finding names it, its arguments elided when long."""
    if len(text) <= 40 or "(" not in text:
        return shorten(text, 60)
    opened = text.index("(")
    inner = text[opened + 1 : -1].strip()
    elided = "{...}" if inner.startswith("{") else "..."
    return f"{text[:opened]}({elided})"
