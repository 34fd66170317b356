"""Transfers a training algorithm cannot avoid are not findings: an action read for a host environment
by a helper (Lightning's DQN example), the environment's observation wrapped as a tensor, priorities
handed back to the replay buffer that gave the batch (CleanRL's Rainbow), and a count kept in a host
tensor that is updated in place (torchtitan's valid-token count). Each has its near-miss, which is."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import lines, lint


def _lines(code: str, rule: str) -> list[int]:
    return sorted(d.line for d in lint(code, rule, name="dqn.py") if d.code == rule)


DQN = """
    import random
    import torch
    from lightning import LightningModule

    class Agent:
        def __init__(self, env, buffer):
            self.env = env
            self.buffer = buffer
            self.state = self.env.reset()

        def get_action(self, net, epsilon, device):
            if random.random() < epsilon:
                action = self.env.action_space.sample()
            else:
                state = torch.tensor([self.state])
                state = state.cuda(device)
                q_values = net(state)
                _, action = torch.max(q_values, dim=1)
                action = int(action.item())
            return action

        def best_value(self, net, device):
            q = net(torch.tensor([self.state]).cuda(device))
            value = q.max().item()
            return value

        @torch.no_grad()
        def play_step(self, net, epsilon, device):
            action = self.get_action(net, epsilon, device)
            new_state, reward, done, _ = self.env.step(action)
            self.buffer.append((self.state, action, reward, done, new_state))
            self.state = new_state
            return reward, done

    class DQN(LightningModule):
        def __init__(self, env):
            super().__init__()
            self.net = torch.nn.Linear(4, 2)
            self.agent = Agent(env, [])
            self.total_reward = 0.0

        def training_step(self, batch, batch_idx):
            reward, done = self.agent.play_step(self.net, 0.1, self.device)
            self.log("value", self.agent.best_value(self.net, self.device))
            self.log("reward", torch.tensor([self.total_reward]).to(self.device))
            return self.loss(batch)
"""


def test_an_action_a_helper_returns_to_the_environment_step_is_not_a_sync() -> None:
    # `get_action` reads the action for `env.step` in its caller; `best_value` reads a value only logged
    assert _lines(DQN, "TL401") == [25]
    # RL-Adventure-2's SAC: `action = action.detach().cpu().numpy()`, then `return action[0]`: an
    # element of the copy is what the caller hands to `env.step`; the same copy of the value only
    # logged still is a sync
    element = DQN.replace("action = int(action.item())", "action = action.detach().cpu().numpy()").replace("            return action\n", "            return action[0]\n")
    assert _lines(element.replace("value = q.max().item()", "value = q.max().cpu().numpy()\n            value = value[0]"), "TL401") == [25]


def test_an_environments_observation_wrapped_as_a_tensor_is_data() -> None:
    # `torch.tensor([self.state])` of what `env.reset()`/`env.step()` returned moves data, as a batch
    # does; the running reward the module keeps could live on the device
    assert _lines(DQN, "TL406") == [46]


REPLAY = """
    import torch

    rb = PrioritizedReplayBuffer(100000)
    meter = Meter()
    for global_step in range(1000000):
        obs, reward, done, info = envs.step(actions)
        data = rb.sample(32, beta)
        stats = meter.summary()
        loss_per_sample = (q_network(data.observations.cuda()) - data.targets.cuda()) ** 2
        loss = loss_per_sample.mean()
        new_priorities = loss_per_sample.detach().cpu().numpy()
        rb.update_priorities(data.indices, new_priorities)
        meter.update(stats.count, loss.detach().cpu().numpy())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_priorities_handed_back_to_the_buffer_that_gave_the_batch_are_not_a_sync() -> None:
    # the meter is handed a host copy along with something it returned, but the loss was not
    # computed from what the meter returned: a sync to log, not the buffer's feedback
    assert _lines(REPLAY, "TL401") == [14]


