"""The policy shared by behaviour cloning, PPO and evaluation, and its checkpoint.

One network for every stage: :func:`build_policy` returns exactly the ``ActorCriticPolicy`` that
``PPO("MlpPolicy", env, policy_kwargs=sb3_policy_kwargs(cfg))`` builds, so a BC checkpoint's
``state_dict`` loads strictly into ``model.policy``. Around the network sit two fixed transforms:

* **Observation normalisation** (:class:`ObsNormalizer`): ``clip((obs - mean) / sqrt(var + eps))``
  in float64, then cast to float32 -- the formula and dtypes of SB3's ``VecNormalize``. The RL
  stage wraps its envs in ``VecNormalize(venv, training=False, norm_obs=True, norm_reward=False,
  clip_obs=n.clip_obs, epsilon=n.epsilon)`` and calls ``n.apply_to(vec_normalize)``, so PPO sees
  the inputs BC trained on.
* **Action scaling**: for a bounded ``Box`` action space whose bounds are not ``[-1, 1]``
  (:func:`needs_rescale`), the policy acts in ``[-1, 1]`` (:func:`policy_action_space`); the RL
  stage wraps the env in ``gymnasium.wrappers.RescaleAction(env, -1, 1)``, BC maps the expert's
  actions with :func:`scale_actions` (the exact inverse of that wrapper), and :func:`make_actor`
  maps the policy's actions back for an unwrapped env. Other spaces are used as they are.

The ``policy`` config slice (shared by BC and PPO)::

    {"net_arch": {"pi": [64, 64], "vf": [64, 64]},  # or one list for both
     "activation": "tanh",       # tanh | relu | elu | gelu | silu | leaky_relu
     "log_std_init": 0.0,        # initial log standard deviation of the Gaussian
     "ortho_init": true}         # SB3's orthogonal initialisation

Build the policy from the env's own spaces (``observation_space`` before ``VecNormalize``,
``action_space`` before ``RescaleAction``); checkpoints record those spaces.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.wrappers.utils import rescale_box
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.preprocessing import get_action_dim
from stable_baselines3.common.utils import ConstantSchedule
from torch import nn

from demo2rl import provenance
from demo2rl.config import ConfigError
from demo2rl.dataset import describe_space
from demo2rl.io import atomic_path

CHECKPOINT_FORMAT = "demo2rl-policy"
CHECKPOINT_VERSION = 1
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "leaky_relu": nn.LeakyReLU,
}
POLICY_DEFAULTS: dict[str, Any] = {
    "net_arch": {"pi": [64, 64], "vf": [64, 64]},
    "activation": "tanh",
    "log_std_init": 0.0,
    "ortho_init": True,
}
CHECKPOINT_KEYS = (
    "state_dict",
    "policy_cfg",
    "observation_space",
    "action_space",
    "normalizer",
    "meta",
)
ARCHITECTURE_KEYS = ("net_arch", "activation")
"""Config keys that define the network's function (init-only keys do not matter once loaded)."""
ACT_BLOCK = 64
"""Rows per policy forward pass when acting (see :func:`make_actor`)."""


class CheckpointError(ValueError):
    """A policy checkpoint that is missing, corrupt, or does not fit the config or the task."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)
        self.problem = problem


# --------------------------------------------------------------------------------------------
# configuration and construction


def normalise_policy_cfg(policy_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The policy config with defaults filled in and ``net_arch`` in ``{"pi", "vf"}`` form."""
    unknown = set(policy_cfg) - set(POLICY_DEFAULTS)
    if unknown:
        key = sorted(unknown)[0]
        raise ConfigError(f"policy.{key}", f"unknown key (known: {sorted(POLICY_DEFAULTS)})")
    cfg = copy.deepcopy(POLICY_DEFAULTS) | copy.deepcopy(dict(policy_cfg))
    arch = cfg["net_arch"]
    if isinstance(arch, (list, tuple)):
        arch = {"pi": list(arch), "vf": list(arch)}
    if not isinstance(arch, Mapping) or set(arch) != {"pi", "vf"}:
        raise ConfigError("policy.net_arch", f"expected a list or {{pi: [...], vf: [...]}}: {arch}")
    for part in ("pi", "vf"):
        sizes = arch[part]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sizes):
            raise ConfigError(f"policy.net_arch.{part}", f"layer sizes must be positive: {sizes}")
    cfg["net_arch"] = {"pi": [int(n) for n in arch["pi"]], "vf": [int(n) for n in arch["vf"]]}
    if cfg["activation"] not in ACTIVATIONS:
        raise ConfigError(
            "policy.activation",
            f"unknown activation {cfg['activation']!r} (choose from {sorted(ACTIVATIONS)})",
        )
    cfg["log_std_init"] = float(cfg["log_std_init"])
    cfg["ortho_init"] = bool(cfg["ortho_init"])
    return cfg


