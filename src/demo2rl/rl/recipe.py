"""The RL recipe: the env every arm trains in, where each arm starts, and PPO's guided update.

Every arm (:mod:`demo2rl.arms`, the registry) trains one stable-baselines3 algorithm with its
algorithm's hyperparameters (``rl.ppo`` or ``rl.sac``), budget and the same env; the PPO arms
differ only in the policy they start from and in a guide term added to PPO's updates, the SAC
arms in what fills their batches (:mod:`demo2rl.rl.replay`) and where their actor starts. Read
top to bottom: 1. the env every arm trains in, 2. where each arm starts (one start function per
arm, named by its registry record, each given a :class:`Start`), 3. what changes in PPO's update
(:class:`GuidedPPO`: the critic warm-up and the guide term of :class:`Guide`), 4. the SAC arms
(:class:`DemoSAC`). What runs around it (resuming, evaluation and checkpoint schedule, SIGTERM,
logging) is in :mod:`demo2rl.rl.trainer`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper, VecNormalize
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from demo2rl import arms
from demo2rl.config import ConfigError, PolicyConfig, RLConfig, TaskConfig, gradient_steps
from demo2rl.demos import dataset
from demo2rl.learning import guidance, policy, vec
from demo2rl.observations import ObservationKind
from demo2rl.rl import replay, sac

# --------------------------------------------------------------------------------------------
# 1. the env: rl.n_envs copies (rl.sac.n_envs off-policy), actions in [-1, 1], vector
#    observations normalised (frozen)


def make_training_env(
    task: TaskConfig,
    rl_cfg: RLConfig,
    normalizer: policy.ObsTransform,
    action_space: gym.Space,
    n_workers: int,
) -> VecEnv:
    """The RL vector env: the run's envs (:attr:`demo2rl.config.RLConfig.envs`) of
    ``rl.vec_env`` kind (native, dummy or subproc with ``n_workers`` processes),
    ``task.frame_stack`` frames stacked, bounded Box actions rescaled to [-1, 1], and the
    frozen observation normalisation every arm shares (SB3's ``VecNormalize`` with
    ``training=False``, holding the dataset's training-split
    statistics, as the clone saw them), over a check that every action, observation and reward is
    finite (:class:`CheckFinite`). Images (a :class:`demo2rl.learning.policy.ImageObs` transform)
    are not normalised: PPO itself transposes them (``VecTransposeImage``) and the network
    scales them to [0, 1]. ``action_space`` is the task's (resolved once per job).
    """
    wrap = _rescale_wrapper if policy.needs_rescale(action_space) else None
    venv: VecEnv = vec.make_vec_env(
        task.env_id,
        task.env_kwargs,
        rl_cfg.envs,
        rl_cfg.vec_env,
        n_workers=n_workers,
        wrap=wrap,
        frame_stack=task.frame_stack,
        max_episode_steps=task.max_episode_steps,
        timeout_s=task.timeout_s,
    )
    venv = CheckFinite(venv)
    if isinstance(normalizer, policy.ImageObs):
        return venv
    normed = VecNormalize(
        venv,
        training=False,
        norm_obs=True,
        norm_reward=False,
        clip_obs=normalizer.clip_obs,
        epsilon=normalizer.epsilon,
    )
    normalizer.apply_to(normed)
    return normed


class NonFiniteValue(FloatingPointError):
    """A NaN or infinity in a run's rewards, observations, actions or losses."""


class CheckFinite(VecEnvWrapper):
    """Raises :class:`NonFiniteValue` naming the quantity and the envs when an action (before a
    step), an observation or a reward (after a step or a reset) is NaN or infinite: the checks
    of SB3's ``VecCheckNan``, one ``isfinite`` reduction per float array (a third of its cost
    per step; integer arrays such as uint8 frames cannot hold either)."""

    def reset(self) -> VecEnvObs:
        obs = self.venv.reset()
        _check_finite("at a reset", observations=obs)
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        _check_finite("from the policy, before an env step", actions=actions)
        self.venv.step_async(actions)

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        _check_finite("after an env step", observations=obs, rewards=rewards)
        return obs, rewards, dones, infos


def _check_finite(when: str, **values: np.ndarray) -> None:
    # one array each: the probe admits Box observations only (tasks.checks)
    arrays = {name: np.asarray(value) for name, value in values.items()}
    bad = {
        name: np.flatnonzero(~np.isfinite(a.reshape(len(a), -1)).all(1))
        for name, a in arrays.items()
        if a.dtype.kind in "fc" and not np.isfinite(a).all()
    }
    if bad:
        found = "; ".join(f"{name} of env(s) {envs.tolist()}" for name, envs in bad.items())
        raise NonFiniteValue(f"non-finite {found} {when}")


