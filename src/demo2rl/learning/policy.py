"""The policy network shared by behaviour cloning, PPO and evaluation, and the transforms around it.

One network for every stage: :func:`build_policy` returns exactly the ``ActorCriticPolicy`` that
``PPO("MlpPolicy", env, policy_kwargs=sb3_policy_kwargs(cfg))`` builds, so a BC checkpoint's
``state_dict`` loads strictly into ``model.policy``. Around the network sit two fixed transforms,
kept here with it because training (BC, PPO) and acting must apply the same ones:

* **Observation normalisation** (:class:`ObsNormalizer`): ``clip((obs - mean) / sqrt(var + eps))``
  in float64, then cast to float32 -- the formula and dtypes of SB3's ``VecNormalize``. The RL
  stage wraps its envs in ``VecNormalize(venv, training=False, norm_obs=True, norm_reward=False,
  clip_obs=n.clip_obs, epsilon=n.epsilon)`` and calls ``n.apply_to(vec_normalize)``, so PPO sees
  the inputs BC trained on.
* **Action scaling**: for a bounded ``Box`` action space whose bounds are not ``[-1, 1]``
  (:func:`needs_rescale`), the network acts in ``[-1, 1]`` (:func:`policy_action_space`); the RL
  stage wraps the env in ``gymnasium.wrappers.RescaleAction(env, -1, 1)``, BC maps the expert's
  actions with :func:`scale_actions` (the exact inverse of that wrapper), and
  :func:`demo2rl.learning.acting.make_actor` maps the network's actions back for an unwrapped env.
  Other spaces are used as they are.

The network is the ``policy`` config section (:class:`demo2rl.config.PolicyConfig`: hidden
layers, activation, initial log-std, orthogonal initialisation), shared by BC and PPO.

Build the policy from the env's own spaces (``observation_space`` before ``VecNormalize``,
``action_space`` before ``RescaleAction``); checkpoints record those spaces. Elsewhere: saving and
loading the network (:mod:`demo2rl.learning.checkpoints`), acting with it in an env
(:mod:`demo2rl.learning.acting`), the guide terms of the demo-guided RL arms
(:mod:`demo2rl.learning.guidance`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.wrappers.utils import rescale_box
from stable_baselines3.common.policies import ActorCriticPolicy, BaseModel
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, NatureCNN
from stable_baselines3.common.utils import ConstantSchedule
from stable_baselines3.common.vec_env import VecTransposeImage
from torch import nn

from demo2rl.config import ConfigError, PolicyConfig
from demo2rl.config import device as config_device
from demo2rl.learning import sac_policy
from demo2rl.observations import ObservationKind

UNFINGERPRINTED_IMPORTS = {
    "demo2rl.learning.sac_policy": "build_sac_policy builds a trained SAC checkpoint's network "
    "for acting; the SAC network changes no clone, and a SAC policy's result is fingerprinted by "
    "train_rl, which trained it",
}

ObsTransform = Any
"""An observation transform: :class:`ObsNormalizer` (vectors) or :class:`ImageObs` (images);
both are called on a batch of raw observations and have ``to_dict``."""

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "leaky_relu": nn.LeakyReLU,
}


# --------------------------------------------------------------------------------------------
# configuration


def sb3_policy_kwargs(policy_cfg: PolicyConfig, observation_space: gym.Space) -> dict[str, Any]:
    """SB3 ``policy_kwargs`` for ``PPO("MlpPolicy", ...)`` from the ``policy`` config: for an
    image observation space (:attr:`ObservationKind.image`) the image encoder ``policy.cnn`` as the
    features extractor (what ``"CnnPolicy"`` is: the same ``ActorCriticPolicy`` with
    ``NatureCNN``)."""
    if policy_cfg.activation not in ACTIVATIONS:
        raise ConfigError(
            "policy.activation",
            f"unknown activation {policy_cfg.activation!r} (choose from {sorted(ACTIVATIONS)})",
        )
    kwargs: dict[str, Any] = {
        "net_arch": {"pi": list(policy_cfg.net_arch["pi"]), "vf": list(policy_cfg.net_arch["vf"])},
        "activation_fn": ACTIVATIONS[policy_cfg.activation],
        "log_std_init": policy_cfg.log_std_init,
        "ortho_init": policy_cfg.ortho_init,
    }
    if ObservationKind.of(observation_space).image:
        if policy_cfg.cnn not in ENCODERS:
            raise ConfigError(
                "policy.cnn", f"unknown image encoder {policy_cfg.cnn!r} (choose from {ENCODERS})"
            )
        kwargs["features_extractor_class"] = ENCODERS[policy_cfg.cnn]
    return kwargs


# --------------------------------------------------------------------------------------------
# image observations


def policy_observation_space(space: gym.Space) -> gym.Space:
    """The observation space the network reads: a channels-last image transposed to
    channels-first (as SB3's ``VecTransposeImage`` does before PPO), any other as it is."""
    if ObservationKind.of(space).channels_last:
        assert isinstance(space, gym.spaces.Box)
        return VecTransposeImage.transpose_space(space)
    return space


class SmallCNN(BaseFeaturesExtractor):
    """A small image encoder for small frames (NatureCNN needs 36 pixels a side or more): two
    3x3 stride-2 convolutions (16 and 32 channels, ReLU), then a 128-wide ReLU layer. Inputs are
    channels-first images scaled to [0, 1] (SB3's ``preprocess_obs`` does that before it)."""

    def __init__(self, observation_space: gym.spaces.Box, features_dim: int = 128) -> None:
        super().__init__(observation_space, features_dim)
        channels, height, width = observation_space.shape
        self.cnn = nn.Sequential(
            nn.Conv2d(channels, 16, kernel_size=3, stride=2),
            nn.ReLU(),
            nn.Conv2d(16, 32, kernel_size=3, stride=2),
            nn.ReLU(),
            nn.Flatten(),
        )
        out = 32 * _conv_out(_conv_out(height)) * _conv_out(_conv_out(width))
        self.linear = nn.Sequential(nn.Linear(out, features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.linear(self.cnn(observations))


def _conv_out(size: int, kernel: int = 3, stride: int = 2) -> int:
    return (size - kernel) // stride + 1


ENCODERS: dict[str, type[BaseFeaturesExtractor]] = {"nature": NatureCNN, "small": SmallCNN}
"""``policy.cnn``: the image encoders by name."""
MIN_FRAME = {"nature": 36, "small": 7}
"""The smallest frame side each encoder takes (its convolutions need that many pixels)."""


@dataclasses.dataclass(frozen=True)
class ImageObs:
    """What BC, PPO and evaluation do to image observations before the network: nothing but
    SB3's own ``VecTransposeImage`` (channels-last frames to channels-first). Frames stay uint8;
    the network scales them to [0, 1] on the device it runs on (SB3's ``preprocess_obs``). They
    never pass through the running observation normalisation (:class:`ObsNormalizer`): the image
    counterpart of it, with the same interface."""

    channels_last: bool

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs)
        return np.ascontiguousarray(np.moveaxis(obs, -1, -3)) if self.channels_last else obs

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "image", "channels_last": self.channels_last}


def obs_transform(
    space: gym.Space, stats: Mapping[str, np.ndarray] | None, clip_obs: float
) -> ObsTransform:
    """The observation transform of a task: :class:`ImageObs` for images, else the frozen
    normalisation with a dataset's training-split statistics (:meth:`ObsNormalizer.of_stats`)."""
    kind = ObservationKind.of(space)
    if kind.image:
        return ImageObs(channels_last=kind.channels_last)
    if stats is None or "obs_mean" not in stats:
        raise ValueError("vector observations need the dataset's observation statistics")
    return ObsNormalizer.of_stats(stats, clip_obs, space.shape)


def obs_transform_from_dict(d: Mapping[str, Any]) -> ObsTransform:
    """Inverse of the transforms' ``to_dict`` (a checkpoint's record)."""
    if d.get("kind") == "image":
        return ImageObs(bool(d["channels_last"]))
    return ObsNormalizer.from_dict(d)


# --------------------------------------------------------------------------------------------
# the action space the network acts in


def needs_rescale(action_space: gym.Space) -> bool:
    """Whether the policy acts in ``[-1, 1]`` instead: a fully bounded Box that is not already."""
    if not isinstance(action_space, gym.spaces.Box):
        return False
    low, high = action_space.low, action_space.high
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        return False
    return not (np.all(low == -1.0) and np.all(high == 1.0))


def policy_action_space(action_space: gym.Space) -> gym.Space:
    """The action space the network acts in (``[-1, 1]`` Box when :func:`needs_rescale`)."""
    if needs_rescale(action_space):
        assert isinstance(action_space, gym.spaces.Box)
        return gym.spaces.Box(-1.0, 1.0, action_space.shape, action_space.dtype)
    return action_space


def action_rescaling(
    space: gym.spaces.Box,
) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """(env actions -> ``[-1, 1]``, ``[-1, 1]`` -> env actions) for a bounded Box: gymnasium's
    own ``RescaleAction`` transforms, so that both directions round exactly as the wrapper."""
    minus_one = np.full(space.shape, -1.0, dtype=space.dtype)
    _, to_policy, to_env = rescale_box(space, minus_one, -minus_one)
    return to_policy, to_env


def scale_actions(actions: np.ndarray, action_space: gym.Space) -> np.ndarray:
    """Env actions -> the policy's action space (identity unless :func:`needs_rescale`).

    For a rescaled Box this is the inverse of what ``RescaleAction(env, -1, 1)`` applies, so an
    expert action ``a`` becomes the policy action that the wrapped env turns back into ``a``.
    """
    if not needs_rescale(action_space):
        return np.asarray(actions)
    to_policy, _ = action_rescaling(action_space)
    return np.asarray(to_policy(np.asarray(actions)), dtype=action_space.dtype)


# --------------------------------------------------------------------------------------------
# the network


def build_policy(
    observation_space: gym.Space,
    action_space: gym.Space,
    policy_cfg: PolicyConfig,
    residual_base: Mapping[str, Any] | None = None,
) -> ActorCriticPolicy:
    """The ``ActorCriticPolicy`` PPO's ``MlpPolicy`` builds for this config (on the CPU); with
    ``residual_base`` (a :attr:`ResidualPolicy.base_spec`) the :class:`ResidualPolicy` PPO's
    residual arm trains.

    The spaces are the env's: the network reads :func:`policy_observation_space` and acts in
    :func:`policy_action_space`. Weights are
    initialised from torch's global generator (seed it, or use ``torch.random.fork_rng``), with
    one thread so that they do not depend on the thread count.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the orthogonal init's QR rounds differently with more threads
    kwargs = sb3_policy_kwargs(policy_cfg, observation_space) | {"optimizer_class": NoOptimizer}
    if residual_base is not None:
        kwargs["base_spec"] = residual_base
    try:
        return (ActorCriticPolicy if residual_base is None else ResidualPolicy)(
            policy_observation_space(observation_space),
            policy_action_space(action_space),
            ConstantSchedule(0.0),
            use_sde=False,
            **kwargs,
        )
    finally:
        torch.set_num_threads(threads)


class NoOptimizer:
    """The ``optimizer_class`` :func:`build_policy` gives SB3: none. BC and PPO each make their
    own optimiser, and the evaluations need none; building torch's Adam anyway would cost every
    job that only acts about 2 s, the import of torch's compiler (torch 2.13 imports
    ``torch._dynamo`` when an optimiser adds its parameters)."""

    def __init__(self, params: Any, **_: Any) -> None:
        del params


class ResidualPolicy(ActorCriticPolicy):
    """An actor-critic whose action distribution is a frozen base actor's plus a learned correction.

    The base is another policy's actor (its hidden layers and action layer, e.g. the behaviour
    clone's), copied in with :meth:`set_base` and never trained: its weights are part of the
    state dict (a checkpoint carries its base) but not of the optimiser. The correction is SB3's
    ``MlpPolicy`` actor, whose action layer SB3 initialises with gain 0.01, so a fresh residual
    policy acts (almost) exactly like its base; the critic is SB3's. For Box actions the
    correction shifts the Gaussian's mean (with the correction's state-independent log-std as
    exploration noise): residual policy learning (Silver et al. 2018, Johannink et al. 2019).
    For Discrete actions it is added to the base's logits, so the categorical distribution is
    the base's tilted by the correction; there the correction's action layer starts at exactly
    zero, because even a 0.01-gain correction flips the greedy action on states near the base's
    decision boundary (its hidden layers get gradient from the first update on). PPO's ratios
    and the entropy are those of the combined distribution.

    On images the base keeps its own frozen copy of the clone's CNN encoder, and the correction
    and the critic read a fresh encoder of their own that PPO trains (SB3's shared extractor):
    the correction can then learn to see what the clone's features miss (a frozen encoder
    trained only to imitate need not encode what the reward needs), and the base stays exactly
    the clone. The price is a second encoder pass per step.
    """

    def __init__(self, *args: Any, base_spec: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # builds the optimiser: the base is added after it
        if not isinstance(self.action_space, (gym.spaces.Box, gym.spaces.Discrete)):
            raise ValueError(
                f"a residual policy needs Box or Discrete actions, not {self.action_space}"
            )
        self.base_spec = {
            "net_arch": [int(n) for n in base_spec["net_arch"]],
            "activation": str(base_spec["activation"]),
        }
        layers: list[nn.Module] = []
        width = self.features_dim
        for n in self.base_spec["net_arch"]:
            layers += [nn.Linear(width, n), ACTIVATIONS[self.base_spec["activation"]]()]
            width = n
        assert isinstance(self.action_net, nn.Linear)
        layers.append(nn.Linear(width, self.action_net.out_features))  # means or logits
        self.base = nn.Sequential(*layers).requires_grad_(False)
        # the base's own copy of the clone's encoder (a CNN for images; for vectors a flatten,
        # with no weights), frozen like the base: see the class docstring
        self.base_encoder = self.make_features_extractor().requires_grad_(False)
        if isinstance(self.action_space, gym.spaces.Discrete):
            with torch.no_grad():
                self.action_net.weight.zero_()
                self.action_net.bias.zero_()

    def set_base(self, policy: ActorCriticPolicy) -> None:
        """Copy ``policy``'s actor (encoder, hidden layers, action layer) into the frozen base."""
        hidden = policy.mlp_extractor.policy_net.state_dict()
        head = {f"{len(self.base) - 1}.{k}": v for k, v in policy.action_net.state_dict().items()}
        self.base.load_state_dict(hidden | head, strict=True)
        self.base_encoder.load_state_dict(policy.pi_features_extractor.state_dict(), strict=True)

    def _distribution_and_values(self, obs: torch.Tensor) -> tuple[Any, torch.Tensor]:
        features = self.extract_features(obs)
        latent_pi, latent_vf = self.mlp_extractor(features)
        base_features = BaseModel.extract_features(self, obs, self.base_encoder)
        out = self.base(base_features) + self.action_net(latent_pi)
        if isinstance(self.action_space, gym.spaces.Discrete):
            dist = self.action_dist.proba_distribution(action_logits=out)
        else:
            dist = self.action_dist.proba_distribution(out, self.log_std)
        return dist, self.value_net(latent_vf)

    def forward(
        self, obs: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dist, values = self._distribution_and_values(obs)
        actions = dist.get_actions(deterministic=deterministic)
        return actions.reshape((-1, *self.action_space.shape)), values, dist.log_prob(actions)

    def evaluate_actions(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        dist, values = self._distribution_and_values(obs)
        return values, dist.log_prob(actions), dist.entropy()

    def get_distribution(self, obs: torch.Tensor) -> Any:
        return self._distribution_and_values(obs)[0]

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return super()._get_constructor_parameters() | {"base_spec": self.base_spec}


def actor_parameters(policy: ActorCriticPolicy) -> list[torch.nn.Parameter]:
    """The parameters that shape the action distribution (everything but the value function)."""
    critic = {id(p) for p in policy.mlp_extractor.value_net.parameters()}
    critic |= {id(p) for p in policy.value_net.parameters()}
    if not policy.share_features_extractor:
        critic |= {id(p) for p in policy.vf_features_extractor.parameters()}
    return [p for p in policy.parameters() if id(p) not in critic]


def actor_spec(policy: ActorCriticPolicy) -> dict[str, Any]:
    """The ``base_spec`` of a :class:`ResidualPolicy` whose base is ``policy``'s actor: the
    sizes of its hidden layers and their activation."""
    layers = list(policy.mlp_extractor.policy_net)
    sizes = [m.out_features for m in layers if isinstance(m, nn.Linear)]
    kinds = {type(m) for m in layers if not isinstance(m, nn.Linear)}
    names = [name for name, kind in ACTIVATIONS.items() if {kind} == kinds]
    return {"net_arch": sizes, "activation": names[0] if names else "tanh"}


# --------------------------------------------------------------------------------------------
# the off-policy arms' network (SAC)


def sac_policy_kwargs(spec: Mapping[str, Any], observation_space: gym.Space) -> dict[str, Any]:
    """SB3 ``policy_kwargs`` of our SAC policy (:class:`~demo2rl.learning.sac_policy.FastSACPolicy`)
    from a network ``spec`` (:func:`demo2rl.rl.recipe.sac_spec`): the actor's ``pi`` and the
    critics' ``qf`` layers, the activation, the critic ensemble; for images the image encoder,
    one for the actor and one shared by the critics (SB3's default for SAC: the actor's loss does
    not train the critics' encoder, nor theirs the actor's)."""
    kwargs: dict[str, Any] = {
        "net_arch": {"pi": list(spec["pi"]), "qf": list(spec["qf"])},
        "activation_fn": ACTIVATIONS[spec["activation"]],
        "n_critics": int(spec["n_critics"]),
        "critic_layer_norm": bool(spec["critic_layer_norm"]),
    }
    if ObservationKind.of(observation_space).image:
        kwargs["features_extractor_class"] = ENCODERS[spec["cnn"]]
    return kwargs


def build_sac_policy(
    observation_space: gym.Space, action_space: gym.Space, spec: Mapping[str, Any]
) -> BaseModel:
    """The SAC policy (actor and critics) of a network ``spec`` on the CPU, for acting with a
    trained one (:func:`demo2rl.learning.checkpoints.load_checkpoint`); spaces as in
    :func:`build_policy`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return sac_policy.FastSACPolicy(
            policy_observation_space(observation_space),
            policy_action_space(action_space),
            ConstantSchedule(0.0),
            optimizer_class=NoOptimizer,
            **sac_policy_kwargs(spec, observation_space),
        )
    finally:
        torch.set_num_threads(threads)


def load_sac_actor(sac_policy: Any, clone: ActorCriticPolicy, log_std: float) -> None:
    """Start a SAC actor from a Gaussian clone of the same hidden layers: its encoder, hidden
    layers and mean layer take the clone's weights; its (state-dependent) log-std layer is set to
    the constant ``log_std``. SAC squashes the mean through tanh, so the actor's deterministic
    action is tanh of the clone's: the same near 0, milder towards the bounds."""
    actor = sac_policy.actor
    if not hasattr(clone, "log_std"):
        raise ValueError("only a Gaussian clone (Box actions) can start a SAC actor")
    try:
        actor.latent_pi.load_state_dict(clone.mlp_extractor.policy_net.state_dict())
        actor.mu.load_state_dict(clone.action_net.state_dict())
        encoder = clone.pi_features_extractor
        actor.features_extractor.load_state_dict(encoder.state_dict())
    except RuntimeError as err:
        raise ValueError(
            f"the clone's actor does not fit the SAC actor (policy.net_arch pi): {err}"
        ) from err
    with torch.no_grad():
        actor.log_std.weight.zero_()
        actor.log_std.bias.fill_(log_std)


# --------------------------------------------------------------------------------------------
# observation normalisation


OBS_EPSILON = 1e-8
"""Epsilon of the observation normalisation (VecNormalize's default)."""


@dataclasses.dataclass
class ObsNormalizer:
    """Frozen observation normalisation, numerically identical to SB3's ``VecNormalize``."""

    mean: np.ndarray
    var: np.ndarray
    clip_obs: float = 10.0
    epsilon: float = 1e-8

    def __post_init__(self) -> None:
        self.mean = np.asarray(self.mean, dtype=np.float64)
        self.var = np.asarray(self.var, dtype=np.float64)
        self.clip_obs = float(self.clip_obs)
        self.epsilon = float(self.epsilon)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """``VecNormalize.normalize_obs``: float64 arithmetic, clipped, cast to float32."""
        scaled = (obs - self.mean) / np.sqrt(self.var + self.epsilon)
        return np.clip(scaled, -self.clip_obs, self.clip_obs).astype(np.float32)

    @classmethod
    def of_stats(
        cls, stats: Mapping[str, np.ndarray], clip_obs: float, shape: tuple[int, ...]
    ) -> ObsNormalizer:
        """The normalisation of a dataset's training split, from its recorded (flat) statistics
        (``obs_mean``, ``obs_std``; see :func:`demo2rl.demos.dataset.statistics`) for observations
        of ``shape``, clipped at ``clip_obs`` (``bc.clip_obs``): what BC trains with, and what the
        RL arms without a clone act with."""
        mean = np.asarray(stats["obs_mean"]).reshape(shape)
        var = np.square(np.asarray(stats["obs_std"]).reshape(shape))
        return cls(mean, var, clip_obs, OBS_EPSILON)

    @classmethod
    def fit(
        cls, obs: np.ndarray, *, clip_obs: float = 10.0, epsilon: float = 1e-8
    ) -> ObsNormalizer:
        """Mean and variance over the first axis of ``obs`` (computed in float64)."""
        x = np.asarray(obs, dtype=np.float64)
        return cls(x.mean(axis=0), x.var(axis=0), clip_obs, epsilon)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (float64 tensors) that ``torch.load(weights_only=True)`` accepts."""
        return {
            "mean": torch.from_numpy(self.mean.copy()),
            "var": torch.from_numpy(self.var.copy()),
            "clip_obs": self.clip_obs,
            "epsilon": self.epsilon,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ObsNormalizer:
        """Inverse of :meth:`to_dict` (also accepts lists or arrays)."""

        def arr(v: Any) -> np.ndarray:
            return v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v)

        return cls(arr(d["mean"]), arr(d["var"]), float(d["clip_obs"]), float(d["epsilon"]))

    def apply_to(self, vec_normalize: Any) -> None:
        """Set a ``VecNormalize``'s ``obs_rms`` to these statistics (check its clip and eps)."""
        if vec_normalize.clip_obs != self.clip_obs or vec_normalize.epsilon != self.epsilon:
            raise ValueError(
                f"VecNormalize has clip_obs={vec_normalize.clip_obs}, epsilon="
                f"{vec_normalize.epsilon}; the normalizer {self.clip_obs}, {self.epsilon}"
            )
        if vec_normalize.obs_rms.mean.shape != self.mean.shape:
            raise ValueError(
                f"VecNormalize observation shape {vec_normalize.obs_rms.mean.shape}, "
                f"normalizer {self.mean.shape}"
            )
        vec_normalize.obs_rms.mean = self.mean.copy()
        vec_normalize.obs_rms.var = self.var.copy()


# --------------------------------------------------------------------------------------------
# where the network runs


def resolve_device(device: str, cuda_pays: bool = True) -> torch.device:
    """The device BC or PPO trains the network on, from the config's ``device``: ``"auto"``
    (the workflow's rule, :func:`demo2rl.config.device`, with the GPUs this process sees: CUDA
    when visible and ``cuda_pays``, else CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``. PPO
    passes ``cuda_pays`` only for a CNN: its small MLPs step faster on the CPU. (The workflow
    resolves ``auto`` when it plans; a caller of the library may still pass it.)"""
    if device == "auto":
        device = config_device("auto", images=cuda_pays, gpus=torch.cuda.device_count())
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"unknown device {device!r} (auto, cpu, cuda, cuda:N)") from err
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} requested but CUDA is not available")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} GPU(s)")
    elif dev.type != "cpu":
        raise ValueError(f"unsupported device {device!r} (auto, cpu, cuda, cuda:N)")
    return dev
