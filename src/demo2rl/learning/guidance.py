"""Guide terms: what the demo-guided RL arms pull a policy towards, and how far it is from that.

The ``bc`` arm's demonstration term (warm start) pulls PPO's policy towards the demonstrated
actions (:func:`demo_targets`), the ``kickstart`` arm's distillation term towards the clone's
actions on the policy's own states (:func:`action_targets`); :func:`guide_loss` measures the
distance in both. They are the learning side of those arms, kept out of
:mod:`demo2rl.learning.policy` (they read a network, they are not part of it) and out of
:mod:`demo2rl.rl`'s training loop, which only weighs and schedules them, so that the loss can be
read and tested on its own.
"""

from __future__ import annotations

import gymnasium as gym
import torch
from stable_baselines3.common.policies import ActorCriticPolicy
from torch import nn


def action_targets(policy: ActorCriticPolicy, obs: torch.Tensor) -> torch.Tensor:
    """What a guide term pulls another policy towards: a Gaussian policy's mean action, a
    categorical policy's action probabilities, for a batch of (normalised) observations."""
    dist = policy.get_distribution(obs).distribution
    return dist.probs if isinstance(dist, torch.distributions.Categorical) else dist.mean


def demo_targets(actions: torch.Tensor, action_space: gym.Space) -> torch.Tensor:
    """Demonstrated actions (in the policy's action space) as :func:`action_targets`: Box
    actions as they are, Discrete ones as one-hot probabilities."""
    if isinstance(action_space, gym.spaces.Discrete):
        index = actions.long().reshape(-1) - int(action_space.start)
        return nn.functional.one_hot(index, int(action_space.n)).to(torch.float32)
    return actions


def guide_loss(policy: ActorCriticPolicy, obs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """How far ``policy`` is from ``targets`` (:func:`action_targets` of a teacher, or
    :func:`demo_targets`), averaged over the batch; the action distribution's mean or logits
    only, never the Gaussian's log-std. Gaussian: the squared distance of the mean action to the
    target, summed over action dimensions. Categorical: the cross-entropy of the policy's
    action probabilities relative to the target probabilities (Schmitt et al. 2018's
    kickstarting loss; with one-hot targets, the NLL of the demonstrated action)."""
    dist = policy.get_distribution(obs).distribution
    if isinstance(dist, torch.distributions.Categorical):
        return -(targets * torch.log_softmax(dist.logits, dim=-1)).sum(dim=-1).mean()
    return (dist.mean - targets).pow(2).sum(dim=-1).mean()
