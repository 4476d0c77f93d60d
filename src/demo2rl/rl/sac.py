"""Soft actor-critic with stable-baselines3's mathematics and a fast gradient step.

Why: on these 2-core machines the update loop, not the env, bounds an off-policy run, and SB3's
``SAC.train`` spends most of a gradient step on overhead: one module per critic, a backward pass
of the actor's loss into the critics' weights that nobody reads, ``torch.distributions``
objects, ``.item()`` calls and per-parameter loops, all in Python, op by op. This module keeps
SB3's algorithm, policy interface, buffers, logging and checkpoints, and makes the step cheap:

* the critics as one batched module (:class:`demo2rl.learning.sac_policy.EnsembleCritic`, in
  SB3's ``SACPolicy``: :class:`~demo2rl.learning.sac_policy.FastSACPolicy`, the network beside
  the one BC and PPO share);
* :class:`FastSAC`: SB3's ``SAC`` whose ``train`` runs SB3 2.9's update as two functions of
  tensors (:class:`SACStep`: the critics' update, the actor's), each compiled by
  ``torch.compile`` into one graph: all critics in one batched forward and backward pass, the
  actor's backward pass through the critics' inputs only, the entropy coefficient's gradient in
  closed form, Adam and Polyak averaging in the graphs, and nothing read back to Python until
  the losses are logged, once per ``train`` call.

Not here: other algorithms (no random critic subsets, no CrossQ) and replay
buffers (any buffer whose ``sample`` returns SB3's ``ReplayBufferSamples`` works, n-step
discounts included). Speed: ``benchmarks/offpolicy.py``.
"""

from __future__ import annotations

import logging
import math
import types
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import torch as th
from stable_baselines3 import SAC
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.preprocessing import preprocess_obs
from stable_baselines3.sac.policies import LOG_STD_MAX, LOG_STD_MIN, Actor
from torch import nn
from torch.func import functional_call, grad_and_value

from demo2rl.learning.sac_policy import EnsembleCritic, FastSACCnnPolicy, FastSACPolicy
from demo2rl.rl.progress import training_cpu_seconds

log = logging.getLogger(__package__)

SQUASH_EPSILON = 1e-6
"""SB3's ``SquashedDiagGaussianDistribution`` epsilon in log(1 - tanh(u)^2 + epsilon)."""
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)

# --------------------------------------------------------------------------------------------
# 3. the update: one gradient step as one function of tensors


class _Critics(nn.Module):
    """``critic.q_values`` of preprocessed observations as a forward, for ``functional_call``."""

    def __init__(self, critic: EnsembleCritic) -> None:
        super().__init__()
        self.critic = critic

    def forward(self, obs: th.Tensor, actions: th.Tensor) -> th.Tensor:
        return self.critic.q_values(obs, actions, preprocessed=True)


