"""Acting with a policy network in an env: raw observations in, the env's actions out.

:func:`make_actor` turns a network and its observation normalisation into a
:data:`demo2rl.tasks.PolicyFn`, the batched callable that :func:`demo2rl.demos.rollout.run_episodes`
steps envs with (as it does an expert), so the evaluations and the BC and RL stages' held-out
checks drive a clone or an RL agent exactly as they drive the expert. The network and the two
transforms it applies are :mod:`demo2rl.learning.policy`'s; this module only composes them, in the
order and in the fixed-size blocks that keep an action independent of how many envs act together.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy

from demo2rl.learning.policy import (
    ObsTransform,
    action_rescaling,
    needs_rescale,
    policy_action_space,
)
from demo2rl.tasks import PolicyFn

ACT_BLOCK = 64
"""Rows per policy forward pass when acting (see :func:`make_actor`)."""


def make_actor(
    policy: BasePolicy,
    normalizer: ObsTransform,
    action_space: gym.Space,
    deterministic: bool = True,
) -> PolicyFn:
    """A batched callable, raw observations ``(B, ...)`` in, env actions ``(B, ...)`` out.

    Normalises (images: transposes, :class:`demo2rl.learning.policy.ImageObs`), runs the policy
    (SB3's ``_predict``, as its own ``predict``: PPO's and BC's ``ActorCriticPolicy`` or an
    off-policy
    arm's SAC policy; the mean action when ``deterministic``), clips to the policy's action
    bounds and maps rescaled actions back to the env's range; a ``rollout`` policy. The
    policy always sees blocks of :data:`ACT_BLOCK` rows (padded), so an action does not depend on
    how many envs were stepped together: torch's CPU matmul rounds differently for different
    batch sizes, and the number of envs is a speed setting.
    """
    box = isinstance(action_space, gym.spaces.Box)
    to_env = action_rescaling(action_space)[1] if needs_rescale(action_space) else None
    bounds = policy_action_space(action_space)
    low, high = (bounds.low, bounds.high) if box else (None, None)

    def act(obs: np.ndarray) -> np.ndarray:
        x = normalizer(np.asarray(obs))
        block = np.zeros((ACT_BLOCK, *x.shape[1:]), dtype=x.dtype)
        chunks = []
        for start in range(0, len(x), ACT_BLOCK):
            rows = x[start : start + ACT_BLOCK]
            block[: len(rows)] = rows
            block[len(rows) :] = 0
            with torch.no_grad():
                x_block = torch.as_tensor(block, device=policy.device)
                actions = policy._predict(x_block, deterministic=deterministic)
                chunks.append(actions[: len(rows)].cpu())
        out = torch.cat(chunks).numpy()
        if not box:
            return out.astype(np.int64)
        out = np.clip(out, low, high)
        if to_env is not None:
            out = to_env(out)
        return np.asarray(out, dtype=np.float32)

    return act


def mean_actions(policy: ActorCriticPolicy, obs: torch.Tensor) -> torch.Tensor:
    """The mean of a Gaussian policy's actions for a batch of (normalised) observations: the
    deterministic action before clipping, as a differentiable tensor."""
    return policy.get_distribution(obs).distribution.mean
