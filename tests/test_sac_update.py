"""demo2rl.rl.sac: FastSAC's update is SB3 2.9's SAC update, and its policy keeps SB3's interface.

Every comparison starts SB3's ``SAC`` (``MlpPolicy``, one ``ContinuousCritic``) and the candidate
from the same weights (SB3's critics stacked into the ensemble), fills both replay buffers with
the same transitions (terminations and time-outs included), seeds numpy and torch identically
before ``train``, and compares the logged losses and every updated weight.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3 import SAC
from stable_baselines3.common.buffers import NStepReplayBuffer
from stable_baselines3.common.logger import configure
from stable_baselines3.common.policies import ContinuousCritic
from stable_baselines3.common.torch_layers import NatureCNN
from torch import nn

from demo2rl.rl import sac
from demo2rl.rl.sac import EnsembleCritic, FastSAC, FastSACCnnPolicy, FastSACPolicy

NET = [16, 16]
BUFFER = 300
ATOL = 1e-5


def make(cls: type[SAC], policy: Any = "MlpPolicy", **kwargs: Any) -> SAC:
    """A model on Pendulum-v1 whose replay buffer is full of the same synthetic transitions."""
    kwargs = {
        "policy_kwargs": {"net_arch": NET},
        "learning_rate": 1e-3,
        "tau": 0.5,
        "buffer_size": BUFFER,
        "learning_starts": 0,
        "seed": 0,
        "device": "cpu",
    } | kwargs
    if issubclass(cls, FastSAC):
        kwargs.setdefault("compile_update", False)
    model = cls(policy, gym.make("Pendulum-v1"), **kwargs)
    model.set_logger(configure(None, []))
    rng = np.random.default_rng(1)
    buffer = model.replay_buffer
    assert buffer is not None
    buffer.observations[:] = rng.normal(size=buffer.observations.shape)
    buffer.next_observations[:] = rng.normal(size=buffer.next_observations.shape)
    buffer.actions[:] = rng.uniform(-1, 1, size=buffer.actions.shape)
    buffer.rewards[:] = rng.normal(size=buffer.rewards.shape)
    buffer.dones[:] = rng.random(buffer.dones.shape) < 0.2
    buffer.timeouts[:] = (rng.random(buffer.timeouts.shape) < 0.1) & (buffer.dones == 0)
    buffer.full, buffer.pos = True, 0
    return model


def stacked(critic: ContinuousCritic) -> list[th.Tensor]:
    """SB3's critics' Linear layers as the ensemble stores them: per layer, the weights
    (n, in, out), then the biases (n, 1, out)."""
    linears = [[m for m in q if isinstance(m, nn.Linear)] for q in critic.q_networks]
    layers = list(zip(*linears, strict=True))
    weights = [th.stack([lin.weight.T for lin in layer]) for layer in layers]
    biases = [th.stack([lin.bias[None] for lin in layer]) for layer in layers]
    return weights + biases


def ensemble(critic: EnsembleCritic) -> list[th.Tensor]:
    return [*critic.weights, *critic.biases]


def copy_weights(sb3: SAC, ours: SAC) -> None:
    """SB3's actor, critics and target critics into ``ours``."""
    ours.actor.load_state_dict(sb3.actor.state_dict())
    with th.no_grad():
        for source, target in ((sb3.critic, ours.critic), (sb3.critic_target, ours.critic_target)):
            for mine, theirs in zip(ensemble(target), stacked(source), strict=True):
                mine.copy_(theirs)


def train(model: SAC, gradient_steps: int) -> dict[str, float]:
    np.random.seed(7)  # noqa: NPY002  (SB3's buffers sample with numpy's global generator)
    th.manual_seed(7)
    model.train(gradient_steps, batch_size=64)
    return dict(model.logger.name_to_value)


CASES = [
    pytest.param(1, "auto", 1, 1, id="auto"),
    pytest.param(3, "auto", 1, 1, id="auto-nstep"),
    pytest.param(1, 0.1, 1, 1, id="fixed"),
    pytest.param(3, 0.1, 2, 3, id="fixed-nstep-interval2"),
    pytest.param(1, "auto", 2, 3, id="auto-interval2"),
]