def _rescale_wrapper(env: gym.Env) -> gym.Env:
    return gym.wrappers.RescaleAction(env, np.float32(-1.0), np.float32(1.0))


# --------------------------------------------------------------------------------------------
# 2. where each arm starts


@dataclasses.dataclass(frozen=True)
class Start:
    """What an arm's start function builds its PPO model from.

    :param arm: the arm's registry record.
    :param env: the training env (:func:`make_training_env`).
    :param policy_cfg: the network config shared with BC.
    :param rl_cfg: the ``rl`` section of the run (its arm's own section only).
    :param clone: the behaviour clone (in normalised observations), for an arm that needs it.
    :param demos: returns the demonstrations' normalised states and guide targets when called.
    :param transitions: returns the demonstrations' training split as n-step transitions (for
        ``n_steps`` and ``gamma``), actions in the policy's [-1, 1], when called.
    :param seed: the run's training seed.
    :param device: where the model trains.
    """

    arm: arms.Arm
    env: VecEnv
    policy_cfg: PolicyConfig
    rl_cfg: RLConfig
    clone: ActorCriticPolicy | None
    demos: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    transitions: Callable[[int, float], replay.DemoTransitions]
    seed: int
    device: torch.device | str

    @property
    def settings(self) -> Any:
        """The arm's own ``rl`` section (None for an arm without one)."""
        return getattr(self.rl_cfg, self.arm.section) if self.arm.section else None

    def sac(self, demo_fraction: float) -> DemoSAC:
        """A fresh SAC model on the run's env, seed and ``rl.sac`` hyperparameters, its actor the
        network config's ``pi`` layers (as the clone's), its replay a
        :class:`demo2rl.rl.replay.DemoReplayBuffer` mixing ``demo_fraction`` demonstrations into
        every batch (0: none)."""
        cfg = self.rl_cfg.sac
        assert cfg is not None
        if cfg.compile and not any(map(shutil.which, ("c++", "g++", "clang++"))):
            raise ConfigError(
                "rl.sac.compile",
                "torch.compile needs a C++ compiler, and none is on PATH: install one (e.g. "
                "apt install g++) or set rl.sac.compile: false",
            )
        return DemoSAC(
            "MlpPolicy",
            self.env,
            learning_rate=learning_rate(cfg.learning_rate),
            buffer_size=cfg.buffer_size,
            learning_starts=cfg.learning_starts,
            batch_size=cfg.batch_size,
            tau=cfg.tau,
            gamma=cfg.gamma,
            train_freq=1,
            gradient_steps=gradient_steps(cfg.updates_per_step, self.env.num_envs),
            ent_coef=cfg.ent_coef,
            target_entropy=cfg.target_entropy,
            replay_buffer_class=replay.DemoReplayBuffer,
            replay_buffer_kwargs={
                "demo_fraction": demo_fraction,
                "n_steps": cfg.n_steps,
                "gamma": cfg.gamma,
                "augment": (
                    cfg.augment if ObservationKind.of(self.env.observation_space).sb3_image else 0
                ),
            },
            policy_kwargs=policy.sac_policy_kwargs(
                sac_spec(self.policy_cfg, cfg), self.env.observation_space
            ),
            seed=self.seed,
            device=self.device,
            verbose=0,
            compile_update=cfg.compile,
            policy_delay=cfg.policy_delay,
        )

    def ppo(
        self, policy_class: str | type[ActorCriticPolicy] = "MlpPolicy", **policy_kwargs: Any
    ) -> GuidedPPO:
        """A fresh PPO model on the run's env, seed and hyperparameters; ``policy_kwargs`` add to
        (or replace) the network config's."""
        return GuidedPPO(
            policy_class,
            self.env,
            policy_kwargs=policy.sb3_policy_kwargs(self.policy_cfg, self.env.observation_space)
            | policy_kwargs,
            seed=self.seed,
            device=self.device,
            verbose=0,
            **self.rl_cfg.ppo.to_dict(),
        )


def build_model(start: Start) -> GuidedPPO | DemoSAC:
    """The model of ``start.arm``, ready to learn: its registered start function's."""
    arm = start.arm
    if arm.uses_clone(start.rl_cfg.to_dict()) and start.clone is None:
        raise ValueError(f"the {arm.name} arm needs a BC checkpoint")
    build = arm.start if callable(arm.start) else globals().get(arm.start)
    if not callable(build):
        raise ValueError(f"the {arm.name} arm's start {arm.start!r} is no function of {__name__}")
    return build(start)


