"""Policy checkpoints: the network's weights with what it takes to rebuild and trust them.

A checkpoint is plain data that ``torch.load(weights_only=True)`` reads (no pickle): the state
dict, the normalised ``policy`` config slice, the task's observation and action spaces (as
:func:`demo2rl.demos.dataset.describe_space` describes them), the observation normalisation, a
:class:`~demo2rl.learning.policy.ResidualPolicy`'s base, an off-policy arm's SAC network spec (its
actor acts; :func:`demo2rl.learning.policy.build_sac_policy`) and free-form ``meta`` (dataset hash,
config, package versions, code revision; a DAgger clone's also the hash of the demonstrations it
grew from,
see :func:`check_dataset_hash`). Loading checks all of it against the task and the config and
raises :class:`CheckpointError` naming the file and the first mismatch, so a stage never acts or
trains with a network that does not belong to its run. (PPO's own resumable training state is
:mod:`demo2rl.rl`'s, not this.)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.policies import BasePolicy

from demo2rl import provenance
from demo2rl.config import ConfigError, PolicyConfig
from demo2rl.demos.dataset import describe_space, space_mismatch
from demo2rl.io import FileProblem, atomic_path
from demo2rl.learning.policy import (
    ObsTransform,
    ResidualPolicy,
    build_policy,
    build_sac_policy,
    obs_transform_from_dict,
)

CHECKPOINT_FORMAT = "demo2rl-policy"
CHECKPOINT_VERSION = 1
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


class CheckpointError(FileProblem):
    """A policy checkpoint that is missing, corrupt, or does not fit the config or the task."""


def save_checkpoint(
    path: str | os.PathLike[str],
    policy: BasePolicy,
    normalizer: ObsTransform,
    *,
    policy_cfg: PolicyConfig,
    observation_space: gym.Space,
    action_space: gym.Space,
    meta: Mapping[str, Any],
    sac_spec: Mapping[str, Any] | None = None,
) -> None:
    """Write the policy checkpoint atomically: plain data that ``weights_only=True`` loads.
    ``sac_spec``: the network of an off-policy arm's SAC policy (None for PPO's and BC's).

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
        "policy_cfg": policy_cfg.to_dict(),
        "observation_space": describe_space(observation_space),
        "action_space": describe_space(action_space),
        "normalizer": normalizer.to_dict(),
        "meta": meta_out,
        "residual_base": policy.base_spec if isinstance(policy, ResidualPolicy) else None,
        "sac": None if sac_spec is None else dict(sac_spec),
    }
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        torch.save(checkpoint, fh)  # to a Python file: a full disk raises ENOSPC, not a bare error


def load_checkpoint(
    path: str | os.PathLike[str],
    observation_space: gym.Space,
    action_space: gym.Space,
    policy_cfg: PolicyConfig | None = None,
) -> tuple[BasePolicy, ObsTransform, dict[str, Any]]:
    """Build the policy, load the checkpoint strictly; returns (policy, normalizer, checkpoint).
    The policy is an ``ActorCriticPolicy`` (BC's, PPO's) or, for an off-policy arm's checkpoint, a
    SAC policy: both act through SB3's ``_predict`` (:func:`demo2rl.learning.acting.make_actor`).

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
    try:
        saved = PolicyConfig.of(ckpt["policy_cfg"])
    except ConfigError as err:
        raise CheckpointError(
            path, f"its network config is not one this code knows: {err}"
        ) from err
    cfg = saved if policy_cfg is None else policy_cfg
    problem = _architecture_mismatch(saved, cfg)
    if problem:
        raise CheckpointError(path, problem)
    if ckpt.get("sac") is not None:
        if policy_cfg is not None:
            raise CheckpointError(path, "an off-policy arm's SAC policy: no stage trains on it")
        policy: BasePolicy = build_sac_policy(observation_space, action_space, ckpt["sac"])
    else:
        policy = build_policy(observation_space, action_space, cfg, ckpt.get("residual_base"))
    try:
        policy.load_state_dict(ckpt["state_dict"], strict=True)
    except RuntimeError as err:
        raise CheckpointError(path, f"weights do not fit the policy: {err}") from err
    normalizer = obs_transform_from_dict(ckpt["normalizer"])
    return policy, normalizer, ckpt


def check_dataset_hash(
    path: str | os.PathLike[str],
    checkpoint: Mapping[str, Any],
    demos_path: str | os.PathLike[str],
    dataset_hash: str,
) -> None:
    """Raise CheckpointError, naming both files, unless the checkpoint at ``path`` belongs to
    the demonstrations at ``demos_path`` (content hash ``dataset_hash``): a policy of another
    experiment or an older dataset is never used silently.

    A checkpoint belongs to them when its ``meta["demos_hash"]`` is ``dataset_hash``, or, when
    it has no ``demos_hash``, its ``meta["dataset_hash"]`` (the dataset it was trained on). A
    DAgger clone records both: it was trained on an aggregate (the demonstrations and the
    relabelled rounds, ``dataset_hash``) grown from the experiment's demonstrations
    (``demos_hash``); a BC clone or an RL run records the demonstrations as ``dataset_hash``."""
    meta = checkpoint.get("meta", {})
    recorded = meta.get("demos_hash", meta.get("dataset_hash"))
    if recorded != dataset_hash:
        trained = (
            f"grown from the demonstrations with content hash {recorded} (trained on their "
            f"aggregate {meta.get('dataset_hash')})"
            if "demos_hash" in meta
            else f"trained on the dataset with content hash {recorded}"
        )
        raise CheckpointError(
            path,
            f"{trained}, but this run's dataset {demos_path} has content hash {dataset_hash}: "
            "the checkpoint belongs to another dataset (another experiment, or a dataset "
            "collected since); rerun the rule that wrote it",
        )


def file_digest(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a checkpoint file's bytes: which file a result was made with."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _architecture_mismatch(saved: PolicyConfig, cfg: PolicyConfig) -> str | None:
    """The first architecture key (net_arch, activation) where checkpoint and config differ."""
    pairs = [(f"net_arch.{p}", saved.net_arch[p], cfg.net_arch[p]) for p in ("pi", "vf")]
    pairs += [(k, getattr(saved, k), getattr(cfg, k)) for k in ARCHITECTURE_KEYS if k != "net_arch"]
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