UNPACKED = """
    import numpy as np
    import torch

    def compute_td_loss(batch_size, beta):
        state, action, reward, done, indices, weights = replay_buffer.sample(batch_size, beta)
        state = torch.FloatTensor(np.float32(state)).cuda()
        weights = torch.FloatTensor(weights).cuda()
        loss = current_model(state).max(1)[0].pow(2) * weights
        prios = loss + 1e-5
        optimizer.zero_grad()
        loss.mean().backward()
        replay_buffer.update_priorities(indices, prios.data.cpu().numpy())
        optimizer.step()

    for frame_idx in range(1, 1000000):
        compute_td_loss(32, 0.4)
"""


def test_priorities_handed_back_with_the_indices_unpacked_beside_the_batch_are_not_a_sync() -> None:
    # RL-Adventure's prioritized DQN: `state, ..., indices, weights = replay_buffer.sample(n, beta)`,
    # the priorities computed from the rows handed back with `indices`; near miss: indices the step
    # makes itself are not the rows the buffer gave
    assert _lines(UNPACKED, "TL401") == []
    made = UNPACKED.replace("replay_buffer.update_priorities(indices,", "replay_buffer.update_priorities(np.arange(batch_size),")
    assert _lines(made, "TL401") == [13]


REPLAY_LOGGED = """
    import torch

    rb = PrioritizedReplayBuffer(100000)
    for global_step in range(1000000):
        data = rb.sample(32, beta)
        loss_per_sample = (q_network(data.observations.cuda()) - data.targets.cuda()) ** 2
        loss = loss_per_sample.mean()
        new_priorities = loss_per_sample.detach().cpu().numpy()
        rb.update_priorities(data.indices, new_priorities)
        writer.add_scalar("loss", loss.detach().cpu().numpy(), global_step)
        rb.add_note(loss.detach().cpu().numpy())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_a_host_copy_logged_or_handed_to_the_buffer_without_its_rows_is_a_sync() -> None:
    assert _lines(REPLAY_LOGGED, "TL401") == [11, 12]


TOKENS = """
    import torch

    def train_step(model, optimizer, data_iterator, device):
        optimizer.zero_grad()
        local_valid_tokens = torch.tensor(0, dtype=torch.int64)
        on_device = torch.tensor(0, dtype=torch.int64, device=device)
        batches = []
        for _ in range(4):
            inputs, labels = next(data_iterator)
            local_valid_tokens += (labels != -100).sum()
            on_device += (labels.to(device) != -100).sum()
            batches.append((inputs, labels))
        print("tokens", int(local_valid_tokens))
        print("on device", int(on_device))
        for inputs, labels in batches:
            loss = model(inputs.to(device), labels.to(device)) / local_valid_tokens.to(device)
            loss.backward()
        optimizer.step()

    for step in range(steps):
        train_step(model, optimizer, data_iterator, "cuda")
"""


def test_a_host_tensor_updated_in_place_stays_on_the_host() -> None:
    # `local_valid_tokens += ...` cannot move the host tensor; the one built on the device is read
    assert _lines(TOKENS, "TL401") == [15]


LOADER = """
    import numpy as np
    import torch

    def _load_data_shard(path):
        header = torch.from_file(path, False, 256, dtype=torch.int32)
        assert header[0] == 20240520, "magic number mismatch"
        num_tokens = int(header[2])
        tokens = torch.empty(num_tokens, dtype=torch.uint16, pin_memory=True)
        return tokens

    class DataLoaderLite:
        def __init__(self, files, B, T):
            self.files, self.B, self.T = files, B, T
            self.tokens = np.load(files[0])
            self.pinned = _load_data_shard(files[0])
            self.pos = 0
            self.means = [0.5, 0.5]

        def next_batch(self):
            if self.pos + self.B * self.T >= len(self.pinned):
                self.pinned, self.pos = _load_data_shard(self.files[1]), 0
            buf = self.tokens[self.pos : self.pos + self.B * self.T + 1]
            buf = torch.tensor(buf.astype(np.int32), dtype=torch.long)
            x = buf[:-1].view(self.B, self.T)
            staged = self.pinned[self.pos : self.pos + self.B * self.T]
            self.pos += self.B * self.T
            return x.cuda(), staged.to("cuda", non_blocking=True), torch.tensor(self.means).cuda()

    def train(model, files, optimizer):
        model.cuda()
        loader = DataLoaderLite(files, 4, 64)
        for step in range(1000):
            x, y, means = loader.next_batch()
            loss = model(x, y, means)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