def scratch(start: Start) -> GuidedPPO:
    """A freshly initialised ``MlpPolicy`` (exploration from ``policy.log_std_init``)."""
    return start.ppo()


def warm_start(start: Start) -> GuidedPPO:
    """The clone's weights, loaded strictly; its log-std set to ``warm_start.log_std`` (a
    Gaussian clone's own is tiny; null keeps it); for ``warm_start.critic_warmup_steps`` env
    steps only the critic learns, on the clone's own rollouts; optionally a demonstration guide
    (weight ``warm_start.bc_coef`` decaying to 0 over ``bc_decay`` of the budget)."""
    warm, clone = start.settings, start.clone
    assert warm is not None and clone is not None
    model = start.ppo()
    model.policy.load_state_dict(clone.state_dict(), strict=True)
    if warm.log_std is not None and hasattr(model.policy, "log_std"):  # Gaussian only
        with torch.no_grad():
            model.policy.log_std.fill_(warm.log_std)
    model.critic_warmup = warm.critic_warmup_steps
    if warm.bc_coef > 0:
        states, targets = start.demos()
        total = start.rl_cfg.budget
        model.guide = Guide(warm.bc_coef, warm.bc_decay, total, states, targets)
    return model


def residual(start: Start) -> GuidedPPO:
    """A fresh :class:`demo2rl.learning.policy.ResidualPolicy`: the frozen clone's action mean
    (Box) or logits (Discrete) plus a correction that starts near 0 (Box: SB3's 0.01-gain action
    layer)
    or at 0 (Discrete), so the arm starts at the clone's return; a Gaussian explores from
    ``residual.log_std``."""
    cfg, clone = start.settings, start.clone
    assert cfg is not None and clone is not None
    extra: dict[str, Any] = {"base_spec": policy.actor_spec(clone)}
    if cfg.log_std is not None:
        extra["log_std_init"] = cfg.log_std
    model = start.ppo(policy.ResidualPolicy, **extra)
    model.policy.set_base(clone)
    return model


def kickstart(start: Start) -> GuidedPPO:
    """A fresh ``MlpPolicy`` with a teacher guide: the clone's actions on the policy's own rollout
    states, weight ``kickstart.coef`` decaying to 0 over ``kickstart.decay`` of the budget."""
    kick, clone = start.settings, start.clone
    assert kick is not None and clone is not None
    model = start.ppo()
    teacher = clone.to(model.device).requires_grad_(False)
    model.guide = Guide(kick.coef, kick.decay, start.rl_cfg.budget, teacher=teacher)
    return model


def sac_control(start: Start) -> DemoSAC:
    """SAC from a fresh actor and critics, its batches its own replay only: the off-policy
    control (the same critics, n-step returns and budget as the rlpd arm)."""
    return start.sac(demo_fraction=0.0)


def demo_sac(start: Start) -> DemoSAC:
    """SAC whose every batch is ``rlpd.demo_fraction`` demonstrations (the training split, as
    n-step transitions: :class:`demo2rl.rl.replay.DemoReplayBuffer`); optionally the actor
    starts from the clone (``rlpd.actor_from_clone``) and the warm-up acts with the clone
    (``rlpd.clone_warmup``), both exploring with log-std ``rlpd.log_std``."""
    cfg, clone, sac_cfg = start.settings, start.clone, start.rl_cfg.sac
    assert cfg is not None and sac_cfg is not None
    model = start.sac(demo_fraction=cfg.demo_fraction)
    demos = start.transitions(sac_cfg.n_steps, sac_cfg.gamma)
    model.replay_buffer.set_demos(channels_as(demos, model.observation_space))
    if cfg.actor_from_clone:
        assert clone is not None
        policy.load_sac_actor(model.policy, clone, cfg.log_std)
    if cfg.clone_warmup:
        assert clone is not None
        model.warmup_policy = noisy_copy(clone, cfg.log_std, model.device)
    return model


