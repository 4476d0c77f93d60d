"""The SAC arms' network: SB3's ``SACPolicy`` with the critics as one batched module.

* :class:`EnsembleCritic`: the ``n_critics`` Q-networks as one module, each layer's weights
  stacked to ``(n_critics, in, out)`` and evaluated for all critics with one ``torch.baddbmm``;
  optionally a LayerNorm (per critic, elementwise affine) after every hidden layer. It keeps
  SB3's ``ContinuousCritic`` interface, so SB3's own ``SAC.train`` runs with it too.
* :class:`FastSACPolicy` (and :class:`FastSACCnnPolicy`): SB3's ``SACPolicy`` with that critic.

The network lives here, beside the policy network BC and PPO share (:mod:`demo2rl.learning.policy`
builds a trained one to act with); the update that trains it is :mod:`demo2rl.rl.sac`'s.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch as th
from gymnasium import spaces
from stable_baselines3.common.policies import BaseModel
from stable_baselines3.common.preprocessing import get_action_dim
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    FlattenExtractor,
    NatureCNN,
)
from stable_baselines3.common.type_aliases import Schedule
from stable_baselines3.sac.policies import SACPolicy
from torch import nn
from torch.nn import functional as F

# --------------------------------------------------------------------------------------------
# 1. the critics: one module, stacked weights


class EnsembleCritic(BaseModel):
    """``n_critics`` independent Q(s, a) MLPs evaluated as one batch.

    Layer ``k`` of every critic is ``weights[k]`` of shape ``(n_critics, in, out)`` and
    ``biases[k]`` of shape ``(n_critics, 1, out)``; all critics run in one ``torch.baddbmm`` per
    layer. Each critic is initialised like a fresh ``nn.Linear`` stack (kaiming-uniform with
    a=sqrt(5), biases uniform in ±1/sqrt(fan_in)), drawing the random numbers in the order SB3's
    ``ContinuousCritic`` draws them, so that under one seed both start from the same weights.
    With ``layer_norm``, every hidden layer is followed by a LayerNorm per critic
    (``norm_weights[k]``, ``norm_biases[k]``, shape ``(n_critics, 1, hidden)``).

    The interface is SB3's ``ContinuousCritic`` (``forward`` returns a tuple of ``n_critics``
    tensors of shape (B, 1), ``q1_forward``, features extractor handling), plus
    :meth:`q_values`, all critics as one (n_critics, B, 1) tensor.

    :param observation_space: the observation space.
    :param action_space: the (Box) action space.
    :param net_arch: the hidden layer sizes of every critic.
    :param features_extractor: the network extracting features from observations.
    :param features_dim: the number of features it extracts.
    :param activation_fn: the activation after every hidden layer.
    :param normalize_images: whether image observations are divided by 255.
    :param n_critics: the number of Q-networks.
    :param share_features_extractor: whether the features extractor is the actor's (then it is
        trained by the actor's loss only and is evaluated here without gradients).
    :param layer_norm: whether a LayerNorm follows every hidden layer of every critic.
    """

    features_extractor: BaseFeaturesExtractor

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Box,
        net_arch: list[int],
        features_extractor: BaseFeaturesExtractor,
        features_dim: int,
        activation_fn: type[nn.Module] = nn.ReLU,
        normalize_images: bool = True,
        n_critics: int = 2,
        share_features_extractor: bool = True,
        layer_norm: bool = False,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            features_extractor=features_extractor,
            normalize_images=normalize_images,
        )
        self.share_features_extractor = share_features_extractor
        self.n_critics = n_critics
        self.layer_norm = layer_norm
        sizes = [features_dim + get_action_dim(action_space), *net_arch, 1]
        self.weights = nn.ParameterList(
            th.empty(n_critics, fan_in, fan_out) for fan_in, fan_out in itertools.pairwise(sizes)
        )
        self.biases = nn.ParameterList(th.empty(n_critics, 1, fan_out) for fan_out in sizes[1:])
        hidden = net_arch if layer_norm else []
        self.norm_weights = nn.ParameterList(th.ones(n_critics, 1, size) for size in hidden)
        self.norm_biases = nn.ParameterList(th.zeros(n_critics, 1, size) for size in hidden)
        self.activation = activation_fn()
        self.reset_parameters()

    @th.no_grad()
    def reset_parameters(self) -> None:
        """Every critic's layers initialised as ``nn.Linear`` does, critic by critic and layer by
        layer (SB3's order); LayerNorms to the identity."""
        for critic in range(self.n_critics):
            for weight, bias in zip(self.weights, self.biases, strict=True):
                fan_in, fan_out = weight.shape[1:]
                layer = th.empty(fan_out, fan_in)
                nn.init.kaiming_uniform_(layer, a=math.sqrt(5))
                weight[critic].copy_(layer.T)
                bias[critic].uniform_(-1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))
        for weight, bias in zip(self.norm_weights, self.norm_biases, strict=True):
            weight.fill_(1.0)
            bias.zero_()

    def _get_constructor_parameters(self) -> dict[str, Any]:
        raise NotImplementedError("an EnsembleCritic is built and saved by its policy")

    def features(self, obs: th.Tensor, preprocessed: bool = False) -> th.Tensor:
        """The features the critics see (of observations already preprocessed by SB3's
        ``preprocess_obs`` if ``preprocessed``): with gradients only if the extractor is the
        critics' own (a shared extractor is trained by the actor's loss only, as in SB3)."""
        with th.set_grad_enabled(not self.share_features_extractor):
            if preprocessed:
                return self.features_extractor(obs)
            return self.extract_features(obs, self.features_extractor)

    def mlp(self, inputs: th.Tensor, critics: slice = slice(None)) -> th.Tensor:
        """The ``critics`` Q-networks on ``inputs`` (B, features + actions): (n, B, 1)."""
        layers = self._layers(critics)
        x = inputs.expand(layers[0][0].shape[0], *inputs.shape)
        for weight, bias, norm in layers[:-1]:
            x = th.baddbmm(bias, x, weight)
            if norm is not None:
                x = th.addcmul(norm[1], F.layer_norm(x, x.shape[-1:]), norm[0])
            x = self.activation(x)
        # the output layer (one unit) as a product and a sum: on this CPU a bmm with one output
        # column costs more than the elementwise product
        weight, bias, _ = layers[-1]
        return (x * weight.transpose(1, 2)).sum(dim=2, keepdim=True) + bias

    def _layers(
        self, critics: slice
    ) -> list[tuple[th.Tensor, th.Tensor, tuple[th.Tensor, th.Tensor] | None]]:
        """(weight, bias, the LayerNorm's (weight, bias) or None) per layer, of ``critics``."""
        norms: list[tuple[th.Tensor, th.Tensor] | None] = list(
            zip(self.norm_weights, self.norm_biases, strict=True)
        ) or [None] * (len(self.weights) - 1)
        layers = list(zip(self.weights, self.biases, [*norms, None], strict=True))
        if critics == slice(None):
            return layers
        return [
            (w[critics], b[critics], n and (n[0][critics], n[1][critics])) for w, b, n in layers
        ]

    def q_values(self, obs: th.Tensor, actions: th.Tensor, preprocessed: bool = False) -> th.Tensor:
        """All critics' Q(obs, actions) as one (n_critics, B, 1) tensor."""
        return self.mlp(th.cat([self.features(obs, preprocessed), actions], dim=1))

    def forward(self, obs: th.Tensor, actions: th.Tensor) -> tuple[th.Tensor, ...]:
        """SB3's interface: a tuple of ``n_critics`` Q-value tensors of shape (B, 1)."""
        return tuple(self.q_values(obs, actions).unbind(0))

    def q1_forward(self, obs: th.Tensor, actions: th.Tensor) -> th.Tensor:
        """The first critic's Q-values (B, 1), features without gradients (as SB3's)."""
        with th.no_grad():
            features = self.extract_features(obs, self.features_extractor)
        return self.mlp(th.cat([features, actions], dim=1), critics=slice(0, 1))[0]


