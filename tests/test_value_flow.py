"""The value-flow model on code shaped like real training projects: what a value is, where its
graph goes, when code runs, whose code it is, and facts that cross functions and modules."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.helpers import lines, lint
from trainlint.config import Settings
from trainlint.engine.lint import lint_paths


def found(code: str, rule: str, name: str = "train.py") -> list[int]:
    return [d.line for d in lint(code, rule, name=name) if d.code == rule]


def lint_tree(tmp_path: Path, files: dict[str, str], rule: str | None = None) -> list[str]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    settings = Settings(select=(rule,) if rule else None, root=tmp_path)
    results = lint_paths([(tmp_path / n, settings) for n in files], jobs=1)
    return [f"{Path(d.path).name}:{d.line}:{d.code}" for r in results for d in r.diagnostics]


# -- what a value is -------------------------------------------------------------------------------
def test_like_factory_sits_on_its_sources_device():
    code = """
    import torch
    for x, y in loader:
        x = x.to(device)
        noise = torch.randn_like(x).to(device)
        loss = criterion(model(x + noise), y)
        loss.backward()
        optimizer.step()
    """
    assert found(code, "TL406") == []


def test_a_conversion_to_a_dtype_held_in_a_name_moves_nothing():
    # `.to(dtype)` with a `dtype=torch.float32` parameter converts on the host; `.to(device)` moves
    code = """
    import torch

    def embed(w, dim=8, dtype=torch.float32):
        emb = torch.arange(dim).to(dtype)
        return (w * emb).sum().item()

    def place(w, device):
        return torch.arange(8).to(device)

    for x, y in loader:
        w = torch.rand(4)
        scale = embed(w)
        loss = criterion(model(x.to(device)), y) * scale
        loss.backward()
        optimizer.step()
        place(w, device)
    """
    assert found(code, "TL401") == []
    place_line = textwrap.dedent(code).splitlines().index("    return torch.arange(8).to(device)") + 1
    assert found(code, "TL406") == [place_line]


def test_a_module_level_lambda_shim_is_its_body_with_the_arguments_put_in():
    # d2l's NumPy-style shims: `float(reduce_sum(astype(cmp, y.dtype)))` is `float(cmp.type(...).sum())`
    code = """
    import torch

    reduce_sum = lambda x, *args, **kwargs: x.sum(*args, **kwargs)
    astype = lambda x, *args, **kwargs: x.type(*args, **kwargs)
    size = lambda x, *args, **kwargs: x.numel(*args, **kwargs)

    for X, y in loader:
        X, y = X.to("cuda"), torch.as_tensor(y, device="cuda")
        y_hat = net(X)
        loss = criterion(y_hat, y)
        loss.backward()
        optimizer.step()
        cmp = astype(y_hat.argmax(1), y.dtype) == y
        correct = float(reduce_sum(astype(cmp, y.dtype)))
        seen = float(size(y))
    """
    line = textwrap.dedent(code).splitlines().index("    correct = float(reduce_sum(astype(cmp, y.dtype)))") + 1
    assert found(code, "TL401") == [line]


def test_a_script_that_fixes_its_device_to_the_cpu_syncs_nothing_whatever_it_asks_about_cuda():
    code = """
    import torch

    use_cuda = torch.cuda.is_available()
    device = torch.device({device})
    model = torch.nn.Linear(4, 4).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(loss.item())
    """
    assert found(code.replace("{device}", '"cpu"'), "TL401") == []
    assert found(code.replace("{device}", '"cuda" if use_cuda else "cpu"'), "TL401") == [14]


def test_reads_of_host_values_are_not_syncs():
    code = """
    import torch
    class Trainer:
        def __init__(self, model):
            self.model = model.cuda()
            self.lg_loss_scale = 20.0
        def step(self, batch, verbose: bool):
            loss = self.model(batch)
            loss.backward()
            self.opt.step()
            logits_host = self.model.head(batch).detach().cpu()
            preds = logits_host.argmax(-1).tolist()
            ids = tokenizer(batch["text"])["input_ids"]
            print(f"scale {self.lg_loss_scale}")
            flag = verbose.item() if hasattr(verbose, "item") else verbose
    for batch in loader:
        trainer.step(batch, False)
    """
    assert found(code, "TL401") == [11]  # the `.cpu()` copy itself, nothing read from it afterwards


def test_module_offload_is_not_a_sync_and_cpu_autocast_runs_on_cpu():
    code = """
    import torch
    for batch in loader:
        latents = vae.encode(batch.to(device)).latent_dist.sample()
        vae.cpu()
        loss = unet(latents).mean()
        loss.backward()
        optimizer.step()
    """
    assert found(code, "TL401") == []
    cpu_script = """
    import torch
    import intel_extension_for_pytorch as ipex
    for x, y in loader:
        with torch.cpu.amp.autocast():
            loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        print(loss.item())
    """
    assert found(cpu_script, "TL401") == []


def test_disabled_scaler_and_optimizer_clipping_are_not_fp16_without_clipping():
    disabled = """
    import torch
    scaler = torch.cuda.amp.GradScaler(enabled=False)
    for x in loader:
        loss = model(x.cuda())
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    """
    assert found(disabled, "TL202") == []
    lamb = """
    import torch
    from apex.optimizers import FusedLAMB
    optimizer = FusedLAMB(model.parameters(), lr=1e-3, max_grad_norm=1.0)
    scaler = torch.cuda.amp.GradScaler()
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    """
    assert found(lamb, "TL202") == []


def test_module_level_synchronize_alias():
    code = """
    import torch
    synchronize = torch.cuda.synchronize if torch.cuda.is_available() else lambda: None
    for x in loader:
        loss = model(x.cuda())
        loss.backward()
        optimizer.step()
        synchronize()
    """
    assert found(code, "TL402") == [8]


def test_syncs_hidden_in_formatting_and_logging():
    code = """
    import math
    import torch
    import wandb
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        pbar.set_description("loss {:.3f}".format(loss))
        if torch.logical_or(torch.isnan(loss), torch.isinf(loss)):
            break
        ok = math.isfinite(loss)
        wandb.log({"loss": loss})
        stats = {k: v.item() for k, v in parts.items()}
    """
    assert sorted(found(code, "TL401")) == [9, 10, 12, 13, 14]


# -- where a value's graph goes --------------------------------------------------------------------
def test_graph_consumed_reset_on_step_branch_or_detached_upstream_keeps_nothing():
    code = """
    def compute(model, x):
        return model(x).mean().detach()

    running = 0
    history = []
    for i, x in enumerate(loader):
        loss = model(x) / accum
        loss.backward()
        logged = loss.detach()
        running += logged
        history.append(compute(model, x))
        acc = acc + loss if i else loss
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
            acc = 0
    """
    assert found(code, "TL302") == []


def test_gradient_penalty_retains_a_graph_that_a_later_backward_consumes():
    code = """
    import torch
    from torch import autograd

    def gradient_penalty(D, real, fake):
        alpha = torch.rand(real.size(0), 1, 1, 1, device=real.device)
        mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        grads = autograd.grad(outputs=D(mixed).sum(), inputs=mixed, create_graph=True, retain_graph=True)[0]
        return ((grads.norm(2, dim=1) - 1) ** 2).mean()

    def penalty_no_create(D, mixed):
        return autograd.grad(D(mixed).sum(), mixed, retain_graph=True)[0].pow(2).mean()

    for real in loader:
        fake = G(noise)
        d_loss = D(fake).mean() - D(real).mean() + 10 * gradient_penalty(D, real, fake)
        d_loss = d_loss + penalty_no_create(D, real)
        d_loss.backward()
        opt_d.step()
    """
    assert found(code, "TL301") == []


# -- when code runs --------------------------------------------------------------------------------
def test_one_offs_and_error_paths_are_not_every_step():
    code = """
    import functools, sys, math
    import torch

    @functools.lru_cache()
    def causal_mask(n):
        return torch.ones(n, n).tril().cuda()

    class Runner:
        def train(self, loader):
            for step, batch in enumerate(loader):
                if self.graph is None:
                    self.static = batch.cuda()
                    print(self.static.sum().item())
                if num_updates == 0:
                    print(batch.cuda().sum().item())
                loss = self.model(batch.cuda(), causal_mask(8))
                if not torch.isfinite(loss):
                    print(f"non-finite loss {loss}")
                    sys.exit(1)
                loss.backward()
                self.opt.step()
    """
    assert found(code, "TL401") == [18]  # the test itself reads the loss; its error branch does not run


def test_master_process_is_not_a_periodic_gate():
    code = """
    import torch
    for it, (x, y) in enumerate(loader):
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        if master_process:
            lossf = loss.item()
        if ddp_rank == 0:
            print(loss.item())
    """
    assert found(code, "TL401") == [8, 10]


# -- whose code it is ------------------------------------------------------------------------------
def test_precision_plugin_and_test_code_are_not_training_scripts():
    plugin = """
    import torch
    class MixedPrecision(Precision):
        def __init__(self):
            self.scaler = torch.cuda.amp.GradScaler()
        def backward(self, tensor, model):
            self.scaler.scale(tensor).backward()
        def optimizer_step(self, optimizer):
            self.scaler.step(optimizer)
            self.scaler.update()
    """
    assert found(plugin, "TL202") == [] and found(plugin, "TL501") == []
    script = """
    import torch
    for x in loader:
        loss = model(x.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(loss.item())
    """
    assert found(script, "TL401", name="tests/test_training.py") == []
    assert found(script, "TL401", name="train.py") == [8]


def test_ema_copy_in_eval_mode_is_not_the_trained_model():
    code = """
    import copy
    ema_model = copy.deepcopy(model)
    for epoch in range(10):
        for x in loader:
            loss = model(x)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        ema_model.eval()
    """
    assert found(code, "TL503") == []


def test_fp16_finding_points_at_the_training_autocast_not_evaluation():
    code = """
    import torch

    def evaluate(model, loader):
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
            return [model(x) for x in loader]

    def train(model, loader, optimizer):
        for x in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x)
            loss.backward()
            optimizer.step()
    """
    assert found(code, "TL202") == [10]


# -- across calls and modules ----------------------------------------------------------------------
def test_step_helper_and_scaler_in_another_module(tmp_path):
    files = {
        "utils.py": """
            import torch

            class NativeScalerWithGradNormCount:
                def __init__(self):
                    self._scaler = torch.cuda.amp.GradScaler()

                def __call__(self, loss, optimizer, clip_grad=None, parameters=None):
                    self._scaler.scale(loss).backward()
                    if clip_grad is not None:
                        self._scaler.unscale_(optimizer)
                        torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
                    self._scaler.step(optimizer)
                    self._scaler.update()

            class StepTimer:
                def click(self):
                    torch.cuda.synchronize()

            class MetricLogger:
                def update(self, **kwargs):
                    for k, v in kwargs.items():
                        if isinstance(v, torch.Tensor):
                            v = v.item()
                        self.meters[k] = v
        """,
        "train.py": """
            import torch
            from utils import NativeScalerWithGradNormCount as NativeScaler, StepTimer, MetricLogger

            loss_scaler = NativeScaler()
            timer = StepTimer()
            metric_logger = MetricLogger()
            for samples, targets in loader:
                samples = samples.to(device, non_blocking=True)
                with torch.cuda.amp.autocast():
                    loss = torch.nn.functional.cross_entropy(model(samples), targets)
                loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters())
                optimizer.zero_grad()
                timer.click()
                metric_logger.update(loss=loss)
                metric_logger.update(lr=optimizer.param_groups[0]["lr"])
        """,
    }
    out = lint_tree(tmp_path, files)
    # the synchronisation is reported where it is, in the helper the step calls (with its chain)
    assert "utils.py:18:TL402" in out and "train.py:14:TL402" not in out
    assert "train.py:15:TL401" in out
    assert not [f for f in out if f.startswith("train.py") and ("TL102" in f or "TL202" in f or "TL501" in f)], out
    assert [f for f in out if f.startswith("utils.py")] == ["utils.py:18:TL402"], out


def test_model_cast_by_a_builder_in_another_module(tmp_path):
    files = {
        "models/__init__.py": "from .factory import build_model\n",
        "models/factory.py": """
            import torch

            def build_model(cfg):
                net = torch.nn.Linear(cfg.width, cfg.width)
                return net.half()
        """,
        "train.py": """
            import torch
            from models import build_model

            model = build_model(cfg)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        """,
    }
    out = lint_tree(tmp_path, files, "TL10")
    assert "train.py:5:TL101" in out and "train.py:6:TL104" in out


def test_no_grad_callee_and_train_mode_restored_by_another_module(tmp_path):
    files = {
        "engine.py": """
            import torch

            def train_one_epoch(model, loader, optimizer):
                model.train()
                for x in loader:
                    loss = model(x)
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()

            @torch.no_grad()
            def evaluate(model, loader):
                model.eval()
                return [model(x) for x in loader]
        """,
        "main.py": """
            from engine import train_one_epoch, evaluate

            for epoch in range(10):
                train_one_epoch(model, loader, optimizer)
                model.eval()
                evaluate(model, val_loader)
        """,
    }
    assert lint_tree(tmp_path, files, "TL5") == []


def test_syncs_on_the_optimizer_step_branch_run_every_step():
    code = """
    import torch
    for idx, batch in enumerate(loader):
        loss = model(batch.cuda()) / accum
        loss.backward()
        running_loss += loss.detach()
        if (idx + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
            loss_to_log = running_loss.item()
            pbar.set_description(f"loss {loss_to_log}")
            running_loss = 0
            if (idx + 1) % (accum * 100) == 0:
                print(loss.item())
    """
    assert found(code, "TL401") == [10]


def test_helper_in_another_module_that_reads_a_device_tensor(tmp_path):
    files = {
        "misc.py": """
            import torch

            def all_reduce_mean(x):
                world_size = get_world_size()
                if world_size > 1:
                    x_reduce = torch.tensor(x).cuda()
                    dist.all_reduce(x_reduce)
                    x_reduce /= world_size
                    return x_reduce.item()
                return x
        """,
        "engine.py": """
            import misc

            def train_one_epoch(model, loader, optimizer, device):
                for samples in loader:
                    loss = model(samples.to(device))
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                    loss_value_reduce = misc.all_reduce_mean(1.0)
        """,
    }
    # reported where the `.item()` is, in the helper the step calls every step
    assert lint_tree(tmp_path, files, "TL401") == ["misc.py:10:TL401"]


def test_metrics_dict_reset_by_rebinding_and_frozen_evaluation_model():
    dpo = """
    for idx, batch in enumerate(loader):
        loss, chosen, rejected = loss_fn(policy(batch), reference(batch))
        loss = loss / accum
        running_metrics["rewards/chosen"] += chosen.mean()
        loss.backward()
        if (idx + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
            running_metrics = {k: 0 for k in running_metrics}
    """
    assert found(dpo, "TL302") == []
    frozen = """
    import copy
    def evaluate_metrics(opts, loader):
        G = copy.deepcopy(opts.G).eval().requires_grad_(False)
        feats = []
        for z in loader:
            feats.append(G(z))
        return feats
    """
    assert found(frozen, "TL303") == []


def test_host_tensor_built_a_line_before_its_copy_and_nested_parameters():
    code = """
    import torch
    for real in loader:
        real = real.cuda()
        alpha = torch.rand(real.size(0), 1, 1, 1)
        alpha = alpha.cuda()
        halves = alpha.to(torch.float16)
        loss = critic(alpha * real).mean()
        loss.backward()
        optimizer.step()
    """
    assert found(code, "TL406") == [6]
    offload = """
    import torch
    from diffusers import SanaPipeline
    pipe = SanaPipeline.from_pretrained("x")

    def embed(prompt, pipe):
        pipe = pipe.to("cuda")
        out = pipe.encode(prompt)
        pipe = pipe.to("cpu")
        return out

    for batch in loader:
        loss = model(batch.cuda(), embed(batch["p"], pipe))
        loss.backward()
        optimizer.step()
    """
    assert found(offload, "TL401") == []


def test_loop_over_data_around_a_counted_step_loop_runs_per_step():
    code = """
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader
    class Recipe:
        def setup(self, dataset):
            self._dataloader = StatefulDataLoader(dataset, batch_size=4)

        def rollout(self, batch):
            torch.cuda.empty_cache()
            return self.policy.generate(batch)

        def train(self):
            for epoch in range(self.epochs):
                for idx, batch in enumerate(self._dataloader):
                    trajectory = self.rollout(batch)
                    for _ in range(self._ppo_epochs):
                        loss = self.loss(trajectory)
                        loss.backward()
                        self._optimizer.step()
                        self._optimizer.zero_grad()
                torch.cuda.empty_cache()
    """
    assert found(code, "TL304") == [9]


def test_predicates_presence_checks_and_percent_formatting():
    code = """
    import torch
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        if is_peft_model(model):
            pass
        if log_writer is not None:
            log_writer.add_scalar("loss", loss, i)
        print("loss %f" % (loss.data,))
    """
    assert sorted(found(code, "TL401")) == [10, 11]


def test_host_tensor_rebound_to_its_device_copy_in_the_loop_is_copied_once():
    code = """
    import torch
    latents_mean = torch.tensor(vae.config.latents_mean).view(1, 4, 1, 1)
    for batch in loader:
        x = vae.encode(batch.cuda()).sample()
        latents_mean = latents_mean.to(device=x.device, dtype=x.dtype)
        w = (args.w_max - args.w_min) * torch.rand((x.shape[0],)) + args.w_min
        emb = embed(w.to(dtype))
        w = w.to(device=x.device)
        loss = unet(x - latents_mean, emb).mean()
        loss.backward()
        optimizer.step()
    """
    assert found(code, "TL406") == [9]


def test_module_named_like_the_library_it_imports(tmp_path):
    files = {
        "transformer_engine.py": """
            import torch
            import transformer_engine.pytorch as te

            def step(model, x, optimizer):
                with te.fp8_autocast():
                    loss = model(x.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        """,
    }
    out = lint_tree(tmp_path, files)
    assert not [f for f in out if "TL000" in f], out


def test_an_assignment_in_an_else_branch_does_not_hide_the_if_branch_s():
    """Both branches reach a use under another `if` (the old reading let the later one, under as
    many `if`s as the use, hide the other)."""
    code = """
    import torch
    model.cuda()
    for batch in loader:
        loss = model(batch.cuda())
        loss.backward()
        optimizer.step()
        if args.detailed:
            stat = loss.detach()
        else:
            stat = 0.0
        if rank == 0:
            print(stat)
    """
    assert lines(code, "TL401") == [13]
    assert lines(code.replace("stat = loss.detach()", "stat = 1.0"), "TL401") == []


def test_a_tensor_given_for_topk_s_count_is_read_on_the_host() -> None:
    # YOLOX's SimOTA: `torch.topk(cost[i], k=dynamic_ks[i])` with `dynamic_ks` a device tensor
    source = """
        import torch

        def train(model, loader, opt):
            for x, cost in loader:
                x, cost = x.cuda(), cost.cuda()
                ks = torch.clamp(cost.sum(1).int(), min=1)
                for i in range(4):
                    _, idx = torch.topk(cost[i], k=ks[i], largest=False)
                    _, idx2 = cost[i].topk(ks[i])
                    _, idx3 = torch.topk(cost[i], 3)
                    _, idx4 = cost[i].topk(int(ks.shape[0]))
                loss = model(x).sum()
                loss.backward()
                opt.step()
    """
    assert lines(source, "TL401") == [9, 10]


def test_a_list_a_forward_sets_to_empty_before_appending_holds_one_pass() -> None:
    # SC-SfMLearner's depth decoder: `self.outputs = []` atop `forward`, then one append per scale
    source = """
        import torch
        from torch import nn

        class Decoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(4, 4, 3)

            def forward(self, x):
                self.outputs = []
                for i in range(3):
                    x = self.conv(x)
                    self.outputs.append(torch.sigmoid(x))
                return self.outputs

        def train(loader, opt):
            net = Decoder().cuda()
            for x in loader:
                loss = sum(o.mean() for o in net(x.cuda()))
                loss.backward()
                opt.step()
    """
    assert lines(source, "TL302") == []
    # set only when built: every pass adds to the list of the passes before
    built_once = source.replace("                self.outputs = []\n", "").replace("self.conv = nn.Conv2d(4, 4, 3)", "self.conv = nn.Conv2d(4, 4, 3)\n                self.outputs = []")
    assert lines(built_once, "TL302") == [14]
    # emptied only on some passes: a history on the others
    gated = source.replace("                self.outputs = []\n", "                if x.shape[0] > 8:\n                    self.outputs = []\n")
    assert lines(gated, "TL302") == [15]


def test_a_device_tensor_of_repeats_is_summed_on_the_host_unless_the_output_size_is_given() -> None:
    # tab-ddpm's `sliced_logsumexp`: `torch.repeat_interleave(lse, ends - starts, dim=-1)` sizes its
    # output from the sum of the repeats (torch's docs: `output_size` avoids that synchronisation)
    source = """
        import torch

        def train(model, loader, opt):
            for x, lengths in loader:
                x, repeats = x.cuda(), torch.clamp(lengths.cuda().int(), min=1)
                a = torch.repeat_interleave(x, repeats, dim=0)
                b = x.repeat_interleave(repeats, dim=0)
                c = torch.repeat_interleave(x, repeats, dim=0, output_size=x.shape[0] * 4)
                d = x.repeat_interleave(2, dim=0)
                e = torch.repeat_interleave(x, torch.tensor([1, 2, 3, 4]), dim=0)  # (on the host: nothing to read)
                loss = model(a + b + c + d + e).sum()
                loss.backward()
                opt.step()
    """
    assert lines(source, "TL401") == [7, 8]


def test_an_fp16_network_with_its_batchnorm_back_in_fp32_is_told_only_its_other_weights_stall():
    code = """
    import torch
    import torch.nn as nn

    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.LazyLinear(10)).half()
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.float()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    """
    (d,) = lint(code, "TL101")
    assert "norm layers kept in float32" in d.message and "convolutions and linear layers" in d.message
    assert "norm gains" not in d.message
    (plain,) = lint(code.replace("m.float()", "pass"), "TL101")
    assert "norm gains" in plain.message


def test_what_a_like_factory_is_given_is_a_tensor() -> None:
    # a PPO trainer's forward pass over minibatches of a dict it is handed (trl's `model_inputs`):
    # `torch.zeros_like(attention_mask)` says the mask is a tensor, so testing its value syncs
    code = """
    import torch

    def forward_pass(model, optimizer, model_inputs):
        for i in range(4):
            batch = {k: v[i * 8 : (i + 1) * 8] for k, v in model_inputs.items()}
            attention_mask = batch["attention_mask"]
            logits = model(**batch).cuda()
            masks = torch.zeros_like(attention_mask)
            for j in range(8):
                start = 0
                if attention_mask[j, 0] == 0:
                    start = 1
                masks[j, start:] = 1
            (logits * masks).sum().backward()
            optimizer.step()
    """
    assert lines(code, "TL401") == [12]
    assert lines(code.replace("masks = torch.zeros_like(attention_mask)", "masks = torch.zeros(8, 16)"), "TL401") == []


def test_what_an_instance_call_passes_is_what_its_forward_receives() -> None:
    # a loss module calling a sub-loss it holds: the lengths it builds on the device reach the
    # sub-loss's `forward`, where testing one syncs (coqui's TacotronLoss -> GuidedAttentionLoss)
    code = """
    import torch
    from torch import nn

    class GuidedLoss(nn.Module):
        def forward(self, att, lengths):
            if lengths[0] > att.shape[-1]:
                return att.sum() * 0
            return att.mean()

    class TotalLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.guided = GuidedLoss()

        def forward(self, att, n):
            lengths = torch.full((att.shape[0],), n, device="cuda")
            return self.guided(att, lengths)

    model = nn.Linear(8, 8).cuda()
    criterion = TotalLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in loader:
        criterion(model(x.cuda()), 3).backward()
        opt.step()
    """
    assert lines(code, "TL401") == [7]


CPU_DEVICE = """
import torch


def cpu():
    return torch.device("cpu")


model = torch.nn.Linear(4, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = (model(x.cuda()) - y.cuda()).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    counts = torch.zeros(4).to(torch.device("cpu"))
    board.draw(loss.detach().to(cpu()))
"""


def test_a_device_the_code_spells_through_torch_device_or_a_helper() -> None:
    # d2l's `to(value, cpu())`: `cpu()` returns `torch.device("cpu")`, so the loss is copied to the host
    # (a sync), and the counts built on the host stay there (no copy to the device)
    assert [(d.line, d.code) for d in lint(CPU_DEVICE, "TL4")] == [(17, "TL401")]


def test_a_device_named_by_a_helper_that_returns_the_accelerator_is_a_move_there() -> None:
    moved = CPU_DEVICE.replace('torch.device("cpu")', 'torch.device("cuda")')
    assert [(d.line, d.code) for d in lint(moved, "TL4")] == [(16, "TL406")]


APEX_FP16 = """
import torch
import torch.optim as optim

model = Net().cuda()
if args.fp16:
    model = model.half()
if args.optim == "adam":
    optimizer = optim.Adam(model.parameters(), lr=args.lr)
else:
    optimizer = optim.SGD(model.parameters(), lr=args.lr)
if args.fp16:
    from apex.fp16_utils import FP16_Optimizer
    optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
for x, y in loader:
    loss = model(x.cuda()).mean()
    optimizer.backward(loss)
    optimizer.step()
"""


def test_an_optimizer_handed_to_apex_fp16_optimizer_keeps_fp32_master_weights() -> None:
    # transformer-xl's `--fp16`: `model.half()`, then `FP16_Optimizer(optimizer, ...)`, which steps
    # fp32 master copies with fp32 state; the same cast without the wrapper loses small updates
    assert found(APEX_FP16, "TL101") == [] and found(APEX_FP16, "TL104") == []
    plain = APEX_FP16.replace("optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)", "pass")
    assert found(plain, "TL101") == [7] and found(plain, "TL104") == [9]


def test_a_tensor_computed_where_autograd_is_off_carries_no_graph():
    # a Fisher estimate: the class weights are computed under no_grad, the gradients detached, so the
    # running sum keeps no graph; near misses: the weights computed with autograd on, and `enable_grad()`
    # inside the no_grad block, which turns it back on
    code = """
    import torch
    import torch.nn.functional as F
    model = torch.nn.Linear(4, 3).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    fisher = 0
    for x, y in loader:
        output = model(x.cuda())
        with torch.no_grad():
            weights = F.softmax(output, dim=1)
        loss = F.cross_entropy(output, y.cuda())
        loss.backward()
        optimizer.step()
        fisher += weights[0][0] * (model.weight.grad.detach() ** 2)
    """
    assert lines(code, "TL302") == []
    assert lines(code.replace("        with torch.no_grad():\n            weights", "        weights"), "TL302") == [13]
    enabled = code.replace("            weights = F.softmax", "            with torch.enable_grad():\n                weights = F.softmax")
    assert lines(enabled, "TL302") == [15]


# the ImageNet example's `accuracy` in a helper module with no training code: a list its loop fills
# with tensors that tensor methods compute from the outputs and labels it is given
ACCURACY = {
    "utils.py": """
        import torch


        def accuracy(output, target, topk=(1,)):
            maxk = max(topk)
            batch_size = target.size(0)
            _, pred = output.topk(maxk, 1, True, True)
            pred = pred.t()
            correct = pred.eq(target.view(1, -1).expand_as(pred))
            res = []
            for k in topk:
                correct_k = correct[:k].view(-1).float().sum(0)
                res.append(RESULT)
            return res
    """,
    "train.py": """
        import utils


        def train(model, loader, optimizer, criterion, top1):
            for images, target in loader:
                images, target = images.cuda(), target.cuda()
                output = model(images)
                loss = criterion(output, target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                prec1, prec5 = utils.accuracy(output, target, topk=(1, 5))
                top1.update(prec1.data[0], images.size(0))
    """,
}


def _accuracy(result: str, moved: bool = True) -> dict[str, str]:
    files = {k: v.replace("RESULT", result) for k, v in ACCURACY.items()}
    if not moved:
        files["train.py"] = files["train.py"].replace("images.cuda(), target.cuda()", "images, target")
    return files


def test_a_helper_returns_tensors_it_computes_from_its_device_arguments_on_the_device(tmp_path: Path) -> None:
    assert lint_tree(tmp_path, _accuracy("correct_k.mul_(100.0 / batch_size)"), "TL401") == ["train.py:14:TL401"]


def test_a_helper_result_read_on_the_host_or_its_arguments_on_the_host_is_no_device_tensor(tmp_path: Path) -> None:
    # near misses: the helper reads each value itself (a float per k: reported there, once), and a caller
    # that never moves its batch
    assert lint_tree(tmp_path / "a", _accuracy("correct_k.mul_(100.0 / batch_size).item()"), "TL401") == ["utils.py:14:TL401"]
    assert lint_tree(tmp_path / "b", _accuracy("correct_k.mul_(100.0 / batch_size)", moved=False), "TL401") == []


# a mean-teacher consistency loss in a helper module: torch's functions of the logits it is given
CONSISTENCY = {
    "losses.py": """
        import torch
        from torch.nn import functional as F


        def softmax_mse_loss(input_logits, target_logits):
            input_softmax = F.softmax(input_logits, dim=1)
            target_softmax = F.softmax(target_logits, dim=1)
            return F.mse_loss(input_softmax, target_softmax, reduction="sum") / input_logits.size(1)


        def class_weights(input_logits, target_logits):
            return torch.ones(input_logits.size(1))
    """,
    "train.py": """
        import torch
        import losses

        model, ema_model = torch.nn.Linear(8, 4).cuda(), torch.nn.Linear(8, 4).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        consistency = losses.HELPER
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            out, ema_out = model(x), ema_model(x).detach()
            loss = torch.nn.functional.cross_entropy(out, y) + consistency(out, ema_out)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            meters.update("cons_loss", consistency(out, ema_out).data[0])
    """,
}


def test_a_helper_computing_with_torch_functions_of_model_outputs_returns_a_tensor_there(tmp_path: Path) -> None:
    files = {k: v.replace("HELPER", "softmax_mse_loss") for k, v in CONSISTENCY.items()}
    assert lint_tree(tmp_path, files, "TL401") == ["train.py:15:TL401"]


def test_a_helper_building_a_tensor_from_sizes_returns_a_host_tensor(tmp_path: Path) -> None:
    files = {k: v.replace("HELPER", "class_weights") for k, v in CONSISTENCY.items()}
    assert lint_tree(tmp_path, files, "TL401") == []


# DeepSDF's reconstruction: a latent code fitted through a decoder kept in eval mode; the optimizer holds
# only the code, so no step trains the decoder
LATENT_FIT = """
import torch

def reconstruct(decoder, samples, iterations):
    latent = torch.ones(1, 256).normal_(0, 0.01).cuda()
    latent.requires_grad = True
    optimizer = torch.optim.Adam([latent], lr=5e-3)
    for e in range(iterations):
        decoder.eval()
        optimizer.zero_grad()
        loss = (decoder(torch.cat([latent.expand(len(samples), -1), samples], 1)) - 1).abs().mean()
        loss.backward()
        optimizer.step()
    return latent

for shape in shapes:
    latent = reconstruct(decoder, shape, 800)
    decoder.eval()
    save(decoder, latent)
"""


def test_a_module_in_eval_mode_while_a_latent_code_is_fitted_through_it_is_not_trained():
    assert found(LATENT_FIT, "TL503") == []
    # the decoder's own parameters handed to the optimizer, and switched after the update: the next
    # steps train in eval mode (at the top of each step, before the backward, the switch is by design)
    after = LATENT_FIT.replace("        decoder.eval()\n        optimizer.zero_grad()\n", "        optimizer.zero_grad()\n").replace(
        "        optimizer.step()\n", "        optimizer.step()\n        decoder.eval()\n"
    )
    trained = after.replace("torch.optim.Adam([latent], lr=5e-3)", "torch.optim.Adam([latent, *decoder.parameters()], lr=5e-3)")
    assert found(trained, "TL503") == [13, 18]
    listed = after.replace("torch.optim.Adam([latent], lr=5e-3)", "torch.optim.Adam([latent, decoder.scale], lr=5e-3)")
    assert found(listed, "TL503") == [13, 18]
    assert found(LATENT_FIT.replace("torch.optim.Adam([latent], lr=5e-3)", "torch.optim.Adam([latent, *decoder.parameters()], lr=5e-3)"), "TL503") == []


METER = """
import torch

class AverageMeter(object):
    def __init__(self):
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n

def train(model, loader, optimizer):
    losses, data_time = AverageMeter(), AverageMeter()
    model.cuda()
    for img, target in loader:
        data_time.update(0.1)
        total_loss = model(img.cuda(), target.cuda()).mean()
        optimizer.zero_grad()
        total_loss.backward()
        optimizer.step()
        losses.update(total_loss, img.size(0))
"""


def test_a_meter_accumulating_what_the_step_hands_it_is_reported_at_the_call() -> None:
    """The pose estimator's `losses.update(total_loss, n)`: `AverageMeter.update` keeps every step's
    graph in `self.sum`, for this call only (the data timer is handed numbers): one finding, at the
    call, whose unsafe fix detaches the argument; handed `total_loss.item()`, nothing."""
    assert lines(METER, "TL302") == [22]
    assert lines(METER.replace("losses.update(total_loss,", "losses.update(total_loss.item(),"), "TL302") == []



PLAIN_ACCUMULATION = """
import torch
import torch.nn.functional as F

model = torch.nn.Linear(3, 3).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss_all = 0
for x, y in loader:
    parts = 0
    for scale in (1.0, 0.5):
        parts = parts + F.mse_loss(model(x.cuda()) * scale, y.cuda())
    loss = parts * 0.5
    loss_all = loss_all + loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(loss_all / len(loader))
"""


def test_a_total_rebound_to_itself_plus_a_loss_accumulates_like_plus_equals() -> None:
    """RCDNet's `loss_B_all = loss_B_all + loss_B`: the epoch total keeps every step's graph, as `+=`
    would; the fix detaches the added term. Near misses: `parts` is reset every step and backpropagated
    (through `loss`); a total of `loss.item()` holds numbers."""
    found = lint(PLAIN_ACCUMULATION, "TL302")
    assert [d.line for d in found] == [13]
    assert found[0].fix is not None and found[0].fix.edits[0].content == "loss.detach()"
    assert lines(PLAIN_ACCUMULATION.replace("loss_all = loss_all + loss", "loss_all = loss_all + loss.item()"), "TL302") == []


def test_a_dict_of_device_losses_unpacked_into_a_logger_that_reads_its_values(tmp_path):
    files = {
        "utils.py": """
            import torch

            class MetricLogger:
                def __init__(self):
                    self.meters = {}

                def update(self, **kwargs):
                    for k, v in kwargs.items():
                        if isinstance(v, torch.Tensor):
                            v = v.item()
                        self.meters[k] = v
        """,
        "train.py": """
            import torch
            from utils import MetricLogger

            metric_logger = MetricLogger()
            for samples, targets in loader:
                out = model(samples.to(device))
                losses = {"mse": torch.nn.functional.mse_loss(out, targets.to(device)), "l1": out.abs().mean()}
                sizes = {"batch": len(samples), "width": samples.shape[1]}
                optimizer.zero_grad()
                sum(losses.values()).backward()
                optimizer.step()
                metric_logger.update(**losses)
                metric_logger.update(**sizes)
        """,
    }
    # `**losses` hands the logger each device loss, which it reads; `**sizes` only numbers
    assert [f for f in lint_tree(tmp_path, files) if "TL401" in f] == ["train.py:13:TL401"]


ONE_EXPRESSION_HELPERS = """
import torch


def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


def cast_tuple(val, depth=1):
    \"\"\"A tuple of `depth` copies, unless it is one.\"\"\"
    return val if isinstance(val, tuple) else (val,) * depth


def block_order(spans):
    order = []
    for span in spans:
        start, end = cast_tuple(span, 2)
        assert start <= end
        order.extend(range(start, end + 1))
    return order


def main(loader, device, spans):
    model = torch.nn.Linear(8, 8).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        order = block_order(spans)
        logits = cast_tuple(model(x.to(device)[:, order]))
        loss = sum(torch.nn.functional.cross_entropy(l, y.to(device)) for l in logits)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        weight = default(None, y.to(device).sum())
        if weight > 0.5:
            print("skewed batch")
"""


def test_a_one_expression_helper_gives_each_call_what_its_own_arguments_make() -> None:
    # `cast_tuple(span, 2)` of a setting stays host data, though another call hands it the logits;
    # `default(None, <device mean>)` is that device mean, and the `if` on it waits for the device
    assert lines(ONE_EXPRESSION_HELPERS, "TL401") == [38]


def test_a_recursive_one_expression_function_is_read_without_end() -> None:
    code = """
        import torch

        def list_sum(x):
            return x[0] if len(x) == 1 else x[0] + list_sum(x[1:])

        for x in loader:
            loss = list_sum([model(x.cuda()), model(x.cuda() * 2)])
            loss.backward()
            optimizer.step()
            total = float(list_sum([loss, loss]))
    """
    assert [(d.code, d.line) for d in lint(textwrap.dedent(code), "TL401")] == [("TL401", 11)]