def sb3_policy_kwargs(policy_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """SB3 ``policy_kwargs`` for ``PPO("MlpPolicy", ...)`` from the ``policy`` config slice."""
    cfg = normalise_policy_cfg(policy_cfg)
    return {
        "net_arch": dict(pi=list(cfg["net_arch"]["pi"]), vf=list(cfg["net_arch"]["vf"])),
        "activation_fn": ACTIVATIONS[cfg["activation"]],
        "log_std_init": cfg["log_std_init"],
        "ortho_init": cfg["ortho_init"],
    }


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


def _rescale_fns(space: gym.spaces.Box) -> tuple[Callable, Callable]:
    """(env -> [-1, 1], [-1, 1] -> env), gymnasium's own ``RescaleAction`` transforms."""
    minus_one = np.full(space.shape, -1.0, dtype=space.dtype)
    _, forward, backward = rescale_box(space, minus_one, -minus_one)
    return forward, backward


def scale_actions(actions: np.ndarray, action_space: gym.Space) -> np.ndarray:
    """Env actions -> the policy's action space (identity unless :func:`needs_rescale`).

    For a rescaled Box this is the inverse of what ``RescaleAction(env, -1, 1)`` applies, so an
    expert action ``a`` becomes the policy action that the wrapped env turns back into ``a``.
    """
    if not needs_rescale(action_space):
        return np.asarray(actions)
    forward, _ = _rescale_fns(action_space)
    return np.asarray(forward(np.asarray(actions)), dtype=action_space.dtype)


def build_policy(
    observation_space: gym.Space,
    action_space: gym.Space,
    policy_cfg: Mapping[str, Any],
    residual_base: Mapping[str, Any] | None = None,
) -> ActorCriticPolicy:
    """The ``ActorCriticPolicy`` PPO's ``MlpPolicy`` builds for this config (on the CPU); with
    ``residual_base`` (a :attr:`ResidualPolicy.base_spec`) the :class:`ResidualPolicy` PPO's
    residual arm trains.

    ``action_space`` is the env's; the network acts in :func:`policy_action_space`. Weights are
    initialised from torch's global generator (seed it, or use ``torch.random.fork_rng``), with
    one thread so that they do not depend on the thread count.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the orthogonal init's QR rounds differently with more threads
    kwargs = sb3_policy_kwargs(policy_cfg)
    if residual_base is not None:
        kwargs["base_spec"] = residual_base
    try:
        return (ActorCriticPolicy if residual_base is None else ResidualPolicy)(
            observation_space,
            policy_action_space(action_space),
            ConstantSchedule(0.0),  # BC and PPO each make their own optimiser
            use_sde=False,
            **kwargs,
        )
    finally:
        torch.set_num_threads(threads)


class ResidualPolicy(ActorCriticPolicy):
    """An actor-critic whose Gaussian mean is a frozen base actor's mean plus a learned correction.

    The base is another policy's actor (its hidden layers and action layer, e.g. the behaviour
    clone's), copied in with :meth:`set_base` and never trained: its weights are part of the
    state dict (a checkpoint carries its base) but not of the optimiser. Everything else is
    SB3's ``MlpPolicy``: the critic, the state-independent log-std, and the correction network,
    whose action layer SB3 initialises with gain 0.01, so a fresh residual policy acts (almost)
    exactly like its base. Shifting the Gaussian by the base's mean is residual policy learning
    (Silver et al. 2018, Johannink et al. 2019) with the correction's exploration noise; PPO's
    ratios and the entropy are those of the shifted Gaussian. Box actions only.
    """

    def __init__(self, *args: Any, base_spec: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # builds the optimiser: the base is added after it
        if not isinstance(self.action_space, gym.spaces.Box):
            raise ValueError(f"a residual policy needs Box actions, not {self.action_space}")
        self.base_spec = {
            "net_arch": [int(n) for n in base_spec["net_arch"]],
            "activation": str(base_spec["activation"]),
        }
        layers: list[nn.Module] = []
        width = self.features_dim
        for n in self.base_spec["net_arch"]:
            layers += [nn.Linear(width, n), ACTIVATIONS[self.base_spec["activation"]]()]
            width = n
        layers.append(nn.Linear(width, get_action_dim(self.action_space)))
        self.base = nn.Sequential(*layers).requires_grad_(False)

    def set_base(self, policy: ActorCriticPolicy) -> None:
        """Copy ``policy``'s actor (hidden layers and action layer) into the frozen base."""
        hidden = policy.mlp_extractor.policy_net.state_dict()
        head = {f"{len(self.base) - 1}.{k}": v for k, v in policy.action_net.state_dict().items()}
        self.base.load_state_dict(hidden | head, strict=True)

    def _distribution_and_values(self, obs: torch.Tensor) -> tuple[Any, torch.Tensor]:
        features = self.extract_features(obs)
        latent_pi, latent_vf = self.mlp_extractor(features)
        mean = self.base(features) + self.action_net(latent_pi)
        return self.action_dist.proba_distribution(mean, self.log_std), self.value_net(latent_vf)

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


def actor_spec(policy: ActorCriticPolicy) -> dict[str, Any]:
    """The ``base_spec`` of a :class:`ResidualPolicy` whose base is ``policy``'s actor: the
    sizes of its hidden layers and their activation."""
    layers = list(policy.mlp_extractor.policy_net)
    sizes = [m.out_features for m in layers if isinstance(m, nn.Linear)]
    kinds = {type(m) for m in layers if not isinstance(m, nn.Linear)}
    names = [name for name, kind in ACTIVATIONS.items() if {kind} == kinds]
    return {"net_arch": sizes, "activation": names[0] if names else "tanh"}


def mean_actions(policy: ActorCriticPolicy, obs: torch.Tensor) -> torch.Tensor:
    """The mean of a Gaussian policy's actions for a batch of (normalised) observations."""
    return policy.get_distribution(obs).distribution.mean


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


def space_from_description(desc: Mapping[str, Any]) -> gym.Space:
    """The gymnasium space a :func:`demo2rl.dataset.describe_space` description describes."""
    if desc.get("type") == "Box":
        dtype = np.dtype(desc["dtype"])
        low = np.asarray(desc["low"], dtype=dtype).reshape(desc["shape"])
        high = np.asarray(desc["high"], dtype=dtype).reshape(desc["shape"])
        return gym.spaces.Box(low, high, tuple(desc["shape"]), dtype)
    if desc.get("type") == "Discrete":
        return gym.spaces.Discrete(int(desc["n"]), start=int(desc.get("start", 0)))
    raise ValueError(f"unsupported space description: {desc}")


def resolve_device(device: str) -> torch.device:
    """``"auto"`` (CUDA when visible, else CPU), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
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


# --------------------------------------------------------------------------------------------
# observation normalisation


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
# acting


def make_actor(
    policy: ActorCriticPolicy,
    normalizer: ObsNormalizer,
    action_space: gym.Space,
    deterministic: bool = True,
) -> Callable[[np.ndarray], np.ndarray]:
    """A batched callable, raw observations ``(B, ...)`` in, env actions ``(B, ...)`` out.

    Normalises, runs the policy (mean action when ``deterministic``), clips to the policy's
    action bounds and maps rescaled actions back to the env's range; a ``rollout`` policy. The
    policy always sees blocks of :data:`ACT_BLOCK` rows (padded), so an action does not depend on
    how many envs were stepped together: torch's CPU matmul rounds differently for different
    batch sizes, and the number of envs is a speed setting.
    """
    box = isinstance(action_space, gym.spaces.Box)
    backward = _rescale_fns(action_space)[1] if needs_rescale(action_space) else None
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
                dist = policy.get_distribution(torch.as_tensor(block, device=policy.device))
                chunks.append(dist.get_actions(deterministic=deterministic)[: len(rows)].cpu())
        out = torch.cat(chunks).numpy()
        if not box:
            return out.astype(np.int64)
        out = np.clip(out, low, high)
        if backward is not None:
            out = backward(out)
        return np.asarray(out, dtype=np.float32)

    return act


# --------------------------------------------------------------------------------------------
# checkpoints


def space_mismatch(name: str, expected: Mapping[str, Any], actual: Mapping[str, Any]) -> str | None:
    """How two ``describe_space`` descriptions differ, e.g. ``"observation_space shape (39,) vs
    (2,)"`` (``expected`` first), or None when they are equal."""
    if expected == actual:
        return None
    for key in ("type", "shape", "n", "dtype", "start", "low", "high"):
        a, b = expected.get(key), actual.get(key)
        if a != b:
            if key == "shape":
                a, b = tuple(a or ()), tuple(b or ())
            return f"{name} {key} {a} vs {b}"
    return f"{name} {dict(expected)} vs {dict(actual)}"


def save_checkpoint(
    path: str | os.PathLike[str],
    policy: ActorCriticPolicy,
    normalizer: ObsNormalizer,
    *,
    policy_cfg: Mapping[str, Any],
    observation_space: gym.Space,
    action_space: gym.Space,
    meta: Mapping[str, Any],
) -> None:
    """Write the policy checkpoint atomically: plain data that ``weights_only=True`` loads.

    ``meta`` (e.g. dataset hash, config slice) is stored with package versions and the code
    revision added unless it has them.
    """
    meta_out = _plain(dict(meta))
    meta_out.setdefault("versions", provenance.versions())
    meta_out.setdefault("code_revision", dict(provenance.code_revision()))
    checkpoint = {
        "format": CHECKPOINT_FORMAT,
        "format_version": CHECKPOINT_VERSION,
        "state_dict": {k: v.detach().cpu().clone() for k, v in policy.state_dict().items()},
        "policy_cfg": _plain(normalise_policy_cfg(policy_cfg)),
        "observation_space": describe_space(observation_space),
        "action_space": describe_space(action_space),
        "normalizer": normalizer.to_dict(),
        "meta": meta_out,
        "residual_base": policy.base_spec if isinstance(policy, ResidualPolicy) else None,
    }
    with atomic_path(path) as tmp:
        torch.save(checkpoint, tmp)


def load_checkpoint(
    path: str | os.PathLike[str],
    observation_space: gym.Space,
    action_space: gym.Space,
    policy_cfg: Mapping[str, Any] | None = None,
) -> tuple[ActorCriticPolicy, ObsNormalizer, dict[str, Any]]:
    """Build the policy, load the checkpoint strictly; returns (policy, normalizer, checkpoint).

    With ``policy_cfg`` the checkpoint must match that network config (a stage about to train it
    further); without, the network is built from the config the checkpoint records (a stage that
    only acts with it). Raises CheckpointError naming the file and the mismatch.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(path, "no such checkpoint file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for a truncated or foreign file
        raise CheckpointError(path, f"unreadable checkpoint ({type(err).__name__}: {err})") from err
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(path, f"not a {CHECKPOINT_FORMAT} checkpoint")
    if ckpt.get("format_version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            path, f"format version {ckpt.get('format_version')}, expected {CHECKPOINT_VERSION}"
        )
    missing = [k for k in CHECKPOINT_KEYS if k not in ckpt]
    if missing:
        raise CheckpointError(path, f"incomplete checkpoint: no {', '.join(missing)}")
    for name, space in (("observation_space", observation_space), ("action_space", action_space)):
        problem = space_mismatch(name, ckpt[name], describe_space(space))
        if problem:
            raise CheckpointError(path, f"{problem} (checkpoint vs task)")
    cfg = normalise_policy_cfg(ckpt["policy_cfg"] if policy_cfg is None else policy_cfg)
    problem = _architecture_mismatch(ckpt["policy_cfg"], cfg)
    if problem:
        raise CheckpointError(path, problem)
    policy = build_policy(observation_space, action_space, cfg, ckpt.get("residual_base"))
    try:
        policy.load_state_dict(ckpt["state_dict"], strict=True)
    except RuntimeError as err:
        raise CheckpointError(path, f"weights do not fit the policy: {err}") from err
    normalizer = ObsNormalizer.from_dict(ckpt["normalizer"])
    return policy, normalizer, ckpt


def check_dataset_hash(
    path: str | os.PathLike[str],
    checkpoint: Mapping[str, Any],
    demos_path: str | os.PathLike[str],
    dataset_hash: str,
) -> None:
    """Raise CheckpointError, naming both files, unless the checkpoint at ``path`` records
    ``dataset_hash`` (the content hash of the dataset at ``demos_path``) as the dataset it was
    trained on: a policy of another experiment or an older dataset is never used silently."""
    recorded = checkpoint.get("meta", {}).get("dataset_hash")
    if recorded != dataset_hash:
        raise CheckpointError(
            path,
            f"trained on the dataset with content hash {recorded}, but this run's dataset "
            f"{demos_path} has content hash {dataset_hash}: the checkpoint belongs to another "
            "dataset (another experiment, or a dataset collected since); rerun the rule that "
            "wrote it",
        )


def _architecture_mismatch(saved: Mapping[str, Any], cfg: Mapping[str, Any]) -> str | None:
    """The first architecture key (net_arch, activation) where checkpoint and config differ."""
    pairs = [(f"net_arch.{p}", saved["net_arch"][p], cfg["net_arch"][p]) for p in ("pi", "vf")]
    pairs += [(k, saved[k], cfg[k]) for k in ARCHITECTURE_KEYS if k != "net_arch"]
    for key, a, b in pairs:
        if a != b:
            return f"policy.{key} is {a!r} in the checkpoint but {b!r} in the config"
    return None


def _plain(obj: Any) -> Any:
    """Recursively turn numpy values into Python ones (the checkpoint holds no numpy)."""
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    return obj
