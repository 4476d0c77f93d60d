"""Behaviour cloning: fit the shared policy to the expert's actions by maximum likelihood.

Everything that decides the result is in this file; how batches are served is
:mod:`demo2rl.learning.bc_data`:

* **Loss** (:func:`bc_loss`): the negative log-likelihood of the expert's actions under the
  policy's action distribution (mean *and* log-std learn), minus ``ent_coef`` x entropy, plus
  ``l2_coef`` x the sum of the actor's squared weights. Only the actor is trained; the value
  head keeps its initialisation for PPO to fit.
* **Data**: the training split normalised once and held in memory as tensors, one shuffle per
  epoch from a seeded generator (or, when it does not fit in ``memory_fraction`` of the RAM,
  shuffled HDF5 blocks streamed; the log says so): :mod:`demo2rl.learning.bc_data`. NaN or inf in
  the dataset's statistics or data fails before any epoch, naming the dataset and the field
  (:func:`demo2rl.learning.bc_data.check_finite`), not as a divergence blamed on the learning rate.
* **Validation and stopping**: NLL on the dataset's episode-level validation split after every
  epoch; training stops after ``patience`` epochs without improvement (or ``max_epochs``) and the
  best weights are returned.
* **Determinism**: the initial weights (``torch.manual_seed(seed)`` inside a forked RNG) and every
  shuffle (one ``torch.Generator``) depend only on ``seed``, so on the CPU the same config, data,
  seed and thread count give bitwise identical weights.

The settings are the ``bc`` config section (:class:`demo2rl.config.BCConfig`; each key is
documented in config/schema.yaml, with its default) and the network is ``policy``
(:class:`demo2rl.config.PolicyConfig`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable, Iterable

import gymnasium as gym
import torch
from stable_baselines3.common.policies import ActorCriticPolicy

from demo2rl.config import BCConfig, PolicyConfig
from demo2rl.demos import dataset
from demo2rl.demos.dataset import Demos, space_from_description
from demo2rl.learning import bc_data
from demo2rl.learning.augment import random_shift
from demo2rl.learning.policy import ObsTransform, actor_parameters, build_policy, resolve_device

log = logging.getLogger(__name__)

EVAL_BATCH = 8192
"""Rows per forward pass of the validation NLL (vectors: few, large passes are fastest)."""
IMAGE_EVAL_BATCH = 256
"""The same for images, whose CNN activations for 8192 frames would take hundreds of MiB."""


@dataclasses.dataclass
class BCResult:
    """The outcome of :func:`train_bc`: the best policy and how training went."""

    policy: ActorCriticPolicy
    normalizer: ObsTransform
    history: list[dict[str, float]]
    best_epoch: int
    best_valid_nll: float
    stop_reason: str
    data_path: str  # "memory" or "stream"
    device: str
    observation_space: gym.Space
    action_space: gym.Space
    n_train: int
    n_valid: int
    dataset_hash: str | None
    seconds: float


# --------------------------------------------------------------------------------------------
# the loss


def bc_loss(
    policy: ActorCriticPolicy,
    obs: torch.Tensor,
    actions: torch.Tensor,
    *,
    ent_coef: float,
    l2_coef: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """BC objective on a batch; returns (loss, mean NLL, mean entropy).

    ``loss = -mean log pi(a_expert | s) - ent_coef * mean entropy + l2_coef * sum(W**2)`` over the
    actor's weight matrices. The distribution is ``policy.get_distribution(obs)``: the actor half
    of ``policy.evaluate_actions`` (same log-probability and entropy, no value-head forward).
    """
    dist = policy.get_distribution(obs)
    nll = -dist.log_prob(actions).mean()
    entropy = dist.entropy()
    entropy = entropy.mean() if entropy is not None else torch.zeros((), device=obs.device)
    loss = nll - ent_coef * entropy
    if l2_coef:
        loss = loss + l2_coef * sum(w.pow(2).sum() for w in _actor_weights(policy))
    return loss, nll.detach(), entropy.detach()


def _actor_weights(policy: ActorCriticPolicy) -> list[torch.Tensor]:
    return [p for p in actor_parameters(policy) if p.ndim >= 2]


# --------------------------------------------------------------------------------------------
# training


def train_bc(
    demos: Demos | str | os.PathLike[str],
    *,
    policy_cfg: PolicyConfig,
    bc_cfg: BCConfig,
    seed: int,
    threads: int,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
    env_id: str | None = None,
    observation_space: gym.Space | None = None,
    action_space: gym.Space | None = None,
) -> BCResult:
    """Behaviour-clone the dataset (a ``Demos`` or an HDF5 path) into a fresh policy.

    ``on_epoch`` receives each epoch's record (as appended to ``history``). Passing the task's
    ``env_id`` and/or spaces checks the dataset against them first
    (:func:`demo2rl.demos.dataset.check_dataset`). NaN or inf in the dataset's statistics or data
    raises :class:`demo2rl.demos.dataset.DatasetError` before any epoch.
    """
    device = resolve_device(bc_cfg.device)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with bc_data.open_split_dataset(demos) as data:
            if env_id is not None or observation_space is not None or action_space is not None:
                dataset.check_dataset(
                    data.demos, observation_space, action_space, env_id, path=data.name
                )
            return _train(data, policy_cfg, bc_cfg, seed, device, threads, on_epoch)
    finally:
        torch.set_num_threads(previous_threads)


def _train(
    data: bc_data.SplitDataset,
    policy_cfg: PolicyConfig,
    cfg: BCConfig,
    seed: int,
    device: torch.device,
    threads: int,
    on_epoch: Callable[[dict[str, float]], None] | None,
) -> BCResult:
    """Clone ``data`` into a fresh policy: its initial weights (:func:`_initial_policy`), the
    loaders of its splits, checked finite (:func:`demo2rl.learning.bc_data.check_finite`), the
    epochs (:func:`_fit`), and the best epoch's weights."""
    start_time = time.perf_counter()
    obs_space = space_from_description(data.demos.attrs["observation_space"])
    act_space = space_from_description(data.demos.attrs["action_space"])
    normalizer = data.normalizer(cfg.clip_obs)
    policy = _initial_policy(obs_space, act_space, policy_cfg, seed, device)
    train, valid, data_path = bc_data.loaders(
        data, normalizer, act_space, device, cfg.memory_fraction, workers=max(1, threads)
    )
    bc_data.check_finite(data, train, valid)  # NaN or inf data: the data's fault, named
    log.info(
        "BC on %s: %d training / %d validation samples, %s path, device %s, seed %d",
        data.name,
        train.n,
        valid.n,
        data_path,
        device,
        seed,
    )
    fit = _fit(policy, train, valid, cfg, seed, images=data.images, on_epoch=on_epoch)
    policy.load_state_dict(fit.best_state)
    policy.eval()
    return BCResult(
        policy=policy,
        normalizer=normalizer,
        history=fit.history,
        best_epoch=fit.best_epoch,
        best_valid_nll=fit.best_nll if valid.n else math.nan,
        stop_reason=fit.stop_reason,
        data_path=data_path,
        device=str(device),
        observation_space=obs_space,
        action_space=act_space,
        n_train=train.n,
        n_valid=valid.n,
        dataset_hash=data.demos.attrs.get("content_hash"),
        seconds=time.perf_counter() - start_time,
    )