class _ActorDistribution(nn.Module):
    """SB3's ``Actor.get_action_dist_params`` (without gSDE) of preprocessed observations: the
    Gaussian's mean and clamped log-std."""

    def __init__(self, actor: Actor) -> None:
        super().__init__()
        self.actor = actor

    def forward(self, obs: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        latent = self.actor.latent_pi(self.actor.features_extractor(obs))
        log_std = th.clamp(self.actor.log_std(latent), LOG_STD_MIN, LOG_STD_MAX)
        return self.actor.mu(latent), log_std


class SACStep:
    """SB3 2.9's SAC gradient step as two functions of tensors, run one after the other: what
    :class:`FastSAC` runs, compiled or not. :meth:`update_critics` (with the targets' Polyak
    step) runs at every gradient step, :meth:`update_actor` (with the entropy coefficient's)
    at every step or, with an actor delay, at every few.

    Inputs: the model's parameters (detached aliases: the updates change them in place), the
    Adam optimizers' state tensors and learning rates, a batch (observations preprocessed), the
    actor's Gaussian draws, this step's Polyak coefficient (``tau``, or 0 between target
    updates) and the entropy coefficient if it is fixed; output: the values to log. The actor's
    loss differentiates the actor only: the critics are constants there, its backward pass goes
    through their inputs and never into their weights.

    Compiled (``torch.compile``), each update is one graph: the gradients come from ``torch.func``
    and the optimizer steps are ``torch.optim.Adam``'s arithmetic written out, on the
    optimizers' own state tensors (``step``, ``exp_avg``, ``exp_avg_sq``, created as torch
    creates them). Run eagerly, it uses autograd and each optimizer's own ``step``.

    :param model: the :class:`FastSAC` model whose networks and optimizers it updates.
    """

    def __init__(self, model: FastSAC) -> None:
        self.actor = _ActorDistribution(model.actor)
        self.critic = _Critics(model.critic)
        self.target = _Critics(model.critic_target)
        self.n_critics = model.critic.n_critics
        assert isinstance(model.target_entropy, float)
        self.target_entropy = model.target_entropy
        self.optimizers = [model.actor.optimizer, model.critic.optimizer]
        if model.ent_coef_optimizer is not None:
            self.optimizers.append(model.ent_coef_optimizer)

        self.parameters: list[nn.Parameter] = []
        position: dict[int, int] = {}

        def index(param: nn.Parameter) -> int:
            if id(param) not in position:
                position[id(param)] = len(self.parameters)
                self.parameters.append(param)
            return position[id(param)]

        self.names = {
            which: [(name, index(p)) for name, p in module.named_parameters(remove_duplicate=False)]
            for which, module in (("actor", self.actor), ("critic", self.critic))
        }
        self.names["target"] = [
            (name, index(p)) for name, p in self.target.named_parameters(remove_duplicate=False)
        ]
        self.ent_coef_index = index(model.log_ent_coef) if model.log_ent_coef is not None else None
        self.adam = [[index(p) for p in opt.param_groups[0]["params"]] for opt in self.optimizers]
        # Adam's constants, read here: the compiled step must not read the param groups, whose
        # learning rate a schedule changes (a guard on the group would recompile every call);
        # None for another optimizer (it steps eagerly, by its own step: check_adam)
        self.adam_constants = [
            (*g["betas"], g["eps"], g["weight_decay"]) if "betas" in g else None
            for g in (opt.param_groups[0] for opt in self.optimizers)
        ]
        trainable = set(self.adam[1])
        self.critic_trainable = [(n, i) for n, i in self.names["critic"] if i in trainable]
        self.critic_frozen = [(n, i) for n, i in self.names["critic"] if i not in trainable]
        # SB3's polyak_update zips the critics' parameters with the target critics'
        self.polyak = (
            [index(p) for p in model.critic_target.parameters()],
            [index(p) for p in model.critic.parameters()],
        )
        if len(self.polyak[0]) != len(self.polyak[1]):
            raise ValueError("the critics and the target critics have different parameters")
        names = {i: n for n, i in self.names["actor"]} | {i: n for n, i in self.critic_trainable}
        self.order = [[names[i] for i in self.adam[0]], [names[i] for i in self.adam[1]]]
        self._scalars: dict[tuple[float, th.dtype, int], th.Tensor] = {}

    def tensors(self) -> list[th.Tensor]:
        """Aliases of the model's parameters, without gradients (the step updates them)."""
        return [p.detach() for p in self.parameters]

    def states(self) -> list[tuple[list[th.Tensor], list[th.Tensor], list[th.Tensor]]]:
        """Per optimizer, its (steps, exp_avgs, exp_avg_sqs), created where missing."""
        states = []
        for opt in self.optimizers:
            params = opt.param_groups[0]["params"]
            for p in params:
                if not opt.state[p]:
                    opt.state[p].update(
                        step=th.zeros((), dtype=th.float32, device=p.device),
                        exp_avg=th.zeros_like(p, memory_format=th.preserve_format),
                        exp_avg_sq=th.zeros_like(p, memory_format=th.preserve_format),
                    )
            states.append(
                tuple(
                    [opt.state[p][key] for p in params] for key in ("step", "exp_avg", "exp_avg_sq")
                )
            )
        return states  # type: ignore[return-value]

    def scalar(self, value: float, dtype: th.dtype = th.float32, ndim: int = 0) -> th.Tensor:
        """``value`` as a tensor of ``ndim`` dimensions (0 or 1), the same tensor while the
        value is the same (a graph input: a new value is no new graph)."""
        key = (value, dtype, ndim)
        if key not in self._scalars:
            if len(self._scalars) > 64:
                self._scalars.clear()
            data = [value] if ndim else value
            self._scalars[key] = th.tensor(data, dtype=dtype, device=self.parameters[0].device)
        return self._scalars[key]

    def learning_rates(self) -> list[th.Tensor]:
        """The optimizers' current learning rates, float64 (as torch's Adam computes with) and
        of shape (1,) (a 0-dim one would have ``torch.compile`` check it for NaN each call)."""
        return [self.scalar(opt.param_groups[0]["lr"], th.float64, 1) for opt in self.optimizers]

    def update_critics(
        self,
        tensors: list[th.Tensor],
        states: list[tuple[list[th.Tensor], list[th.Tensor], list[th.Tensor]]] | None,
        lrs: list[th.Tensor] | None,
        batch: tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor, th.Tensor, th.Tensor],
        next_noise: th.Tensor,
        tau: th.Tensor,
        ent_coef: th.Tensor | None,
    ) -> th.Tensor:
        """The critics' gradient step, then the target critics' Polyak step (``tau``; 0 between
        target updates); returns (ent_coef, critic_loss)."""
        obs, actions, next_obs, dones, rewards, discounts = batch
        ent_coef = self._ent_coef(tensors, ent_coef)

        # the target: rewards + (1 - dones) * discount * (min_i Q'_i(s', a') - ent_coef * log pi)
        actor = self._params("actor", tensors)
        next_actions, next_log_prob = self._sample(actor, next_obs, next_noise)
        target_critics = self._params("target", tensors)
        next_q = functional_call(
            self.target, target_critics, (next_obs, next_actions), tie_weights=False
        ).amin(0)
        target_q = rewards + (1 - dones) * discounts * (next_q - ent_coef * next_log_prob)

        # the critics: 0.5 * sum_i MSE(Q_i(s, a), target)
        trainable = {n: tensors[i] for n, i in self.critic_trainable}
        frozen = {n: tensors[i] for n, i in self.critic_frozen}
        critic_loss, _ = self._minimise(
            1, self._critic_loss, trainable, (frozen, obs, actions, target_q), tensors, states, lrs
        )

        targets, sources = self.polyak
        th._foreach_lerp_([tensors[i] for i in targets], [tensors[i] for i in sources], tau)
        return th.stack([ent_coef.reshape(()), critic_loss])

    def update_actor(
        self,
        tensors: list[th.Tensor],
        states: list[tuple[list[th.Tensor], list[th.Tensor], list[th.Tensor]]] | None,
        lrs: list[th.Tensor] | None,
        obs: th.Tensor,
        noise: th.Tensor,
        ent_coef: th.Tensor | None,
    ) -> th.Tensor:
        """The actor's gradient step against the critics as they are (after this step's update),
        then the entropy coefficient's; returns (actor_loss[, ent_coef_loss])."""
        ent_coef = self._ent_coef(tensors, ent_coef)
        # the actor: mean(ent_coef * log pi(a|s) - min_i Q_i(s, a))
        actor, critics = self._params("actor", tensors), self._params("critic", tensors)
        actor_loss, log_prob = self._minimise(
            0, self._actor_loss, actor, (critics, obs, noise, ent_coef), tensors, states, lrs
        )
        logged = [actor_loss]
        if self.ent_coef_index is not None:
            # SB3's loss -(log_ent_coef * (log_prob + target_entropy).detach()).mean() and its
            # gradient -mean(log_prob + target_entropy), in closed form
            surprise = (log_prob + self.target_entropy).mean()
            logged.append(-(tensors[self.ent_coef_index] * surprise).reshape(()))
            self._apply(2, [-surprise.reshape(1)], tensors, states, lrs)
        return th.stack(logged)

    def _ent_coef(self, tensors: list[th.Tensor], ent_coef: th.Tensor | None) -> th.Tensor:
        """The entropy coefficient of this step: exp(log_ent_coef) before the step's update of
        it (as SB3's), or the fixed one given."""
        if self.ent_coef_index is not None:
            return tensors[self.ent_coef_index].exp()
        assert ent_coef is not None
        return ent_coef

    def _minimise(
        self,
        which: int,
        loss: Callable[..., tuple[th.Tensor, th.Tensor]],
        params: dict[str, th.Tensor],
        args: tuple[Any, ...],
        tensors: list[th.Tensor],
        states: list[tuple[list[th.Tensor], list[th.Tensor], list[th.Tensor]]] | None,
        lrs: list[th.Tensor] | None,
    ) -> tuple[th.Tensor, th.Tensor]:
        """Optimizer ``which``'s step on ``loss(params, *args)``, which returns the loss and an
        auxiliary output (without gradients); returns both. Compiling: ``torch.func``'s gradient
        (only ``params`` are differentiated); eagerly: autograd's."""
        order = self.order[which]
        if th.compiler.is_compiling():
            grads, (value, aux) = grad_and_value(loss, has_aux=True)(params, *args)
            self._apply(which, [grads[n] for n in order], tensors, states, lrs)
            return value, aux
        leaves = {n: t.detach().requires_grad_() for n, t in params.items()}
        value, aux = loss(leaves, *args)
        self._apply(
            which, th.autograd.grad(value, [leaves[n] for n in order]), tensors, states, lrs
        )
        return value.detach(), aux

    def _apply(
        self,
        which: int,
        grads: list[th.Tensor] | tuple[th.Tensor, ...],
        tensors: list[th.Tensor],
        states: list[tuple[list[th.Tensor], list[th.Tensor], list[th.Tensor]]] | None,
        lrs: list[th.Tensor] | None,
    ) -> None:
        """Optimizer ``which``'s step with ``grads`` (in its parameters' order). Compiling:
        Adam's arithmetic in the graph (:meth:`_adam_`); eagerly: the optimizer's ``step``."""
        if th.compiler.is_compiling():
            assert states is not None and lrs is not None
            self._adam_(which, list(grads), tensors, states, lrs)
            return
        optimizer = self.optimizers[which]
        for param, grad in zip(optimizer.param_groups[0]["params"], grads, strict=True):
            param.grad = grad
        optimizer.step()

    def _params(self, which: str, tensors: list[th.Tensor]) -> dict[str, th.Tensor]:
        return {name: tensors[i] for name, i in self.names[which]}

    def _sample(
        self, actor: dict[str, th.Tensor], obs: th.Tensor, noise: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor]:
        """SB3's ``Actor.action_log_prob`` written out, with ``noise`` as its Gaussian draw:
        tanh(mean + noise * std) and log N(u; mean, std) - log(1 - tanh(u)^2 + eps) (B, 1)."""
        mean, log_std = functional_call(self.actor, actor, (obs,), tie_weights=False)
        actions = th.tanh(th.addcmul(mean, noise, log_std.exp()))
        per_dim = 0.5 * noise.square() + log_std + th.log(1 - actions.square() + SQUASH_EPSILON)
        return actions, -per_dim.sum(dim=1, keepdim=True) - HALF_LOG_2PI * mean.shape[1]

    def _critic_loss(
        self,
        trainable: dict[str, th.Tensor],
        frozen: dict[str, th.Tensor],
        obs: th.Tensor,
        actions: th.Tensor,
        target_q: th.Tensor,
    ) -> tuple[th.Tensor, th.Tensor]:
        q = functional_call(self.critic, (trainable, frozen), (obs, actions), tie_weights=False)
        loss = (q - target_q).square().mean() * (0.5 * self.n_critics)
        return loss, loss.detach()

    def _actor_loss(
        self,
        actor: dict[str, th.Tensor],
        critics: dict[str, th.Tensor],
        obs: th.Tensor,
        noise: th.Tensor,
        ent_coef: th.Tensor,
    ) -> tuple[th.Tensor, th.Tensor]:
        actions, log_prob = self._sample(actor, obs, noise)
        q = functional_call(self.critic, critics, (obs, actions), tie_weights=False)
        return (ent_coef * log_prob - q.min(0).values).mean(), log_prob.detach()

    def _adam_(
        self,
        which: int,
        grads: list[th.Tensor],
        tensors: list[th.Tensor],
        states: list[tuple[list[th.Tensor], list[th.Tensor], list[th.Tensor]]],
        lrs: list[th.Tensor],
    ) -> None:
        """``torch.optim.Adam``'s step for optimizer ``which``: its ``_single_tensor_adam``
        arithmetic, as list operations (bias corrections in float64, per parameter)."""
        constants = self.adam_constants[which]
        assert constants is not None  # (compiled: check_adam passed)
        beta1, beta2, eps, weight_decay = constants
        params = [tensors[i] for i in self.adam[which]]
        steps, exp_avgs, exp_avg_sqs = states[which]
        th._foreach_add_(steps, 1)
        if weight_decay != 0:
            grads = th._foreach_add(grads, params, alpha=weight_decay)
        th._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        th._foreach_mul_(exp_avg_sqs, beta2)
        th._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
        counts = th.stack(steps).double()
        step_sizes = lrs[which] / (1 - beta1**counts)
        bias_corrections2_sqrt = (1 - beta2**counts).sqrt()
        denominators = th._foreach_sqrt(exp_avg_sqs)
        th._foreach_div_(denominators, list(bias_corrections2_sqrt.unbind(0)))
        th._foreach_add_(denominators, eps)
        updates = th._foreach_div(exp_avgs, denominators)
        th._foreach_mul_(updates, list(step_sizes.unbind(0)))
        th._foreach_sub_(params, updates)