# --------------------------------------------------------------------------------------------
# 2. the policies: SB3's SACPolicy with that critic


class FastSACPolicy(SACPolicy):
    """SB3's ``SACPolicy`` (same actor, same arguments) whose critic and target critic are
    :class:`EnsembleCritic` modules.

    Unlike SB3's, its optimizers default to fused Adam (``optimizer_kwargs={"fused": True}``
    when the optimizer is Adam and neither ``fused`` nor ``foreach`` is given): the same
    arithmetic in one kernel per step. Its saved constructor parameters include
    ``share_features_extractor`` (SB3's omit it).

    :param critic_layer_norm: a LayerNorm after every hidden layer of every critic (and of the
        target critics).

    The other parameters are ``SACPolicy``'s.
    """

    critic: EnsembleCritic  # type: ignore[assignment]
    critic_target: EnsembleCritic  # type: ignore[assignment]

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Box,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        activation_fn: type[nn.Module] = nn.ReLU,
        use_sde: bool = False,
        log_std_init: float = -3,
        use_expln: bool = False,
        clip_mean: float = 2.0,
        features_extractor_class: type[BaseFeaturesExtractor] = FlattenExtractor,
        features_extractor_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = True,
        optimizer_class: type[th.optim.Optimizer] = th.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
        n_critics: int = 2,
        share_features_extractor: bool = False,
        critic_layer_norm: bool = False,
    ) -> None:
        self.critic_layer_norm = critic_layer_norm  # read by make_critic, inside super().__init__
        optimizer_kwargs = dict(optimizer_kwargs or {})
        if issubclass(optimizer_class, th.optim.Adam) and not {"fused", "foreach"} & set(
            optimizer_kwargs
        ):
            optimizer_kwargs["fused"] = True
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            net_arch=net_arch,
            activation_fn=activation_fn,
            use_sde=use_sde,
            log_std_init=log_std_init,
            use_expln=use_expln,
            clip_mean=clip_mean,
            features_extractor_class=features_extractor_class,
            features_extractor_kwargs=features_extractor_kwargs,
            normalize_images=normalize_images,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            n_critics=n_critics,
            share_features_extractor=share_features_extractor,
        )

    def make_critic(  # type: ignore[override]
        self, features_extractor: BaseFeaturesExtractor | None = None
    ) -> EnsembleCritic:
        kwargs = self._update_features_extractor(self.critic_kwargs, features_extractor)
        return EnsembleCritic(**kwargs, layer_norm=self.critic_layer_norm).to(self.device)

    def set_training_mode(self, mode: bool) -> None:
        """SB3's (the actor and the critics to ``mode``; the target critics stay in evaluation
        mode), without walking the module trees each time: SAC calls it before every update
        and every action."""
        cached = getattr(self, "_mode_modules", None)
        if cached is None or cached[0] is not self.actor or cached[1] is not self.critic:
            cached = (self.actor, self.critic, [*self.actor.modules(), *self.critic.modules()])
            self._mode_modules = cached
        for module in cached[2]:
            module.__dict__["training"] = mode  # what nn.Module.train sets, without its checks
        self.training = mode

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return super()._get_constructor_parameters() | {
            "share_features_extractor": self.share_features_extractor,
            "critic_layer_norm": self.critic_layer_norm,
        }


class FastSACCnnPolicy(FastSACPolicy):
    """:class:`FastSACPolicy` with SB3's ``NatureCNN`` features extractor by default (SB3's
    ``CnnPolicy`` with batched critics)."""

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Box,
        lr_schedule: Schedule,
        features_extractor_class: type[BaseFeaturesExtractor] = NatureCNN,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            features_extractor_class=features_extractor_class,
            **kwargs,
        )