def _initial_policy(
    obs_space: gym.Space,
    act_space: gym.Space,
    policy_cfg: PolicyConfig,
    seed: int,
    device: torch.device,
) -> ActorCriticPolicy:
    """The policy BC starts from, on ``device``: its initial weights drawn from ``seed`` alone
    (``torch.manual_seed`` inside a forked RNG, so the caller's global stream is left as it
    was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        policy = build_policy(obs_space, act_space, policy_cfg)
    return policy.to(device)


@dataclasses.dataclass
class _Fit:
    """How BC's epochs went (:func:`_fit`)."""

    history: list[dict[str, float]]
    """Each epoch's record, as ``on_epoch`` received it."""
    best_nll: float
    """The lowest NLL the selection reads (validation, or training without a validation split);
    infinite before the first epoch."""
    best_epoch: int
    """The epoch of :attr:`best_nll` (0: the initial weights)."""
    best_state: dict[str, torch.Tensor]
    """The policy's weights after :attr:`best_epoch`."""
    stop_reason: str


def _fit(
    policy: ActorCriticPolicy,
    train: bc_data.Loader,
    valid: bc_data.Loader,
    cfg: BCConfig,
    seed: int,
    *,
    images: bool,
    on_epoch: Callable[[dict[str, float]], None] | None,
) -> _Fit:
    """Train the policy's actor epoch by epoch with Adam (:func:`_epoch`), keeping the weights of
    the epoch with the lowest validation NLL (training NLL without a validation split), until
    ``patience`` epochs pass without improvement or ``max_epochs`` are done. The shuffles draw
    from a generator seeded with ``seed``, the augmentation's shifts from one seeded with
    ``seed + 1``."""
    optimizer = torch.optim.Adam(actor_parameters(policy), lr=cfg.learning_rate)
    generator = torch.Generator().manual_seed(seed)
    shifts = torch.Generator().manual_seed(seed + 1)  # augmentation's own draws
    fit = _Fit(
        history=[],
        best_nll=math.inf,
        best_epoch=0,
        best_state=_state_copy(policy),
        stop_reason=f"max_epochs reached ({cfg.max_epochs})",
    )
    select_on = "valid_nll" if valid.n else "train_nll"
    if not valid.n:
        log.warning("empty validation split: early stopping on the training NLL")
    for epoch in range(1, cfg.max_epochs + 1):
        record = _epoch(
            policy,
            optimizer,
            train,
            valid,
            epoch=epoch,
            cfg=cfg,
            seed=seed,
            generator=generator,
            shifts=shifts if cfg.augment and images else None,
            eval_batch=IMAGE_EVAL_BATCH if images else EVAL_BATCH,
        )
        fit.history.append(record)
        if record[select_on] < fit.best_nll:
            fit.best_nll, fit.best_epoch = record[select_on], epoch
            fit.best_state = _state_copy(policy)
        log.info(
            "epoch %d/%d train_nll %.4f valid_nll %.4f (best %.4f @ %d) %.0f samples/s %.2f s",
            epoch,
            cfg.max_epochs,
            record["train_nll"],
            record["valid_nll"],
            fit.best_nll,
            fit.best_epoch,
            record["samples_per_s"],
            record["seconds"],
        )
        if on_epoch is not None:
            on_epoch(dict(record))
        if epoch - fit.best_epoch >= cfg.patience:
            fit.stop_reason = (
                f"patience: no {select_on.split('_')[0]} improvement for {cfg.patience} epochs"
            )
            break
    log.info(
        "BC stopped: %s; best epoch %d (%s %.4f)",
        fit.stop_reason,
        fit.best_epoch,
        select_on,
        fit.best_nll,
    )
    return fit