"""


def test_a_batch_cut_from_the_data_a_loader_holds_is_data() -> None:
    # the tokens cut at the loader's position, and a pinned buffer made for copies, are the batch;
    # a tensor of constants the loader keeps (`self.means`) could be built on the device
    assert _lines(LOADER, "TL406") == [28]


def test_a_header_read_from_a_file_is_on_the_host() -> None:
    # `torch.from_file` reads into host memory: its elements are compared without a sync
    assert _lines(LOADER, "TL401") == []


# a character-level language model's script: the text encoded once into a tensor, batches stacked
# from it at random positions every step (the batch, data), beside a tensor of numbers (a constant)
ENCODED = """
    import torch

    text = open("input.txt").read()
    stoi = {ch: i for i, ch in enumerate(sorted(set(text)))}
    encode = lambda s: [stoi[c] for c in s]
    data = torch.tensor(encode(text), dtype=torch.long)


    def get_batch(block_size, batch_size):
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([data[i:i + block_size] for i in ix])
        scale = torch.tensor([0.5, 2.0])
        x = x.to("cuda")
        scale = scale.to("cuda")
        return x, scale


    def train(model, optimizer):
        for step in range(1000):
            x, scale = get_batch(8, 4)
            loss = model(x, scale)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


def test_batches_stacked_from_a_text_encoded_into_a_tensor_are_data() -> None:
    # `torch.tensor(encode(text))` holds what a function made of the data it read; the tensor of
    # numbers beside it could be built on the device
    assert _lines(ENCODED, "TL406") == [15]  # (the batch's move, line 14, is not)


# TD3's shape: the policy's module moves the observation it is given and copies the action back; the
# script, another module, adds exploration noise to that action and steps the environment with it
POLICY = """
    import torch
    import torch.nn as nn

    device = torch.device("cuda")


    class TD3:
        def __init__(self, dim):
            self.actor = nn.Linear(dim, 1).to(device)
            self.actor_optimizer = torch.optim.Adam(self.actor.parameters())

        def select_action(self, state):
            state = torch.FloatTensor(state.reshape(1, -1)).to(device)
            return self.actor(state).cpu().data.numpy().flatten()

        def train(self, batch):
            loss = self.actor(batch.to(device)).mean()
            self.actor_optimizer.zero_grad()
            loss.backward()
            self.actor_optimizer.step()
"""
SCRIPT = """
    import numpy as np
    import gym
    import TD3

    if __name__ == "__main__":
        env = gym.make("Hopper-v3")
        policy = TD3.TD3(11)
        state, done = env.reset(), False
        for t in range(1000):
            action = (policy.select_action(np.array(state)) + np.random.normal(0, 0.1, size=1)).clip(-1, 1)
            next_state, reward, done, _ = env.step(action)
            state = next_state
            policy.train(batch)
"""


def _project(tmp_path: "Path", script: str) -> list[str]:
    from tests.test_device_values import lint_project

    return lint_project(tmp_path, {"TD3.py": POLICY, "main.py": script}, "TL401,TL406")


def test_an_observation_and_an_action_a_policy_of_another_module_moves_for_the_script_s_environment_are_data(tmp_path: "Path") -> None:
    assert _project(tmp_path, SCRIPT) == []


def test_a_policy_s_output_the_script_keeps_for_itself_is_a_sync(tmp_path: "Path") -> None:
    # the action is logged, never stepped; the state is a number the script makes: both are the step's own
    script = SCRIPT.replace("next_state, reward, done, _ = env.step(action)", "next_state, reward, done = 0.0, 0.0, False; print(action)").replace(
        "state, done = env.reset(), False", "state, done = np.zeros(11), False")
    assert _project(tmp_path, script) == ["TD3.py:14:TL406", "TD3.py:15:TL401"]