def demo_tensors(
    demos: dataset.Demos,
    normalizer: policy.ObsTransform,
    action_space: gym.Space,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The training split's normalised states and the guide targets of its actions (scaled as
    the policy acts; one-hot for Discrete actions)."""
    rows = demos.step_rows(demos.split["train"])
    obs = normalizer(demos.steps["observations"][rows])
    actions = torch.as_tensor(policy.scale_actions(demos.steps["actions"][rows], action_space))
    targets = guidance.demo_targets(actions, policy.policy_action_space(action_space))
    return torch.as_tensor(obs, device=device), targets.to(device)


def demo_transitions(
    demos: dataset.Demos, action_space: gym.Space, n_steps: int, gamma: float
) -> replay.DemoTransitions:
    """The training split's episodes as n-step transitions (:func:`demo2rl.rl.replay.
    demo_transitions`), observations raw (the replay normalises them as it does its own),
    actions in the policy's [-1, 1] (clipped there, as the env clips them) and the true
    rewards."""
    assert demos.split is not None  # (a merged dataset: the trainer reads no shard)
    episodes = demos.split["train"]
    rows = demos.step_rows(episodes)
    actions = policy.scale_actions(demos.steps["actions"][rows], action_space)
    return replay.demo_transitions(
        demos.steps["observations"][rows],
        demos.episodes["final_observation"][episodes],
        np.clip(actions, -1.0, 1.0).reshape(len(rows), -1),
        demos.steps["rewards"][rows],
        demos.steps["terminated"][rows],
        demos.episodes["length"][episodes],
        n_steps=n_steps,
        gamma=gamma,
    )


# --------------------------------------------------------------------------------------------
# 3. what changes in PPO's update: the critic warm-up, and a fading guide term


@dataclasses.dataclass
class Guide:
    """An auxiliary loss added to PPO's gradient at every optimiser step, with decaying weight:
    ``weight(t) * guidance.guide_loss`` (for Box actions the squared distance between the policy's
    mean action and a target action; for Discrete ones the cross-entropy to target action
    probabilities) on a minibatch of states (sampled anew for every step), ``t`` the env steps
    before the rollout the update learns from (so the first update has weight ``coef``).

    Two sources of (state, target) pairs: fixed ``states``/``targets`` (the demonstrations), or a
    ``teacher`` whose :func:`demo2rl.learning.guidance.action_targets` on the states of the latest
    rollout are the targets (the policy's own states: kickstarting). The loss involves the mean (or
    the
    logits), never ``log_std``, so it cannot shrink a Gaussian's exploration. The weight falls
    linearly from ``coef`` to 0 at ``decay`` of ``total`` env steps. Its gradient is added after
    PPO clips its own gradient norm.
    """

    coef: float
    decay: float
    total: int
    states: torch.Tensor | None = None
    targets: torch.Tensor | None = None
    teacher: torch.nn.Module | None = None

    def weight(self, timesteps: int) -> float:
        return self.coef * max(0.0, 1.0 - timesteps / (self.decay * self.total))

    def pairs(self, model: PPO) -> tuple[torch.Tensor, torch.Tensor]:
        """The (states, targets) of the coming update."""
        if self.teacher is None:
            assert self.states is not None and self.targets is not None
            return self.states, self.targets
        obs = model.rollout_buffer.observations
        states = torch.as_tensor(obs.reshape(-1, *obs.shape[2:]), device=model.device)
        with torch.no_grad():
            return states, guidance.action_targets(self.teacher, states)


class GuidedPPO(PPO):
    """SB3's PPO with two additions, both off by default (then it is exactly SB3's PPO):

    * ``critic_warmup``: an update whose rollout started before this many env steps trains the
      critic alone (the actor's parameters get no gradient, so Adam leaves them be);
    * ``guide``: after it, the gradient of a :class:`Guide` joins every optimiser step while its
      weight is positive.
    """

    guide: Guide | None = None
    critic_warmup: int = 0

    def _maybe_recommend_cpu(self, mlp_class_name: str = "ActorCriticPolicy") -> None:
        """SB3's advice to train an MLP policy on the CPU, for an MLP policy alone: SB3 tells
        the two apart by the policy's class, and ours is one class for both (its features
        extractor is a CNN for images), so SB3 alone would warn of a CNN on the GPU too."""
        if not ObservationKind.of(self.observation_space).sb3_image:
            super()._maybe_recommend_cpu(mlp_class_name)

    def train(self) -> None:
        """PPO's update (with the additions), failing with :class:`NonFiniteValue` if it left a
        weight NaN or infinite (before the next rollout acts on it). Checked once per update,
        not per optimiser step (which cost about 4% of a run): a non-finite weight spreads to
        every later step, and the first step that builds an action distribution from it stops
        with torch's ValueError, which the check then explains."""
        named = list(self.policy.named_parameters())
        try:
            self._train()
        except ValueError:  # torch.distributions' check of its parameters
            check_weights(named)
            raise
        check_weights(named)

    def _train(self) -> None:
        rollout_start = self.num_timesteps - self.n_steps * self.n_envs  # the update's data
        if rollout_start < self.critic_warmup:
            with frozen(policy.actor_parameters(self.policy)):
                super().train()
            return
        weight = self.guide.weight(rollout_start) if self.guide is not None else 0.0
        if weight <= 0:
            super().train()
            return
        assert self.guide is not None
        states, targets = self.guide.pairs(self)
        losses: list[float] = []

        def add_guide_gradient(*_: object) -> None:
            rows = torch.randint(len(states), (self.batch_size,), device=states.device)
            loss = guidance.guide_loss(self.policy, states[rows], targets[rows])
            (weight * loss).backward()
            losses.append(float(loss.detach()))

        hook = self.policy.optimizer.register_step_pre_hook(add_guide_gradient)
        try:
            super().train()
        finally:
            hook.remove()
        self.logger.record("train/guide_weight", weight)
        if losses:
            self.logger.record("train/guide_loss", float(np.mean(losses)))


def check_weights(named: list[tuple[str, torch.nn.Parameter]]) -> None:
    """Raise :class:`NonFiniteValue` naming the first weight tensor with a NaN or infinity: one
    fused norm over all of them (a NaN or an infinity makes its norm non-finite), then, only if
    one is, the exact tensor-by-tensor check that names it."""
    norms = torch._foreach_norm([param for _, param in named])
    if bool(torch.isfinite(torch.stack(norms)).all()):
        return
    for name, param in named:
        if not torch.isfinite(param).all():
            raise NonFiniteValue(
                f"non-finite weights in {name} after the update (a NaN or infinite loss or "
                "gradient)"
            )


@contextlib.contextmanager
def frozen(params: list[torch.nn.Parameter]) -> Iterator[None]:
    """The given parameters get no gradient inside the block."""
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


# --------------------------------------------------------------------------------------------
# 4. the SAC arms


def sac_spec(policy_cfg: PolicyConfig, sac_cfg: Any) -> dict[str, Any]:
    """The SAC network of a run, as plain values (also what its policy checkpoint records):
    the actor's hidden layers and activation are the ``policy`` config's (``pi``, as the
    clone's, so it can start from the clone), the critics' ``rl.sac``'s."""
    return {
        "pi": list(policy_cfg.net_arch["pi"]),
        "qf": list(sac_cfg.critic_net_arch),
        "activation": policy_cfg.activation,
        "n_critics": sac_cfg.n_critics,
        "critic_layer_norm": sac_cfg.critic_layer_norm,
        "cnn": policy_cfg.cnn,
    }


def learning_rate(value: float | str) -> float | LinearSchedule:
    """``rl.sac.learning_rate`` as SB3 takes it: a number, or for ``lin_<start>``
    (rl-baselines3-zoo's linear schedule) SB3's schedule from ``start`` down to 0 at the end of
    the run's budget (SB3 counts the progress from the step count and the budget, so a resumed
    run continues the same schedule)."""
    if isinstance(value, str):
        return LinearSchedule(float(value.removeprefix("lin_")), 0.0, 1.0)
    return value


def channels_as(demos: replay.DemoTransitions, space: gym.Space) -> replay.DemoTransitions:
    """``demos`` with its frames channels-first where ``space`` (the model's, after SB3's
    ``VecTransposeImage``) is and the dataset's channels-last frames are not."""
    frames = demos.frames
    if frames.ndim == 4 and frames.shape[1:] != space.shape:
        transposed = (frames.shape[3], frames.shape[1], frames.shape[2])
        if transposed == space.shape:
            return dataclasses.replace(
                demos, frames=np.ascontiguousarray(frames.transpose(0, 3, 1, 2))
            )
    return demos


def noisy_copy(
    clone: ActorCriticPolicy, log_std: float, device: torch.device | str
) -> ActorCriticPolicy:
    """A frozen copy of a Gaussian clone exploring with log-std ``log_std`` (the warm-up's)."""
    actor = copy.deepcopy(clone).to(device)
    if hasattr(actor, "log_std"):
        with torch.no_grad():
            actor.log_std.fill_(log_std)
    return actor.requires_grad_(False)


class DemoSAC(sac.FastSAC):
    """Our fast SAC (:class:`demo2rl.rl.sac.FastSAC`, SB3's mathematics) whose warm-up can act
    with a given policy (the clone) instead of uniformly at random: ``warmup_policy``, None for
    SB3's uniform warm-up."""

    warmup_policy: ActorCriticPolicy | None = None
    replay_buffer: replay.DemoReplayBuffer

    def _sample_action(
        self, learning_starts: int, action_noise: Any = None, n_envs: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.warmup_policy is None or self.num_timesteps >= learning_starts:
            return super()._sample_action(learning_starts, action_noise, n_envs)
        assert self._last_obs is not None
        actions, _ = self.warmup_policy.predict(self._last_obs, deterministic=False)
        return actions, self.policy.scale_action(actions)
