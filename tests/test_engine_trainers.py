"""An RLHF trainer in the style of DeepSpeed-Chat: trainer classes in another module whose methods
backpropagate and step through an engine object (`self.actor_model.backward(loss)` then
`self.actor_model.step()`), one of two classes chosen by a flag (`trainer_class = A if flag else B`),
and a script whose loop reads the losses the trainer returns every step."""

from __future__ import annotations

from pathlib import Path

from tests.test_library_hooks import lint_tree

RLHF = {
    "chat/__init__.py": "",
    "chat/ppo_trainer.py": """
        import torch


        class PPOTrainer:
            def __init__(self, engine, args):
                self.actor_model = engine.actor
                self.critic_model = engine.critic

            def train_rlhf(self, inputs):
                logits = self.actor_model(**inputs).logits
                actor_loss = -torch.log_softmax(logits, dim=-1).mean()
                self.actor_model.backward(actor_loss)
                self.actor_model.step()
                values = self.critic_model(**inputs).values
                critic_loss = torch.nn.functional.mse_loss(values, inputs["returns"])
                self.critic_model.backward(critic_loss)
                self.critic_model.step()
                return actor_loss, critic_loss


        class PPOTrainerUnsupervised(PPOTrainer):
            def train_unsupervised(self, inputs, coef):
                loss = self.actor_model(**inputs).loss * coef
                self.actor_model.backward(loss)
                self.actor_model.step()
                return loss
    """,
    "train.py": """
        import torch
        from chat.ppo_trainer import PPOTrainer, PPOTrainerUnsupervised


        def main(args, engine, batches):
            torch.cuda.set_device(args.local_rank)
            trainer_class = PPOTrainerUnsupervised if args.unsupervised else PPOTrainer
            trainer = trainer_class(engine, args)
            for epoch in range(args.epochs):
                actor_loss_sum = 0
                for exp_data in batches:
                    actor_loss, critic_loss = trainer.train_rlhf(exp_data)
                    actor_loss_sum += actor_loss.item()
                print(actor_loss_sum / len(batches))
    """,
}


def test_a_loop_over_an_engine_trainer_chosen_by_a_flag_is_a_step_loop(tmp_path: Path):
    assert lint_tree(tmp_path, RLHF) == ["train.py:14:TL401"]


def test_an_object_that_backpropagates_and_steps_updates_weights_and_another_object_s_step_does_not(tmp_path: Path):
    import textwrap

    from trainlint.project.index import Project

    module = tmp_path / "ppo_trainer.py"
    module.write_text(textwrap.dedent(RLHF["chat/ppo_trainer.py"]))
    assert Project(tmp_path).summary(module).classes["PPOTrainer"].methods["train_rlhf"].steps
    # the object that steps is an environment: backpropagating alone updates nothing here
    module.write_text(textwrap.dedent(RLHF["chat/ppo_trainer.py"]).replace("self.actor_model.step()", "self.env.step()").replace(
        "self.critic_model.step()", "self.env.step()"))
    summary = Project(tmp_path).summary(module).classes["PPOTrainer"].methods["train_rlhf"]
    assert summary.backprops and not summary.steps


def test_a_class_chosen_among_classes_that_do_not_all_step_is_not_a_step(tmp_path: Path):
    files = dict(RLHF)
    files["chat/ppo_trainer.py"] = RLHF["chat/ppo_trainer.py"] + """
        class DryRunTrainer(PPOTrainer):
            def train_rlhf(self, inputs):
                return self.actor_model(**inputs).loss, self.critic_model(**inputs).loss
    """
    files["train.py"] = RLHF["train.py"].replace("PPOTrainerUnsupervised if", "DryRunTrainer if").replace(
        "import PPOTrainer, PPOTrainerUnsupervised", "import PPOTrainer, DryRunTrainer")
    assert lint_tree(tmp_path, files) == []