CATEGORICAL = """
    import torch
    import torch.nn as nn

    class CategoricalDQN(nn.Module):
        def forward(self, x):
            return self.layers(x).softmax(-1)

        def act(self, state):
            state = torch.FloatTensor(state).unsqueeze(0).cuda()
            dist = self.forward(state).data.cpu()
            dist = dist * torch.linspace(-10, 10, 51)
            action = dist.sum(2).max(1)[1].numpy()[0]
            return action

    model = CategoricalDQN().cuda()
    state = env.reset()
    for frame_idx in range(1, 100000):
        action = model.act(state)
        next_state, reward, done, _ = env.step(action)
        loss = compute_td_loss(32)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def test_an_action_computed_from_a_host_copy_and_returned_to_the_environment_is_the_algorithm_s() -> None:
    # RL-Adventure's categorical DQN: the distribution is copied, weighted by the atoms on the host, and
    # the action it picks returned to the loop's `env.step`; near miss: an action kept for a log syncs
    assert _lines(CATEGORICAL, "TL401") == []
    assert _lines(CATEGORICAL.replace("env.step(action)", "env.step(0); print(action)"), "TL401") == [11]


# SAC's shape: the replay buffer's `sample` stacks stored transitions; the update wraps each part with
# a legacy constructor and moves it, as a DataLoader's batch is moved
SAC_REPLAY = """
    import torch


    class SAC:
        def __init__(self, critic, device):
            self.critic, self.device = critic, device
            self.optim = torch.optim.Adam(critic.parameters())

        def update_parameters(self, memory, batch_size):
            state_batch, reward_batch = memory.sample(batch_size=batch_size)
            state_batch = torch.FloatTensor(state_batch).to(self.device)
            reward_batch = torch.FloatTensor(reward_batch).to(self.device).unsqueeze(1)
            scale = torch.FloatTensor([0.5, 2.0]).to(self.device)
            noise = torch.FloatTensor(batch_size, 1).to(self.device)
            loss = ((self.critic(state_batch) - reward_batch * scale[0] - noise) ** 2).mean()
            self.optim.zero_grad()
            loss.backward()
            self.optim.step()
"""


def test_a_replay_batch_wrapped_by_a_legacy_constructor_is_data() -> None:
    # (the constants beside it, a list of numbers and a size, could be built on the device)
    assert _lines(SAC_REPLAY, "TL406") == [14, 15]
    # the same batch wrapped by `torch.tensor(...)` (actor-critic course code: `states = T.tensor(states,
    # dtype=T.float).to(self.actor.device)`), beside a table of numbers it builds
    wrapped = SAC_REPLAY.replace("torch.FloatTensor(state_batch)", "torch.tensor(state_batch, dtype=torch.float)").replace(
        "torch.FloatTensor(reward_batch)", "torch.tensor(reward_batch)").replace("torch.FloatTensor([0.5, 2.0])", "torch.tensor([0.5, 2.0])")
    assert _lines(wrapped, "TL406") == [14, 15]


# the DDPG/TD3 buffer of openai baselines' shape: a list of transitions, `sample` stacking the drawn ones
# with NumPy; what it returns is the stored data, as a buffer holding arrays gives
LIST_REPLAY = """
import numpy as np
import torch

device = torch.device("cuda")

class Replay_buffer():
    def __init__(self, max_size=1000):
        self.storage = []

    def push(self, data):
        self.storage.append(data)

    def sample(self, batch_size):
        ind = np.random.randint(0, len(self.storage), size=batch_size)
        x, r = [], []
        for i in ind:
            X, R = self.storage[i]
            x.append(np.array(X, copy=False))
            r.append(np.array(R, copy=False))
        return np.array(x), np.array(r).reshape(-1, 1)

class DDPG(object):
    def __init__(self, actor, critic):
        self.actor, self.critic = actor.to(device), critic.to(device)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=1e-4)
        self.replay_buffer = Replay_buffer()

    def update(self):
        for it in range(200):
            x, r = self.replay_buffer.sample(100)
            state = torch.FloatTensor(x).to(device)
            reward = torch.FloatTensor(r).to(device)
            actor_loss = -self.critic(state, self.actor(state)).mean()
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()
"""


def test_a_replay_batch_stacked_from_a_list_of_stored_transitions_is_data() -> None:
    assert _lines(LIST_REPLAY, "TL406") == []



# hindsight experience replay's update: a dict of arrays sampled from the buffer, fields normalised by a
# method and joined with NumPy, then wrapped by `torch.tensor(...)` and moved under a flag
DICT_REPLAY = """
import numpy as np
import torch