@pytest.mark.parametrize(("n_steps", "ent_coef", "interval", "gradient_steps"), CASES)
@pytest.mark.parametrize("candidate", ["FastSAC", "SAC-with-FastSACPolicy"])
def test_update_is_sb3s(
    candidate: str, n_steps: int, ent_coef: str | float, interval: int, gradient_steps: int
) -> None:
    kwargs = {"n_steps": n_steps, "ent_coef": ent_coef, "target_update_interval": interval}
    sb3 = make(SAC, **kwargs)
    ours = make(FastSAC, **kwargs) if candidate == "FastSAC" else make(SAC, FastSACPolicy, **kwargs)
    assert isinstance(ours.critic, EnsembleCritic)
    if n_steps > 1:
        assert isinstance(ours.replay_buffer, NStepReplayBuffer)
    copy_weights(sb3, ours)

    expected, got = train(sb3, gradient_steps), train(ours, gradient_steps)

    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-5, abs=ATOL), key
    for name, param in sb3.actor.state_dict().items():
        th.testing.assert_close(ours.actor.state_dict()[name], param, atol=ATOL, rtol=0, msg=name)
    for source, target in ((sb3.critic, ours.critic), (sb3.critic_target, ours.critic_target)):
        for mine, theirs in zip(ensemble(target), stacked(source), strict=True):
            th.testing.assert_close(mine, theirs, atol=ATOL, rtol=0)
    if ent_coef == "auto":
        th.testing.assert_close(ours.log_ent_coef, sb3.log_ent_coef, atol=ATOL, rtol=0)


def test_compiled_step_is_sb3s() -> None:
    """The step compiles as one graph (``fullgraph``) and the graph computes SB3's update. The
    "aot_eager" backend traces and functionalises the step as inductor does, without generating
    C++ (that takes tens of seconds)."""
    kwargs = {"n_steps": 3, "target_update_interval": 2}
    sb3, ours = make(SAC, **kwargs), make(FastSAC, compile_update=True, **kwargs)
    ours.compile_backend = "aot_eager"
    copy_weights(sb3, ours)
    expected, got = train(sb3, 3), train(ours, 3)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-5, abs=ATOL), key
    for source, target in ((sb3.critic, ours.critic), (sb3.critic_target, ours.critic_target)):
        for mine, theirs in zip(ensemble(target), stacked(source), strict=True):
            th.testing.assert_close(mine, theirs, atol=ATOL, rtol=0)
    th.testing.assert_close(ours.actor.state_dict(), sb3.actor.state_dict(), atol=ATOL, rtol=0)