def _epoch(
    policy: ActorCriticPolicy,
    optimizer: torch.optim.Optimizer,
    train: bc_data.Loader,
    valid: bc_data.Loader,
    *,
    epoch: int,
    cfg: BCConfig,
    seed: int,
    generator: torch.Generator,
    shifts: torch.Generator | None,
    eval_batch: int,
) -> dict[str, float]:
    """One epoch: Adam steps on the training split's batches, shuffled by ``generator`` (and
    shifted by up to ``bc.augment`` pixels drawn from ``shifts``, unless it is None), then the
    validation NLL, ``eval_batch`` rows per pass; returns the epoch's record. A training loss
    that goes non-finite raises :class:`Diverged`."""
    epoch_start = time.perf_counter()
    batches = train.batches(cfg.batch_size, generator)
    if shifts is not None:
        batches = ((random_shift(obs, cfg.augment, shifts), act) for obs, act in batches)
    try:
        train_nll, _ = train_epoch(
            policy, optimizer, batches, ent_coef=cfg.ent_coef, l2_coef=cfg.l2_coef
        )
    except ValueError as err:  # torch: the action distribution's parameters are invalid
        what = f"the policy's action distribution is invalid ({str(err).splitlines()[0]})"
        raise Diverged(what, epoch, seed, cfg) from None
    train_seconds = time.perf_counter() - epoch_start
    valid_nll = evaluate_nll(policy, valid, eval_batch) if valid.n else math.nan
    record = {
        "epoch": epoch,
        "train_nll": train_nll,
        "valid_nll": valid_nll,
        "samples_per_s": train.n / train_seconds,
        "seconds": time.perf_counter() - epoch_start,
    }
    if not math.isfinite(train_nll):
        raise Diverged(f"the training loss (NLL) is {train_nll}", epoch, seed, cfg)
    return record


class Diverged(FloatingPointError):
    """BC's training went non-finite: the message names what, when, and what to change."""

    def __init__(self, what: str, epoch: int, seed: int, cfg: BCConfig) -> None:
        super().__init__(
            f"BC diverged in epoch {epoch} (seed {seed}, bc.learning_rate {cfg.learning_rate}): "
            f"{what}; no clone is written. Lower bc.learning_rate, or check the dataset's "
            "observations and actions"
        )


def train_epoch(
    policy: ActorCriticPolicy,
    optimizer: torch.optim.Optimizer,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    ent_coef: float,
    l2_coef: float,
) -> tuple[float, int]:
    """One pass of Adam steps on :func:`bc_loss` over ``batches``; returns (mean NLL, samples)."""
    policy.train()
    nll_sum, n = None, 0
    for obs, actions in batches:
        loss, nll, _ = bc_loss(policy, obs, actions, ent_coef=ent_coef, l2_coef=l2_coef)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        nll_sum = nll * len(obs) if nll_sum is None else nll_sum + nll * len(obs)
        n += len(obs)
    return (float(nll_sum) / n if n else math.nan), n  # one device sync per epoch


def evaluate_nll(
    policy: ActorCriticPolicy, loader: bc_data.Loader, batch: int = EVAL_BATCH
) -> float:
    """Mean NLL of the loader's actions under the policy (no gradients, eval mode), ``batch``
    rows per forward pass."""
    policy.eval()
    total = torch.zeros((), dtype=torch.float64, device=policy.device)
    with torch.no_grad():
        for obs, actions in loader.batches(batch, None):
            total += -policy.get_distribution(obs).log_prob(actions).double().sum()
    policy.train()
    return float(total) / loader.n


def _state_copy(policy: ActorCriticPolicy) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.state_dict().items()}