class Agent:
    def __init__(self, actor, buffer, normalizer, use_cuda):
        self.actor = actor.cuda()
        self.buffer = buffer
        self.o_norm = normalizer
        self.use_cuda = use_cuda
        self.optim = torch.optim.Adam(self.actor.parameters())

    def update(self):
        for _ in range(40):
            batch = self.buffer.sample(256)
            obs = self.o_norm.normalize(batch["obs"])
            goal = self.o_norm.normalize(batch["g"])
            inputs = np.concatenate([obs, goal], axis=1)
            inputs_tensor = torch.tensor(inputs, dtype=torch.float32)
            actions = torch.tensor(batch["actions"], dtype=torch.float32)
            weights = torch.tensor(np.concatenate([np.ones(3), np.zeros(3)]))
            if self.use_cuda:
                inputs_tensor = inputs_tensor.cuda()
                actions = actions.cuda()
                weights = weights.cuda()
            loss = (self.actor(inputs_tensor) - actions).pow(2).mean()
            self.optim.zero_grad()
            loss.backward()
            self.optim.step()
"""


def test_fields_of_a_sampled_batch_joined_by_numpy_are_data() -> None:
    # the joined array of numbers the code wrote (line 25) is still built on the host each step
    assert _lines(DICT_REPLAY, "TL406") == [25]
    # a dict the code writes holds numbers, not data
    written = DICT_REPLAY.replace('batch = self.buffer.sample(256)', 'batch = {"obs": [0.0], "g": [1.0], "actions": [0.5, 0.5]}')
    assert _lines(written, "TL406") == [24, 25]

def test_arrays_a_helper_builds_from_numbers_are_constants_it_moves_every_step() -> None:
    # near miss: the same call shape, the helper stacking arrays it builds with `np.ones` rather than
    # rows its class stored (constants that could be made on the device once)
    constants = LIST_REPLAY.replace("            X, R = self.storage[i]", "            X, R = np.ones(3), np.zeros(1)")
    assert _lines(constants, "TL406") == [32, 33]


# BCQ's shape: the buffer's own `sample` wraps rows of the arrays its `add` fills; the policy wraps the
# observation the script copies from the environment (`state = copy.copy(next_state)`) and reshapes it
BCQ = {
    "buffer.py": """
        import numpy as np
        import torch

        class ReplayBuffer:
            def __init__(self, n, dim, device):
                self.state = np.zeros((n, dim))
                self.ptr, self.size, self.device = 0, 0, device

            def add(self, state):
                self.state[self.ptr] = state
                self.ptr, self.size = self.ptr + 1, self.size + 1

            def sample(self, batch_size):
                ind = np.random.randint(0, self.size, size=batch_size)
                return torch.FloatTensor(self.state[ind]).to(self.device)
    """,
    "policy.py": """
        import torch
        import torch.nn as nn

        class Policy:
            def __init__(self):
                self.Q = nn.Linear(4, 2).cuda()
                self.optimizer = torch.optim.Adam(self.Q.parameters())

            def select_action(self, state):
                with torch.no_grad():
                    state = torch.FloatTensor(state).reshape(1, -1).to("cuda")
                    return int(self.Q(state).argmax(1))

            def train(self, buffer):
                loss = self.Q(buffer.sample(32)).mean()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
    """,
    "main.py": """
        import copy
        import gym
        import numpy as np
        from buffer import ReplayBuffer
        from policy import Policy

        env = gym.make("CartPole-v1")
        policy, buffer = Policy(), ReplayBuffer(100000, 4, "cuda")
        state = env.reset()
        for t in range(100000):
            action = policy.select_action(np.array(state))
            next_state, reward, done, _ = env.step(action)
            buffer.add(state)
            state = copy.copy(next_state)
            policy.train(buffer)
    """,
}


def test_rows_a_buffer_stored_and_an_observation_copied_then_reshaped_are_data(tmp_path: "Path") -> None:
    from tests.test_device_values import lint_project

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert lint_project(tmp_path / "a", BCQ, "TL406") == []
    # near miss: a state the script makes of numbers, not the environment's, is built on the host
    made = dict(BCQ, **{"main.py": BCQ["main.py"].replace("policy.select_action(np.array(state))", "policy.select_action(np.zeros(4))")})
    assert lint_project(tmp_path / "b", made, "TL406") == ["policy.py:12:TL406"]


# RL-Adventure-2's notebooks: the rollout rebinds the observation to its own tensor (`state =
# torch.FloatTensor(state).to(device)`), the done flags are converted (`torch.FloatTensor(1 - done)`,
# `np.float32(done)` of a replay sample), and the policy's `get_action(state)` wraps what the loop hands
# it. Near misses: a NumPy array of ones and a legacy constructor of sizes are built on the host
ROLLOUT = """
    import numpy as np
    import torch

    device = torch.device("cuda")


    class Policy(torch.nn.Module):
        def get_action(self, state):
            state = torch.FloatTensor(state).unsqueeze(0).to(device)
            return self.forward(state).detach().cpu().numpy()[0]


    def update(policy, buffer, optimizer):
        state, action, reward, next_state, done = buffer.sample(64)
        done = torch.FloatTensor(np.float32(done)).unsqueeze(1).to(device)
        ones = torch.FloatTensor(np.ones(64)).unsqueeze(1).to(device)
        loss = (policy(torch.FloatTensor(state).to(device)) * (1 - done) * ones).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


    state = envs.reset()
    while frame_idx < max_frames:
        masks = []
        for _ in range(num_steps):
            state = torch.FloatTensor(state).to(device)
            action = policy.get_action(state)
            next_state, reward, done, _ = envs.step(action)
            masks.append(torch.FloatTensor(1 - done).unsqueeze(1).to(device))
            sizes = torch.FloatTensor(4, 2).to(device)
            state = next_state
            update(policy, buffer, optimizer)