def test_a_process_compiles_the_step_of_many_models() -> None:
    """Each model's compiled step keeps its graphs to itself: a process that builds more models
    than torch.compile's recompile limit (a notebook, a benchmark's worker, each model with its
    actor delay's two graphs) trains every one of them."""
    limit = th._dynamo.config.recompile_limit
    for i in range(limit // 2 + 1):  # two graphs each: one more model than a shared cache holds
        policy_kwargs = {"net_arch": NET, "n_critics": 1 + i % 2}
        model = make(FastSAC, compile_update=True, policy_kwargs=policy_kwargs)
        model.compile_backend = "aot_eager"
        model.policy_delay = 2
        train(model, 2)
        assert model.compile_update, i  # compiled, not fallen back


def test_a_step_that_cannot_be_compiled_runs_eagerly_saying_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A compiler that fails (here a backend that raises, as a missing or broken C++ toolchain
    does; torch 2.11's Inductor on a CNN step on CUDA did) does not stop the run: a
    CompileFallback warning names the cause, the log says the compile failed (not that it
    compiled), and the step runs eagerly from the same batch on, exactly as
    ``compile_update=False`` would have run it."""

    def broken(graph: Any, example_inputs: Any) -> Any:
        raise RuntimeError("no working C++ compiler here")

    kwargs = {"n_steps": 3, "target_update_interval": 2}
    eager, falling = make(FastSAC, **kwargs), make(FastSAC, compile_update=True, **kwargs)
    falling.compile_backend = broken  # (both start from seed 0's weights)
    with (
        caplog.at_level(logging.INFO, logger=sac.log.name),
        pytest.warns(sac.CompileFallback, match=r"could not compile.*no working C\+\+ compiler"),
    ):
        got = train(falling, 3)
    said = [r.getMessage() for r in caplog.records if "compile" in r.getMessage()]
    assert len(said) == 1 and "before it failed" in said[0], said
    expected = train(eager, 3)
    assert got == expected and falling.compile_update is False
    for mine, theirs in ((falling.actor, eager.actor), (falling.critic, eager.critic)):
        for name, value in theirs.state_dict().items():
            assert th.equal(mine.state_dict()[name], value), name
    th.testing.assert_close(falling.log_ent_coef, eager.log_ent_coef, atol=0, rtol=0)


def adam_steps(model: SAC) -> tuple[int, ...]:
    """How many Adam steps the actor, the critics and the entropy coefficient have taken."""
    optimizers = (model.actor.optimizer, model.critic.optimizer, model.ent_coef_optimizer)
    return tuple(
        int(next(iter(opt.state.values()))["step"]) if opt.state else 0 for opt in optimizers
    )


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_delayed_actor_learns_every_other_step(compiled: bool) -> None:
    """With policy_delay 2, the second gradient step trains the critics only: after two steps
    the critics and targets are SAC's after two (the second step's targets come from the actor
    after one step in both), the actor and the entropy coefficient are SAC's after one; the
    delay counts the run's steps across ``train`` calls (the actor learns at steps 0, 2, 4)."""
    kwargs = {"n_steps": 3, "compile_update": compiled}
    every, delayed, once = (make(FastSAC, **kwargs) for _ in range(3))
    delayed.policy_delay = 2
    for model in (every, delayed, once):
        model.compile_backend = "aot_eager"  # (the graph with and without the actor's update)
    train(every, 2), train(once, 1)
    logged = train(delayed, 2)

    for mine, theirs in zip(ensemble(delayed.critic), ensemble(every.critic), strict=True):
        assert th.equal(mine, theirs)
    for mine, theirs in zip(
        ensemble(delayed.critic_target), ensemble(every.critic_target), strict=True
    ):
        assert th.equal(mine, theirs)
    for name, value in once.actor.state_dict().items():
        assert th.equal(delayed.actor.state_dict()[name], value), name
    assert th.equal(delayed.log_ent_coef, once.log_ent_coef)
    assert not th.equal(delayed.log_ent_coef, every.log_ent_coef)
    assert logged["train/actor_loss"] == pytest.approx(
        train(make(FastSAC, **kwargs), 1)["train/actor_loss"]
    )
    assert adam_steps(delayed) == (1, 2, 1)
    for _ in range(3):
        delayed.train(1, batch_size=64)
    assert adam_steps(delayed) == (3, 5, 3)


def test_unsupported_settings_are_refused() -> None:
    with pytest.raises(NotImplementedError, match="gSDE"):
        make(FastSAC, use_sde=True)
    with pytest.raises(ValueError, match="policy_delay must be at least 1, got 0"):
        make(FastSAC, policy_delay=0)
    sgd = {"net_arch": NET, "optimizer_class": th.optim.SGD}
    with pytest.raises(TypeError, match="Adam"):
        make(FastSAC, policy_kwargs=sgd, compile_update=True).train(1)
    make(FastSAC, policy_kwargs=sgd).train(1)  # eagerly, any optimizer: its own step


def test_critic_initialisation_is_sb3s() -> None:
    """Under one seed the ensemble starts from the weights SB3's critics start from: the same
    initialisation, drawn in the same order."""
    sb3, ours = make(SAC), make(FastSAC)
    for source, target in ((sb3.critic, ours.critic), (sb3.critic_target, ours.critic_target)):
        for mine, theirs in zip(ensemble(target), stacked(source), strict=True):
            th.testing.assert_close(mine, theirs, atol=0, rtol=0)
    th.testing.assert_close(ours.actor.state_dict(), sb3.actor.state_dict(), atol=0, rtol=0)


def test_critic_interface() -> None:
    model = make(FastSAC, policy_kwargs={"net_arch": NET, "n_critics": 3})
    obs, actions = th.randn(5, 3), th.rand(5, 1) * 2 - 1
    q = model.critic.q_values(obs, actions)
    assert q.shape == (3, 5, 1)
    each = model.critic(obs, actions)
    assert isinstance(each, tuple) and len(each) == 3
    th.testing.assert_close(th.stack(each), q)
    th.testing.assert_close(model.critic.q1_forward(obs, actions), q[0])
    assert not model.critic_target.training


def test_layer_norm_in_every_hidden_layer() -> None:
    model = make(FastSAC, policy_kwargs={"net_arch": [8, 6, 4], "critic_layer_norm": True})
    for critic in (model.critic, model.critic_target):
        assert [tuple(w.shape) for w in critic.norm_weights] == [(2, 1, 8), (2, 1, 6), (2, 1, 4)]
        assert [tuple(b.shape) for b in critic.norm_biases] == [(2, 1, 8), (2, 1, 6), (2, 1, 4)]
    critic = model.critic
    with th.no_grad():  # affine parameters away from the identity, to see them used
        for param in [*critic.norm_weights, *critic.norm_biases]:
            param.normal_()
    obs, actions = th.randn(5, 3), th.rand(5, 1) * 2 - 1
    inputs = th.cat([obs, actions], dim=1)
    for i in range(2):
        layers: list[nn.Module] = []
        for k, (w, b) in enumerate(zip(critic.weights, critic.biases, strict=True)):
            linear = nn.Linear(*w.shape[1:])
            linear.weight.data, linear.bias.data = w[i].T, b[i, 0]
            layers.append(linear)
            if k < len(critic.norm_weights):
                norm = nn.LayerNorm(w.shape[2])
                norm.weight.data = critic.norm_weights[k][i, 0]
                norm.bias.data = critic.norm_biases[k][i, 0]
                layers += [norm, nn.ReLU()]
        th.testing.assert_close(critic(obs, actions)[i], nn.Sequential(*layers)(inputs))
    no_norm = make(FastSAC)
    assert len(no_norm.critic.norm_weights) == 0


def test_save_load_round_trip(tmp_path: Path) -> None:
    kwargs = {"net_arch": NET, "critic_layer_norm": True, "share_features_extractor": True}
    model = make(FastSAC, policy_kwargs=kwargs)
    train(model, 2)
    model.save(tmp_path / "model.zip")
    loaded = FastSAC.load(tmp_path / "model.zip", device="cpu")
    assert isinstance(loaded.policy, FastSACPolicy)
    assert loaded.policy.critic_layer_norm and loaded.policy.share_features_extractor
    th.testing.assert_close(loaded.policy.state_dict(), model.policy.state_dict(), atol=0, rtol=0)
    assert loaded.log_ent_coef is not None and model.log_ent_coef is not None
    th.testing.assert_close(loaded.log_ent_coef, model.log_ent_coef)
    obs = np.zeros((4, 3), dtype=np.float32)
    np.testing.assert_array_equal(
        loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0]
    )
    # the loaded model trains, and averages the target critics it now has
    loaded.replay_buffer = model.replay_buffer
    loaded.set_logger(configure(None, []))
    before = [p.clone() for p in loaded.critic_target.parameters()]
    train(loaded, 1)
    after = loaded.critic_target.parameters()
    assert any(not th.equal(a, p) for a, p in zip(before, after, strict=True))

    model.policy.save(str(tmp_path / "policy.pt"))
    policy = FastSACPolicy.load(str(tmp_path / "policy.pt"), device="cpu")
    assert policy.critic_layer_norm and policy.share_features_extractor
    th.testing.assert_close(policy.state_dict(), model.policy.state_dict(), atol=0, rtol=0)