def _own_code(step: SACStep, name: str) -> Callable[..., th.Tensor]:
    """``step``'s method ``name`` as a method whose function has a code object of its own, for
    ``torch.compile``: its compiled graphs are cached per code object, each entry guarding on
    the step's constants (critics, entropy target, shapes), and after ``recompile_limit`` (8)
    entries a ``fullgraph`` compile fails. Compiling a method would share one code object
    between every model a process builds (tests, notebooks, a benchmark's worker): its ninth
    model would fail. One code object per step keeps each model's graphs to its own."""
    function = getattr(SACStep, name)
    own = types.FunctionType(
        function.__code__.replace(),
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    return types.MethodType(own, step)


def check_adam(optimizer: th.optim.Optimizer) -> None:
    """Raises TypeError unless ``optimizer`` is a plain ``torch.optim.Adam`` (one parameter
    group; no amsgrad, maximize, decoupled weight decay, capturable or differentiable mode):
    what :class:`SACStep` reproduces."""
    group = optimizer.param_groups[0] if len(optimizer.param_groups) == 1 else {}
    unsupported = ("amsgrad", "maximize", "decoupled_weight_decay", "capturable", "differentiable")
    if type(optimizer) is not th.optim.Adam or not group or any(group.get(k) for k in unsupported):
        raise TypeError(
            f"FastSAC's step is torch.optim.Adam's with one parameter group and none of "
            f"{', '.join(unsupported)}; got {optimizer!r}"
        )


COMPILE_ERRORS: tuple[type[Exception], ...] = (
    th._dynamo.exc.TorchDynamoException,  # BackendCompilerFailed wraps a backend's failure
    th._inductor.exc.InductorError,
)
"""What ``torch.compile`` raises when it cannot compile the step (no working C++ toolchain, a
backend's bug, an op it cannot trace): the step then runs eagerly (:meth:`FastSAC.train`)."""


GRAPHS = ("update_critics", "update_actor")
""":class:`SACStep`'s two updates, compiled to a graph each (:meth:`FastSAC.step_function`)."""
Runs = dict[str, Callable[..., th.Tensor]]
"""What runs each of :data:`GRAPHS`, by name: the compiled graph, or the eager method."""


class CompileFallback(RuntimeWarning):
    """The SAC update could not be compiled and runs eagerly (``rl.sac.compile``)."""


class FastSAC(SAC):
    """SB3's SAC whose ``train`` runs SB3 2.9's update as one compiled step (:class:`SACStep`).

    Everything but ``train`` is SB3's ``SAC``: the constructor's arguments, ``learn``, the
    replay buffers (``n_steps`` for n-step returns, or any ``replay_buffer_class`` whose
    ``sample`` returns ``ReplayBufferSamples``), ``save``/``load``; the optimizers' state is
    theirs, so SB3's own ``SAC.train`` could carry on from it. The policy must have an
    :class:`EnsembleCritic`: ``"MlpPolicy"`` and ``"CnnPolicy"`` name :class:`FastSACPolicy`
    and :class:`FastSACCnnPolicy`. Not supported: gSDE (``use_sde``) and batch normalisation in
    the networks; compiled, optimizers other than ``torch.optim.Adam`` (:func:`check_adam`).

    Per gradient step, in SB3's order and with SB3's random draws: a batch from the replay
    buffer; two standard normal draws, for the actor's actions on the observations and on the
    next observations; the target ``rewards + (1 - dones) * discount * (min_i Q'_i(s', a') -
    ent_coef * log_prob(a'|s'))`` (``discount`` is the batch's ``discounts`` when the buffer
    gives them, else ``gamma``); the critics' Adam step on ``0.5 * sum_i MSE(Q_i(s, a),
    target)``; the actor's on ``mean(ent_coef * log_prob - min_i Q_i(s, a~pi))`` with the
    critics just updated; the entropy coefficient's (``ent_coef="auto"``) on
    ``-mean(log_ent_coef * (log_prob + target_entropy))``; every ``target_update_interval``-th
    step of a ``train`` call, Polyak averaging of the target critics with ``tau``. With
    ``policy_delay`` d > 1, the actor and the entropy coefficient learn only at every d-th
    gradient step of the run (TD3's delayed policy update; the critics and targets at every one,
    the random draws the same), which saves most of the actor's share of the work. The losses
    stay tensors until the end of the call, where their means are logged under SB3's keys.

    Compiling pays: on a 2-core AMD EPYC, one torch thread, [64, 64] networks, batch 256 and
    ``train(1)`` calls (``benchmarks/offpolicy.py``, Nov 2026), the compiled step ran 952
    gradient steps/s, the same step run eagerly 449 and SB3's ``SAC.train`` 345; with
    [256, 256] networks 125, 105 and 87 (the matrix products dominate there). Compiling needs
    a C++ compiler (inductor) and happens at the first ``train`` call of a process, and again
    for each new batch size: about 17 CPU s with the racing task's default networks on an empty
    cache, 3 once torch's cache on disk holds the graphs (:attr:`compile_cpu_s`).

    :param compile_update: compile the step with ``torch.compile`` (``compile_backend``); if
        False, run it eagerly (slower; no compiler needed).
    :param policy_delay: gradient steps per actor (and entropy coefficient) update; 1: every
        step, as SB3's SAC.

    The other parameters are SB3's ``SAC``'s.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": FastSACPolicy,
        "CnnPolicy": FastSACCnnPolicy,
    }
    compile_backend: str = "inductor"
    """The ``torch.compile`` backend of the step (tests check the graph with "aot_eager")."""
    policy: FastSACPolicy
    critic: EnsembleCritic  # type: ignore[assignment]
    critic_target: EnsembleCritic  # type: ignore[assignment]

    def __init__(
        self, *args: Any, compile_update: bool = True, policy_delay: int = 1, **kwargs: Any
    ) -> None:
        if policy_delay < 1:
            raise ValueError(f"policy_delay must be at least 1, got {policy_delay}")
        self.compile_update = compile_update
        self.policy_delay = policy_delay
        super().__init__(*args, **kwargs)

    def _setup_model(self) -> None:
        super()._setup_model()
        if not isinstance(self.critic, EnsembleCritic):
            raise TypeError(
                f"FastSAC needs a policy with an EnsembleCritic (FastSACPolicy), "
                f"got a {type(self.critic).__name__}"
            )
        if self.use_sde:
            raise NotImplementedError("FastSAC does not implement gSDE (use_sde=True)")
        if self.batch_norm_stats:
            raise NotImplementedError("FastSAC does not implement batch normalisation")
        self._step: tuple[FastSACPolicy, bool, SACStep, Runs] | None = None
        self.compile_cpu_s: float | None = None
        """CPU seconds this process spent compiling the step (the first call of each graph, the
        critics' update and the actor's: this process's and its compiler's): None before, or
        never compiled."""
        self._timed: set[str] = set()

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_step", "compile_cpu_s", "_timed"]

    def step_function(self) -> tuple[SACStep, Runs]:
        """The policy's :class:`SACStep` and what runs its two updates, by name
        (``update_critics``, ``update_actor``): each compiled to a graph of its own if
        ``compile_update``, so a delayed actor's steps run the critics' graph alone, and the
        critics' update is compiled once. Built once per policy object and setting."""
        if self._step is None or self._step[:2] != (self.policy, self.compile_update):
            step = SACStep(self)
            runs: Runs = {name: getattr(step, name) for name in GRAPHS}
            if self.compile_update:
                for optimizer in step.optimizers:
                    check_adam(optimizer)
                # on a CPU, inductor's C++ wrapper: a graph's kernels built as one C++ file
                # with precompiled headers, not one file each: a cold compile ~25% cheaper, the
                # same results (measured on CPUs only, so CUDA keeps inductor's default)
                cpu = self.compile_backend == "inductor" and self.device.type == "cpu"
                options = {"cpp_wrapper": True} if cpu else None
                runs = {
                    name: th.compile(
                        _own_code(step, name),
                        fullgraph=True,
                        dynamic=False,
                        backend=self.compile_backend,
                        options=options,
                    )
                    for name in GRAPHS
                }
                self._timed = set()  # new graphs: their first calls compile them
            self._step = (self.policy, self.compile_update, step, runs)
        return self._step[2], self._step[3]

    def _eager_after(self, err: Exception) -> Runs:
        """The step run eagerly from now on, since compiling it failed with ``err``: said in a
        warning that names the cause (the run goes on, its results those of
        ``rl.sac.compile: false`` from here, which differ from a compiled run's in the last
        bits)."""
        cause = " ".join(str(err).split())[:300] or "no message"  # (its lines in one)
        warnings.warn(
            f"rl.sac.compile: torch {th.__version__} could not compile the SAC update "
            f"({type(err).__name__}: {cause}); running it eagerly instead (as "
            "rl.sac.compile: false: slower, and the results differ from a compiled run's in "
            "the last bits)",
            CompileFallback,
            stacklevel=4,
        )
        self.compile_update = False
        return self.step_function()[1]

    def train(self, gradient_steps: int, batch_size: int = 64) -> None:
        """``gradient_steps`` SAC updates on batches of ``batch_size`` from the replay buffer;
        the mean losses logged once, at the end (SB3's keys). If compiling the step fails (at
        its first call), the step runs eagerly from then on, with a :class:`CompileFallback`
        warning naming the cause."""
        self.policy.set_training_mode(True)
        optimizers = [self.actor.optimizer, self.critic.optimizer]
        if self.ent_coef_optimizer is not None:
            optimizers.append(self.ent_coef_optimizer)
        self._update_learning_rate(optimizers)
        step, runs = self.step_function()
        tensors = step.tensors()
        optim = (step.states(), step.learning_rates()) if self.compile_update else (None, None)
        taus = (step.scalar(self.tau), step.scalar(0.0))
        ent_coef = self.ent_coef_tensor if self.log_ent_coef is None else None
        gamma: th.Tensor | None = None
        normalize = self.policy.normalize_images
        skipped = th.full((1 + (self.log_ent_coef is not None),), math.nan, device=self.device)

        def run(name: str, *args: Any) -> th.Tensor:
            nonlocal runs, optim
            compiling = self.compile_update and name not in self._timed
            before = training_cpu_seconds() if compiling else 0.0
            try:
                out = runs[name](tensors, *optim, *args)
            except COMPILE_ERRORS as err:  # compiled at its first call: a compiler that fails
                if not compiling:
                    raise
                runs, optim = self._eager_after(err), (None, None)
                out = runs[name](tensors, *optim, *args)  # the same batch and draws, eagerly
            if compiling:
                self._timed.add(name)
                self.compile_cpu_s = (self.compile_cpu_s or 0.0) + training_cpu_seconds() - before
                if not self.compile_update:
                    log.info(
                        "trying to compile the SAC update took %.1f CPU s before it failed; "
                        "it runs eagerly (the CompileFallback warning says why)",
                        self.compile_cpu_s,
                    )
                elif self._timed.issuperset(GRAPHS):
                    log.info(
                        "compiled the SAC update in %.1f CPU s (torch's cache on disk makes a "
                        "later process's compile on this machine a few seconds)",
                        self.compile_cpu_s,
                    )
            return out

        logged = []
        for gradient_step in range(gradient_steps):
            batch = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)  # type: ignore[union-attr]
            discounts = batch.discounts
            if discounts is None:
                if gamma is None or gamma.shape != batch.rewards.shape:
                    gamma = th.full_like(batch.rewards, self.gamma)
                discounts = gamma
            # the actor's Gaussian draws, in SB3's order: on the observations, then on the next
            noise = th.empty_like(batch.actions).normal_()
            next_noise = th.empty_like(batch.actions).normal_()
            tau = taus[0] if gradient_step % self.target_update_interval == 0 else taus[1]
            obs, next_obs = (
                preprocess_obs(o, self.observation_space, normalize_images=normalize)
                for o in (batch.observations, batch.next_observations)
            )
            data = (obs, batch.actions, next_obs, batch.dones, batch.rewards, discounts)
            critics = run("update_critics", data, next_noise, tau, ent_coef)
            if (self._n_updates + gradient_step) % self.policy_delay == 0:
                actor = run("update_actor", obs, noise, ent_coef)
            else:  # a delayed step (TD3's): the critics only; the actor's losses are NaN
                actor = skipped
            logged.append(th.cat([critics, actor]))
        self._n_updates += gradient_steps

        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        if not logged:
            return
        means = th.stack(logged).nanmean(dim=0).tolist()  # (delayed steps log no actor loss)
        keys = ["train/ent_coef", "train/critic_loss", "train/actor_loss", "train/ent_coef_loss"]
        for key, value in zip(keys, means, strict=False):
            if not math.isnan(value):
                self.logger.record(key, value)