"""


def test_observations_and_flags_an_environment_or_a_buffer_gave_wrapped_by_legacy_constructors_are_data() -> None:
    assert _lines(ROLLOUT, "TL406") == [17, 32]


# YOLOv6's ComputeLoss: a plain object (no nn.Module) keeps its DFL projection as an `nn.Parameter` built
# on the host; nothing moves it with a model, so `self.proj.to(pred.device)` copies it every step
KEPT_PARAMETER = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class ComputeLoss{base}:
    def __init__(self, reg_max=16):
        {init}self.reg_max = reg_max
        self.proj = nn.Parameter(torch.linspace(0, reg_max, reg_max + 1), requires_grad=False)

    def {call}(self, pred):
        n = pred.shape[0]
        return F.softmax(pred.view(n, 4, self.reg_max + 1), dim=-1).matmul(self.proj.to(pred.device)).sum()


criterion = ComputeLoss()
model = nn.Linear(4, 68).cuda()
for x in loader:
    loss = criterion(model(x.cuda()))
    loss.backward()
    optimizer.step()
"""


def test_a_parameter_a_plain_object_keeps_on_the_host_is_copied_every_step() -> None:
    code = KEPT_PARAMETER.format(base="", init="", call="__call__")
    assert lines(code, "TL406") == [14]


def test_a_parameter_of_a_module_moves_with_it() -> None:
    # near miss: in an nn.Module, `.cuda()` on the module moves its parameters once
    code = KEPT_PARAMETER.format(base="(nn.Module)", init="super().__init__()\n        ", call="forward").replace(
        "criterion = ComputeLoss()", "criterion = ComputeLoss().cuda()")
    assert lines(code, "TL406") == []


def test_a_move_to_the_host_with_keywords_tensor_to_does_not_take_is_another_class_s_to() -> None:
    code = """
        import torch

        def store_embeddings(sentences, pin_memory):
            for sentence in sentences:
                sentence.to("cpu", pin_memory=pin_memory)

        model = Tagger().cuda()
        for batch in loader:
            loss = model.forward_loss(batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            store_embeddings(batch, True)
            model.logits.to("cpu", non_blocking=True)
    """
    # flair's `DataPoint.to(device, pin_memory=...)` copies each stored embedding without blocking;
    # a tensor's `.to("cpu", non_blocking=True)` still waits for the kernels that make it
    assert lines(code, "TL401") == [15]