class Frames(gym.Env):
    """Random 36x36 RGB frames (NatureCNN's smallest input), a 2-D action."""

    observation_space = gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)
    action_space = gym.spaces.Box(-1, 1, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: np.ndarray) -> tuple:
        return self.observation_space.sample(), 0.0, False, False, {}


def test_cnn_policy_trains() -> None:
    model = FastSAC(
        "CnnPolicy",
        Frames(),
        buffer_size=64,
        batch_size=8,
        learning_starts=8,
        policy_kwargs={"net_arch": NET, "features_extractor_kwargs": {"features_dim": 16}},
        seed=0,
        device="cpu",
        compile_update=False,
    )
    assert isinstance(model.policy, FastSACCnnPolicy)
    assert isinstance(model.critic.features_extractor, NatureCNN)
    assert model.critic.features_extractor is not model.actor.features_extractor
    before = [p.clone() for p in model.critic.features_extractor.parameters()]
    model.learn(10)
    assert model._n_updates > 0
    after = model.critic.features_extractor.parameters()
    assert any(not th.equal(a, p) for a, p in zip(before, after, strict=True))


def test_a_compiled_update_records_what_compiling_its_graphs_cost() -> None:
    """The CPU seconds of a process's first call of each graph (the critics' update, the
    actor's), where a compiled step compiles: the summary's "of it compiling"; an eager step
    records none. A run resumed at a delayed step compiles the critics' graph first, the
    actor's at the next step, and nothing more is counted after both."""
    eager = make(FastSAC)
    train(eager, 3)
    assert eager.compile_cpu_s is None
    compiled = make(FastSAC, compile_update=True, policy_delay=2)
    compiled.compile_backend = "aot_eager"
    compiled._n_updates = 1  # (resumed after an odd number of steps: the actor waits one)
    train(compiled, 1)
    one_graph = compiled.compile_cpu_s
    assert one_graph is not None and one_graph > 0
    assert compiled._timed == {"update_critics"}
    train(compiled, 1)  # the actor's graph at the first step that updates the actor
    two_graphs = compiled.compile_cpu_s
    assert two_graphs is not None and two_graphs > one_graph
    train(compiled, 4)  # nothing compiles any more: nothing more is counted
    assert compiled.compile_cpu_s == two_graphs
    assert "compile_cpu_s" in compiled._excluded_save_params()  # a resumed process times its own
