"""What an object is, from what the code does with it, never from what it is called: optimizers by
their protocol, modules by theirs, tensors by being backpropagated, steps by updating, evaluation
by a module switched to eval mode (shaped like torchtune's recipes, coqui's tokenizer trainer, d2l's
decoders, DeepSpeed's BERT validation and Lightning's hand-written trainer)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lint
from tests.test_library_hooks import lint_tree


def _lines(code: str, rule: str, name: str = "train.py") -> list[int]:
    return sorted(d.line for d in lint(code, rule, name=name) if d.code == rule)


def test_an_optimizer_built_by_a_config_factory_is_one_by_its_protocol() -> None:
    # torchtune: `self._optimizer = config.instantiate(cfg.optimizer, ...)`, stepped and cleared
    code = """
        import torch
        from torchtune import config

        class Recipe:
            def setup(self, cfg):
                self._model = config.instantiate(cfg.model).cuda()
                self._optimizer = config.instantiate(cfg.optimizer, self._model.parameters())

            def train(self, loader):
                running_loss = 0
                for batch in loader:
                    loss = self._loss_fn(self._model(batch["tokens"].cuda()), batch["labels"].cuda())
                    running_loss += loss
                    loss.backward()
                    self._optimizer.step()
                    self._optimizer.zero_grad(set_to_none=True)
                    loss_to_log = running_loss.item()
                    running_loss = 0
    """
    assert _lines(code, "TL401") == [18]


def test_an_environment_stepped_in_another_loop_is_not_an_optimizer() -> None:
    # cleanrl's qdagger: the teacher's buffer is filled by `envs.step(actions)` before any training
    code = """
        import torch
        q_network = QNetwork(envs).to("cuda")
        optimizer = torch.optim.Adam(q_network.parameters())
        for global_step in range(1000):
            q_values = q_network(torch.Tensor(obs).to("cuda"))
            actions = torch.argmax(q_values, dim=1).cpu().numpy()
            obs, rewards, terminations, truncations, infos = envs.step(actions)
        for global_step in range(1000):
            loss = q_network(data).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        for global_step in range(1000):
            q_values = q_network(torch.Tensor(obs).to("cuda"))
            actions = torch.argmax(q_values, dim=1).cpu().numpy()
            obs, rewards, terminations, truncations, infos = envs.step(actions)
    """
    assert _lines(code, "TL401") == []


def test_a_static_factory_gives_its_class_and_the_method_called_in_the_loop_is_the_step() -> None:
    # coqui's HubertTokenizer: `model = HubertTokenizer.load_from_checkpoint(p)` or a fresh one, then
    # `model.train_step(x, y)` per batch; its one-hot targets are built on the host every step
    code = """
        import torch
        from torch import nn

        class Tokenizer(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(768, 10000)
                self.optimizer = torch.optim.Adam(self.parameters())

            def train_step(self, x_train, y_train):
                self.zero_grad()
                y_pred = self(x_train)
                hot = torch.zeros(len(y_train), 10000)
                hot = hot.to("cuda")
                loss = nn.functional.cross_entropy(y_pred, hot)
                loss.backward()
                self.optimizer.step()

            @staticmethod
            def load_from_checkpoint(path):
                model = Tokenizer()
                model.load_state_dict(torch.load(path))
                return model

        def auto_train(data_x, data_y, load=None):
            if load:
                model = Tokenizer.load_from_checkpoint(load).to("cuda")
            else:
                model = Tokenizer().to("cuda")
            for x, y in zip(data_x, data_y):
                model.train_step(torch.tensor(x).to("cuda"), torch.tensor(y).to("cuda"))
    """
    # the targets built on the host, not the batch the loop draws from the data
    assert _lines(code, "TL406") == [15]


def test_a_function_that_backpropagates_and_updates_is_a_step_whatever_its_name() -> None:
    code = """
        import torch

        def fit_one(batch):
            loss = model(batch.cuda()).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            print(loss.item())
    """
    assert _lines(code, "TL401") == [9]
    # called once by the script that defines it: one update, not a step run over and over
    assert _lines(code + "\nfit_one(first_batch)\n", "TL401") == []


def test_a_submodule_of_a_module_in_eval_mode_runs_in_eval_mode() -> None:
    # d2l's predict_seq2seq and DeepSpeed's BERT validation: `net.eval()`, then `net.decoder(...)`
    code = """
        import torch

        def predict_seq2seq(net, src_tokens, num_steps, device):
            net.eval()
            enc_X = torch.unsqueeze(torch.tensor(src_tokens, dtype=torch.long, device=device), dim=0)
            enc_outputs = net.encoder(enc_X)
            dec_state = net.decoder.init_state(enc_outputs)
            dec_X = torch.unsqueeze(torch.tensor([0], dtype=torch.long, device=device), dim=0)
            output_seq = []
            for _ in range(num_steps):
                Y, dec_state = net.decoder(dec_X, dec_state)
                dec_X = Y.argmax(dim=2)
                output_seq.append(dec_X.squeeze(dim=0).item())
            return output_seq

        def pretrain_validation(args, model, data_batches):
            model.eval()
            for batch in data_batches:
                batch = tuple(t.to(args.device) for t in batch)
                tmp_eval_loss = model.network(batch, log=False)
    """
    # the decoder in the loop (where memory grows), and the validation's forward
    assert _lines(code, "TL303") == [12, 21]


def test_methods_of_a_module_in_eval_mode_are_not_forward_passes() -> None:
    # pytorch/examples' word_language_model and litgpt's generate: `model.init_hidden(bsz)`,
    # `model.set_kv_cache(batch_size=1)` after `model.eval()`; Lightning's trainer turns grad off itself
    code = """
        import torch

        def export(model, batch_size):
            model.eval()
            hidden = model.init_hidden(batch_size)
            model.set_kv_cache(batch_size=1)
            torch.onnx.export(model, (dummy, hidden), "m.onnx")

        def val_loop(model, val_loader):
            model.eval()
            torch.set_grad_enabled(False)
            for batch_idx, batch in enumerate(val_loader):
                out = model(batch)
            torch.set_grad_enabled(True)
    """
    assert _lines(code, "TL303") == []


def test_inference_checks_in_a_test_suite_are_not_evaluation_code() -> None:
    code = """
        import torch

        def _test_inference(model, batch):
            model.eval()
            outputs = model.inference(batch)
            for x in batch:
                model(x)
    """
    assert _lines(code, "TL303", name="tests/tts_tests/test_glow_tts.py") == []
    assert _lines(code, "TL303") == [8]



def test_an_array_numpy_builds_in_the_step_is_host_built_and_an_observation_is_data() -> None:
    # coqui's maximum_path: a path searched on the host in an array NumPy made, copied back each step
    code = """
        import numpy as np
        import torch

        def maximum_path(value, mask):
            device, dtype = value.device, value.dtype
            value = value.data.cpu().numpy().astype(np.float32)
            path = np.zeros_like(value).astype(np.int32)
            search(path, value)
            return torch.from_numpy(path).to(device=device, dtype=dtype)

        def act(policy, env, obs):
            obs, reward, done, info = env.step(policy(torch.from_numpy(obs).to("cuda")))
            return obs

        for x, y in loader:
            attn = maximum_path(model(x.cuda()), y.cuda())
            act(policy, env, obs)
            attn.sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    assert _lines(code, "TL406") == [10]


def test_arrays_numpy_builds_from_numbers_through_grids_stacks_and_draws_are_host_built() -> None:
    # faster-rcnn.pytorch's anchor shifts (a meshgrid of two aranges, raveled, stacked, transposed) and
    # its NumPy draws of a count, wrapped and moved by `type_as` every step; near misses: a shuffle of
    # the batch's own array and a stack of loaded arrays are data
    code = """
        import numpy as np
        import torch

        def targets(scores, boxes, stride, n, batch_x, batch_y):
            sx = np.arange(0, scores.size(3)) * stride
            sy = np.arange(0, scores.size(2)) * stride
            sx, sy = np.meshgrid(sx, sy)
            shifts = torch.from_numpy(np.vstack((sx.ravel(), sy.ravel())).transpose())
            shifts = shifts.contiguous().type_as(scores).float()
            order = torch.from_numpy(np.random.permutation(boxes.size(0))).type_as(boxes).long()
            draws = np.floor(np.random.rand(n) * 4)
            draws = torch.from_numpy(draws).type_as(boxes)
            mixed = torch.from_numpy(np.random.permutation(batch_x)).type_as(boxes)
            stacked = torch.from_numpy(np.vstack((batch_x, batch_y))).type_as(boxes)
            return shifts, order, draws, mixed, stacked

        for x, y in loader:
            out = model(x.cuda())
            targets(out, y.cuda(), 16, 8, x.numpy(), y.numpy())
            out.sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    assert _lines(code, "TL406") == [10, 11, 13]


def test_slices_and_draws_of_an_array_numpy_built_from_numbers_are_host_built() -> None:
    # faster-rcnn's proposal sampling: `torch.from_numpy(npr.choice(np.arange(0, n), size=k)).long().cuda()`
    # and NumPy's indices with an axis added, copied every step; near misses: a slice of the batch's own array,
    # and a draw from the batch's labels
    code = """
        import numpy as np
        import numpy.random as npr
        import torch

        def sample_rois(rois, labels, k, batch):
            keep = torch.from_numpy(npr.choice(np.arange(0, rois.size(0)), size=k, replace=False)).long().cuda()
            ids = np.arange(rois.size(0))[None, :]
            first = torch.from_numpy(ids).cuda()
            own = torch.from_numpy(batch[:k]).cuda()
            drawn = torch.from_numpy(npr.choice(labels, size=k)).cuda()
            return keep, first, own, drawn

        for x, y in loader:
            out = model(x.cuda())
            sample_rois(out, y.numpy(), 8, x.numpy())
            out.sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    assert _lines(code, "TL406") == [7, 9]


def test_an_array_numpy_builds_from_numbers_written_in_the_code_is_host_built() -> None:
    # PointNet's spatial transformer: `torch.from_numpy(np.array([1, 0, 0, 0, 1, 0, 0, 0, 1]))` as the
    # identity it adds every forward; torchdiffeq's `np.array([2. * np.pi])`. Near misses: an array
    # of the batch's values, and one of a list that names a variable
    code = """
        import numpy as np
        import torch

        def identity_plus(x, scale, values):
            iden = torch.from_numpy(np.array([1, 0, 0, 0, 1, 0, 0, 0, 1]).astype(np.float32)).view(1, 9)
            const = torch.from_numpy(np.array([[2. * np.pi, -1.5]])).float().to(x.device)
            data = torch.from_numpy(np.array(values)).to(x.device)
            named = torch.from_numpy(np.array([1.0, scale])).to(x.device)
            return x + iden.cuda() + const.sum() + data.sum() + named.sum()

        for x, y in loader:
            out = identity_plus(model(x.cuda()), 2.0, y.numpy())
            out.sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    assert _lines(code, "TL406") == [7, 10]


def test_labels_numpy_repeats_from_a_range_are_host_built_and_repeated_batch_labels_are_data() -> None:
    # few-shot episodes: `torch.from_numpy(np.repeat(range(n_way), n_query))` are the same labels every
    # episode, built on the host and copied each step; near misses: the batch's own labels repeated,
    # and a range handed to torch (built where `device=` says)
    code = """
        import numpy as np
        import torch

        def episode_loss(scores, n_way, n_query, labels):
            y_query = torch.from_numpy(np.repeat(range(n_way), n_query))
            tiled = torch.from_numpy(np.tile(np.arange(n_way), n_query)).cuda()
            own = torch.from_numpy(np.repeat(labels, n_query)).cuda()
            ranged = torch.tensor(range(n_way), device="cuda")
            return loss_fn(scores, y_query.cuda()) + tiled.sum() + own.sum() + ranged.sum()

        for x, y in loader:
            episode_loss(model(x.cuda()), 5, 15, y.numpy()).backward()
            optimizer.step()
            optimizer.zero_grad()
    """
    assert _lines(code, "TL406") == [7, 10]


def test_a_table_the_object_keeps_passed_to_a_helper_that_moves_it_is_copied_every_step() -> None:
    # improved-diffusion's `_extract_into_tensor(self.sqrt_alphas_cumprod, t, shape)`, copied from
    # NumPy to the device at every call; near misses: the same helper given fresh data per step, and
    # given the table only outside the step
    code = """
        import numpy as np
        import torch as th

        def _extract_into_tensor(arr, timesteps, broadcast_shape):
            res = th.from_numpy(arr).to(device=timesteps.device)[timesteps].float()
            return res.expand(broadcast_shape)

        def _moved(arr, like):
            return th.from_numpy(arr).to(like.device)

        class Diffusion:
            def __init__(self, betas):
                self.betas = np.array(betas, dtype=np.float64)
                self.sqrt_alphas_cumprod = np.sqrt(np.cumprod(1.0 - self.betas))
                self.first = _moved(self.betas, th.zeros(1))

            def q_sample(self, x_start, t, noise):
                scale = _extract_into_tensor(self.sqrt_alphas_cumprod, t, x_start.shape)
                shift = _extract_into_tensor(1.0 - self.sqrt_alphas_cumprod, t, x_start.shape)
                return scale * x_start + shift * noise

        def fit(model, loader, optimizer, diffusion):
            for x, y in loader:
                x = x.cuda()
                t = th.randint(0, 1000, (x.shape[0],), device=x.device)
                x_t = diffusion.q_sample(x, t, th.randn_like(x))
                w = _moved(y.numpy(), x)
                loss = (model(x_t, t) * w).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()

        fit(net, data, opt, Diffusion(np.linspace(1e-4, 0.02, 1000)))
    """
    assert _lines(code, "TL406") == [6]


def test_a_helper_that_steps_what_it_is_given_updates_where_it_is_given_an_optimizer(tmp_path) -> None:
    from tests.helpers import lint as lint_file

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "steps.py").write_text("def advance(thing):\n    thing.step()\n")
    script = """
        import torch
        from steps import advance
        model = torch.nn.Linear(4, 4).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for batch in loader:
            optimizer.zero_grad()
            model(batch.cuda()).mean().backward()
            advance(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            advance(env)
    """
    found = [d.line for d in lint_file(script, "TL205", name=str(tmp_path / "train.py")) if d.code == "TL205"]
    assert found == [10]  # the clip after the helper stepped the optimizer; stepping `env` updates nothing
    assert [d.line for d in lint_file(script.replace("advance(optimizer)", "advance(env)"), "TL205", name=str(tmp_path / "train.py"))] == []


HAND_UPDATE = """
import torch


def sgd(params, lr, batch_size):
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size
            param.grad.zero_()


w = torch.zeros(4, 1, requires_grad=True, device="cuda")
b = torch.zeros(1, requires_grad=True, device="cuda")
for epoch in range(3):
    for X, y in data_iter:
        l = ((X.cuda() @ w + b - y.cuda()) ** 2).sum()
        l.backward()
        sgd([w, b], 0.03, 10)
        print(l.item())
"""

EPOCH_WITH_HAND_UPDATE = """
import torch

model = Net().cuda()


def evaluate(batches):
    total = 0.0
    with torch.no_grad():
        for x, y in batches:
            total += criterion(model(x.cuda()), y.cuda()).item()
    return total


def train(batches, lr):
    for x, y in batches:
        model.zero_grad()
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)


for epoch in range(10):
    train(train_batches, 20.0)
    val_loss = evaluate(val_batches)
"""


def test_a_helper_that_updates_the_weights_by_hand_is_the_step_of_the_loop_calling_it() -> None:
    # d2l's `sgd(params, lr, batch_size)`: `param -= lr * param.grad` in a loop over the parameters
    # is the update, as `optimizer.step()` is; the batch loop calling it trains
    (d,) = lint(HAND_UPDATE, "TL401")
    assert d.line == HAND_UPDATE.splitlines().index("        print(l.item())") + 1


def test_an_epoch_function_updating_by_hand_in_its_batch_loop_does_not_make_the_epoch_loop_a_step() -> None:
    # word_language_model's train(): the hand update sits in the loop over batches, which
    # backpropagates: train() runs an epoch, and evaluate() beside it is not per step
    lines = [d.line for d in lint(EPOCH_WITH_HAND_UPDATE, "TL401")]
    assert lines == []


def test_a_stream_is_one_by_its_value_and_a_scheduler_by_what_built_it() -> None:
    # a CUDA stream's `synchronize()` waits for the device; an object merely called a stream does not
    code = """
        import torch
        side = torch.cuda.Stream()
        for x, y in loader:
            loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            side.synchronize()
            torch.cuda.current_stream().synchronize()
            event_stream.synchronize()
    """
    assert _lines(code, "TL402") == [9, 10]
    # a scheduler built by a library's schedule builder, whatever its name; an object named like one
    # whose kind is not known (a learning-rate finder, a curriculum) is not a scheduler
    schedulers = """
        import torch
        from transformers import get_cosine_schedule_with_warmup
        warmup = get_cosine_schedule_with_warmup(optimizer, 100, 1000)
        for x in loader:
            warmup.step()
            lr_finder.step()
            model(x).backward()
            optimizer.step()
    """
    assert _lines(schedulers, "TL502") == [6]


MOVING_HELPERS = """
    import torch
    from torch.autograd import Variable


    def to_var(x):
        if torch.cuda.is_available():
            x = x.cuda()
        return Variable(x)


    def to_host(x):
        return x.to("cpu")


    def shifted(x):
        return x.cuda() + 1


    class GAN:
        def get_torch_variable(self, arg):
            if self.cuda:
                return Variable(arg).cuda(self.cuda_index)
            return Variable(arg)

        def train(self, loader):
            for images, _ in loader:
                z = self.get_torch_variable(torch.randn(images.size(0), 100))
                noise = to_var(torch.rand(images.size(0), 1))
                real = to_var(images)
                kept = to_host(torch.ones(4))
                other = shifted(torch.zeros(4))
                loss = self.D(real).mean() - self.D(self.G(z + noise)).mean()
                self.d_optimizer.zero_grad()
                loss.backward()
                self.d_optimizer.step()
"""


def test_a_helper_moving_what_it_is_given_moves_a_host_built_tensor_every_step() -> None:
    # `to_var(x)` (moving under `torch.cuda.is_available()`, then `Variable(x)`) and a method returning
    # `Variable(arg).cuda(...)` copy a host-built draw to the device: reported at the call, not again in
    # the helper; near misses: the batch a loader gives (data), a helper moving to the host. One that
    # computes with what it moves (`x.cuda() + 1`) is no moving helper: its move is reported inside (17)
    assert _lines(MOVING_HELPERS, "TL406") == [17, 28, 29]


def test_a_moving_helper_of_a_module_without_training_code_is_read_from_its_outline(tmp_path: Path) -> None:
    # DCGAN-LSGAN-WGAN-GP-DRAGAN's `utils.cuda([imgs, z, r_lbl, f_lbl])`, whose `utils.py` has no
    # training code: `[x.cuda() for x in xs]`; one finding for the statement, naming each host tensor
    files = {
        "utils.py": """
            import torch


            def cuda(xs):
                if torch.cuda.is_available():
                    if not isinstance(xs, (list, tuple)):
                        return xs.cuda()
                    else:
                        return [x.cuda() for x in xs]


            def keep(xs):
                return [x for x in xs]
        """,
        "train.py": """
            import torch
            import utils

            for imgs, _ in loader:
                z = torch.randn(imgs.size(0), 100)
                ones = torch.ones(imgs.size(0))
                imgs, z, ones = utils.cuda([imgs, z, ones])
                kept = utils.keep([torch.zeros(4)])
                loss = D(G(z)).mean() + ones.sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
        """,
    }
    assert lint_tree(tmp_path, files) == ["train.py:8:TL406"]
