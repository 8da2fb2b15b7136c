"""The private Lightning attributes rl_lightning relies on, one test each: where Lightning renames or
drops one, this fails (not a silent change of behaviour). Each is used where Lightning has no public API
for the job; the comment at the use names the job."""

import lightning as L
import torch
from lightning.pytorch.core.optimizer import LightningOptimizer
from lightning.pytorch.strategies import DDPStrategy


def test_ddp_constructor_kwargs_are_held_until_the_module_is_wrapped():
    # RLModule.setup: ddp_find_unused_parameters for a user's plain strategy=ddp.
    strategy = DDPStrategy()
    assert isinstance(strategy._ddp_kwargs, dict)


def test_the_training_loop_counts_the_steps_that_reach_the_logger():
    # training_log.should_log: Lightning's own rule for log_every_n_steps.
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    assert trainer.fit_loop.epoch_loop._batches_that_stepped == 0


def test_lightning_optimizer_counts_steps_in_its_step_hooks():
    # cuda_graphs.UpdateGraphs.run: a replayed graph's optimizer steps counted (global_step).
    optimizer = LightningOptimizer(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1))
    assert callable(optimizer._on_before_step) and callable(optimizer._on_after_step)


def test_ddp_wraps_the_module_in_configure_ddp_when_fitting():
    # RLModule.setup: a population split across ranks replaces configure_ddp on its strategy (no wrapper,
    # no gradient all-reduce); Lightning's setup calls it only when fitting.
    import inspect

    assert "self.configure_ddp()" in inspect.getsource(DDPStrategy.setup)
    assert "_setup_model" in inspect.getsource(DDPStrategy.configure_ddp)
