"""Reinforcement learning with PPO in four arms: three use the demonstrations, one does not.

Every arm is stable-baselines3's PPO with the same hyperparameters, budget, env and frozen
observation normalisation (an SB3 ``VecNormalize`` with ``training=False``, the statistics of the
dataset's training split, the clone's); they differ only in where the policy starts and in an
optional guide term (see :func:`build_model`, the whole recipe in one place):

* ``bc``, warm start: PPO starts from the clone's weights (critic warm-up with the actor frozen,
  log-std raised to ``warm_start.log_std``, an optional demonstration term that fades);
* ``residual``: PPO learns a correction added to the frozen clone's action
  (:class:`demo2rl.policy.ResidualPolicy`), starting near zero;
* ``kickstart``: a fresh policy with a fading distillation term toward the clone's actions on
  the policy's own states (:class:`Guide`);
* ``scratch``: a fresh policy, the control.

Runs are resumable: every ``checkpoint_every`` env steps (and on SIGTERM, e.g. a SLURM preemption)
the model and the run's state are saved atomically to a state directory beside the outputs; a
restarted job continues from there and stops at ``total_timesteps``. The state belongs to exactly
one run: the directory records the run's key (a digest of its config, the content of its inputs
and its code), and a job resumes only state with its own key; any other state is discarded, with
a warning naming what changed. A checkpoint holds tensors, counters and JSON, never a pickle
(loaded with ``weights_only=True``); the model itself is always built from the config in force,
so a resumed run cannot pick up another run's hyperparameters.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import CSVOutputFormat, KVWriter, Logger
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from demo2rl import bc, dataset, evaluation, groups, io, policy, seeds, tasks, vec

log = logging.getLogger(__name__)

PREEMPTED_EXIT_CODE = 75
"""Exit status of a job stopped by SIGTERM after saving its checkpoint (EX_TEMPFAIL)."""


@dataclasses.dataclass
class RLResult:
    """What a finished run produced."""

    model: GuidedPPO
    normalizer: policy.ObsNormalizer
    evaluations: list[dict[str, float]]
    timesteps: int
    resumed: int


class Preempted(Exception):
    """The run received SIGTERM; its checkpoint is saved and rerunning the job resumes it."""


# --------------------------------------------------------------------------------------------
# SB3 logger outputs: progress lines in the job's log, and a batched metrics sink (MLflow)


class LogLines(KVWriter):
    """One line per rollout in the job's log: step, fps, return and the losses."""

    KEYS = ("rollout/ep_rew_mean", "time/fps", "train/loss", "train/approx_kl", "eval/return_mean")

    def __init__(self, total_timesteps: int) -> None:
        self.total = total_timesteps

    def write(self, key_values: dict[str, Any], key_excluded: Any, step: int = 0) -> None:
        shown = " ".join(
            f"{k.split('/')[1]}={key_values[k]:.4g}" for k in self.KEYS if k in key_values
        )
        log.info("step %d/%d (%.0f%%) %s", step, self.total, 100 * step / self.total, shown)

    def close(self) -> None:
        pass


class MetricsSink(KVWriter):
    """Sends every rollout's numeric metrics in ONE call of ``log_fn(metrics, step)``."""

    def __init__(self, log_fn: Callable[[dict[str, float], int], None]) -> None:
        self.log_fn = log_fn

    def write(self, key_values: dict[str, Any], key_excluded: Any, step: int = 0) -> None:
        numeric = {
            k: float(v)
            for k, v in key_values.items()
            if isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
        }
        if numeric:
            self.log_fn(numeric, step)

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------------------------
# PPO with a decaying guide term (the bc arm's demonstration term, the kickstart arm's teacher)


@dataclasses.dataclass
class Guide:
    """An auxiliary loss added to PPO's gradient at every optimiser step, with decaying weight:
    ``weight(t) * policy.guide_loss`` (for Box actions the squared distance between the policy's
    mean action and a target action; for Discrete ones the cross-entropy to target action
    probabilities) on a minibatch of states (sampled anew for every step), ``t`` the env steps
    before the rollout the update learns from (so the first update has weight ``coef``).

    Two sources of (state, target) pairs: fixed ``states``/``targets`` (the demonstrations), or a
    ``teacher`` whose :func:`demo2rl.policy.action_targets` on the states of the latest rollout
    are the targets (the policy's own states: kickstarting). The loss involves the mean (or the
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
            return states, policy.action_targets(self.teacher, states)


class GuidedPPO(PPO):
    """SB3's PPO, plus the gradient of a :class:`Guide` in every optimiser step while its weight
    is positive. Without a guide it is exactly SB3's PPO."""

    guide: Guide | None = None

    def train(self) -> None:
        rollout_start = self.num_timesteps - self.n_steps * self.n_envs  # the update's data
        weight = self.guide.weight(rollout_start) if self.guide is not None else 0.0
        if weight <= 0 or not self.policy.action_net.weight.requires_grad:  # (critic warm-up)
            super().train()
            return
        assert self.guide is not None
        states, targets = self.guide.pairs(self)
        losses: list[float] = []

        def add_guide_gradient(*_: Any) -> None:
            rows = torch.randint(len(states), (self.batch_size,), device=states.device)
            loss = policy.guide_loss(self.policy, states[rows], targets[rows])
            (weight * loss).backward()
            losses.append(float(loss.detach()))

        hook = self.policy.optimizer.register_step_pre_hook(add_guide_gradient)
        try:
            super().train()
        finally:
            hook.remove()
        self.logger.record("train/guide_weight", weight)
        self.logger.record("train/guide_loss", float(np.mean(losses)) if losses else float("nan"))


# --------------------------------------------------------------------------------------------
# callbacks: evaluation on held-out episodes, checkpoints, SIGTERM


class Checkpointing(BaseCallback):
    """At each rollout start (after an update): evaluate, checkpoint, honour SIGTERM."""

    def __init__(self, run: _Run) -> None:
        super().__init__()
        self.run = run
        self.stop = False
        self.steps_at_rollout_start = 0

    def _on_rollout_start(self) -> None:
        self.steps_at_rollout_start = self.num_timesteps
        self.run.maybe_evaluate(self.num_timesteps)
        self.run.maybe_checkpoint(self.num_timesteps)

    def _on_step(self) -> bool:
        return not self.stop


@dataclasses.dataclass
class _Run:
    """The mutable state of one training run and its state directory."""

    model: PPO
    state_dir: Path
    cfg: dict[str, Any]
    evaluate: Callable[[], dict[str, float]]
    evaluations: list[dict[str, float]]
    resumed: int
    checkpoint_every: int
    last_eval: int = -1
    last_checkpoint: int = 0

    def maybe_evaluate(self, step: int, force: bool = False) -> None:
        if not force and self.last_eval >= 0 and step - self.last_eval < self.cfg["eval_every"]:
            return
        row = {"step": float(step), **self.evaluate()}
        self.evaluations.append(row)
        self.last_eval = step
        for key, value in row.items():
            if key != "step":
                self.model.logger.record(f"eval/{key}", value)
        log.info("eval at step %d: return %.2f", step, row["return_mean"])

    def maybe_checkpoint(self, step: int, force: bool = False) -> None:
        if force or step - self.last_checkpoint >= self.checkpoint_every:
            self.save(step)

    def save(self, step: int) -> None:
        """Weights then state, each atomically: a kill in between loses nothing that matters."""
        self.model.num_timesteps = step
        save_checkpoint(self.state_dir / CHECKPOINT, self.model)
        state = {"timesteps": step, "evaluations": self.evaluations, "resumed": self.resumed}
        io.write_json(self.state_dir / "state.json", state)
        self.last_checkpoint = step
        log.info("checkpoint at step %d -> %s", step, self.state_dir)


# --------------------------------------------------------------------------------------------
# the state directory: one run's key, its checkpoint (tensors and counters) and its state

CHECKPOINT = "checkpoint.pt"
STATE = "state.json"
KEY = "key.json"


def run_key(parts: Mapping[str, Any]) -> dict[str, Any]:
    """The key of a run: a digest of each part (config, inputs, code) and of all of them.

    ``parts`` must hold everything the run's result depends on, as JSON-able values.
    """
    digests = {name: _digest(value) for name, value in sorted(parts.items())}
    return {"key": _digest(digests), "parts": digests}


LOCK_WAIT_S = 60.0
"""How long a trainer waits for another one to let go of a state directory before giving up
(e.g. a preempted job still writing its checkpoint when its requeued self starts)."""


class StateDirBusy(RuntimeError):
    """Another live trainer holds the state directory."""


@contextlib.contextmanager
def lock_state_dir(state_dir: Path, wait: float | None = None) -> Iterator[None]:
    """Hold an exclusive lock on ``state_dir`` (the file ``<state_dir>.lock`` beside it).

    An OS file lock (``flock``), released by the kernel when its process ends, however it ends:
    a hard-killed trainer never leaves a stale lock, and a live one is never ignored. So a SLURM
    retry or requeue of a job whose first run is still going (a lost node, a slow shutdown)
    waits up to ``wait`` seconds (default :data:`LOCK_WAIT_S`) and then fails, with
    :class:`StateDirBusy` naming the holder, instead of training on the same state. On a shared
    filesystem this relies on its locks reaching every node (NFSv4 and Lustre with ``flock`` do;
    check yours).
    """
    wait = LOCK_WAIT_S if wait is None else wait
    lock_path = state_dir.parent / f"{state_dir.name}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 4096, 0).decode(errors="replace").strip()
                    raise StateDirBusy(
                        f"{state_dir} is in use by another trainer ({holder or 'unknown'}), "
                        f"still after {wait:.0f} s; two runs never share a state directory. "
                        "Wait for that job to end (or cancel it); its lock goes with its process"
                    ) from None
                time.sleep(0.2)
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "slurm_job": os.environ.get("SLURM_JOB_ID"),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def claim_state_dir(state_dir: Path, key: Mapping[str, Any]) -> bool:
    """Make ``state_dir`` this run's: True if it holds state of this very run (resume).

    State of any other run (another key, or none recorded) is deleted, with a warning that names
    the parts of the key that differ; so is a start of this run that never reached a checkpoint.
    The directory then records ``key`` and is empty otherwise. (A finished run's state stays: a
    forced rerun of the same run resumes it at its end and gives the same result.)
    """
    key_file = state_dir / KEY
    recorded = json.loads(key_file.read_text()) if key_file.is_file() else None
    same_run = recorded is not None and recorded.get("key") == key["key"]
    if same_run and (state_dir / STATE).is_file() and (state_dir / CHECKPOINT).is_file():
        return True
    if state_dir.exists() and any(state_dir.iterdir()):
        if same_run:
            why = "it holds no checkpoint yet"
        elif recorded is None:
            why = "it records no run key"
        else:
            old, new = recorded.get("parts", {}), key["parts"]
            changed = sorted(p for p in old.keys() | new.keys() if old.get(p) != new.get(p))
            why = f"its run key differs in: {', '.join(changed) or 'the key itself'}"
        log.warning("discarding the state in %s: %s; training from the start", state_dir, why)
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    io.write_json(key_file, key)
    return False


def save_checkpoint(path: Path, model: PPO) -> None:
    """The model's weights, optimizer state and counters: tensors and numbers, no pickle."""
    ckpt = {
        "policy": model.policy.state_dict(),
        "optimizer": model.policy.optimizer.state_dict(),
        "num_timesteps": int(model.num_timesteps),
        "n_updates": int(model._n_updates),
    }
    with io.atomic_path(path) as tmp:
        torch.save(ckpt, tmp)


def load_checkpoint(path: Path, model: PPO) -> None:
    """Restore :func:`save_checkpoint`'s weights and counters into ``model`` (built from the
    config in force); ``weights_only=True``, so a crafted file cannot run code."""
    try:
        ckpt = torch.load(path, map_location=model.device, weights_only=True)
        model.policy.load_state_dict(ckpt["policy"], strict=True)
        model.policy.optimizer.load_state_dict(ckpt["optimizer"])
        model.num_timesteps = int(ckpt["num_timesteps"])
        model._n_updates = int(ckpt["n_updates"])
    except Exception as err:  # unpickling refused, truncated file, foreign shapes
        raise policy.CheckpointError(
            path, f"cannot resume from it ({type(err).__name__}: {err})"
        ) from err


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# the run


def make_training_env(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    rl_cfg: Mapping[str, Any],
    normalizer: policy.ObsNormalizer,
    n_workers: int,
) -> VecNormalize:
    """The RL vector env: n_envs envs (native, dummy or subproc), frozen obs normalisation."""
    _, action_space = tasks.spaces(env_id, env_kwargs)
    wrap = _rescale_wrapper if policy.needs_rescale(action_space) else None
    venv: VecEnv = vec.make_vec_env(
        env_id, env_kwargs, rl_cfg["n_envs"], rl_cfg["vec_env"], n_workers=n_workers, wrap=wrap
    )
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


def _rescale_wrapper(env: gym.Env) -> gym.Env:
    return gym.wrappers.RescaleAction(env, np.float32(-1.0), np.float32(1.0))


# --------------------------------------------------------------------------------------------
# the arms: how a run uses the demonstrations (the recipe, in the order it happens)

ARMS = groups.ARMS
"""``bc``, ``residual``, ``kickstart`` (demo-guided) and ``scratch`` (the control)."""


def build_model(
    init: str,
    env: VecEnv,
    *,
    policy_cfg: Mapping[str, Any],
    rl_cfg: Mapping[str, Any],
    clone: ActorCriticPolicy | None,
    demos: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    seed: int,
    device: torch.device | str = "cpu",
) -> tuple[GuidedPPO, int]:
    """The PPO model of an arm, and the env steps of its critic warm-up (actor frozen).

    Every arm is SB3's PPO with ``rl.ppo``, the same budget and env; they differ in the policy
    they start from and in a guide term (:class:`Guide`):

    * ``scratch``: a freshly initialised ``MlpPolicy`` (``policy``; exploration from
      ``policy.log_std_init``). The control.
    * ``bc`` (warm start): the clone's weights, loaded strictly; its log-std set to
      ``warm_start.log_std`` (the clone's own is tiny); then ``warm_start.critic_warmup_steps``
      env steps in which only the critic learns, on the clone's own rollouts; optionally a
      demonstration guide (``bc_coef`` decaying over ``bc_decay``: DAPG-like).
    * ``residual``: a fresh :class:`demo2rl.policy.ResidualPolicy` whose action is the frozen
      clone's mean plus a correction that starts near 0 (so the arm starts at the clone's
      return) and explores from ``residual.log_std``.
    * ``kickstart``: a fresh ``MlpPolicy`` with a teacher guide: the squared distance of its mean
      action to the clone's on its own rollout states, weight ``kickstart.coef`` decaying to 0
      over ``kickstart.decay`` of the budget (Schmitt et al. 2018).

    ``clone`` (the behaviour clone, in normalised observations) is needed by every arm but
    scratch; ``demos`` returns the demonstrations' normalised states and actions when called.
    """
    if init not in ARMS:
        raise ValueError(f"init must be one of {', '.join(ARMS)}, got {init!r}")
    if init != "scratch" and clone is None:
        raise ValueError(f"the {init} arm needs a BC checkpoint")
    total = int(rl_cfg["total_timesteps"])
    kwargs = policy.sb3_policy_kwargs(policy_cfg)
    policy_class: str | type[ActorCriticPolicy] = "MlpPolicy"
    if init == "residual":
        policy_class, kwargs["base_spec"] = policy.ResidualPolicy, policy.actor_spec(clone)
        if rl_cfg["residual"]["log_std"] is not None:
            kwargs["log_std_init"] = float(rl_cfg["residual"]["log_std"])
    model = GuidedPPO(
        policy_class,
        env,
        policy_kwargs=kwargs,
        seed=seed,
        device=device,
        verbose=0,
        **rl_cfg["ppo"],
    )
    warmup = 0
    if init == "bc":
        warm = rl_cfg["warm_start"]
        model.policy.load_state_dict(clone.state_dict(), strict=True)
        if warm["log_std"] is not None and hasattr(model.policy, "log_std"):  # Gaussian only
            with torch.no_grad():
                model.policy.log_std.fill_(float(warm["log_std"]))
        warmup = int(warm["critic_warmup_steps"])
        if warm["bc_coef"] > 0:
            states, actions = demos()
            model.guide = Guide(warm["bc_coef"], warm["bc_decay"], total, states, actions)
    elif init == "residual":
        model.policy.set_base(clone)
    elif init == "kickstart":
        teacher = clone.to(model.device).requires_grad_(False)
        kick = rl_cfg["kickstart"]
        model.guide = Guide(kick["coef"], kick["decay"], total, teacher=teacher)
    return model, warmup


def dataset_normalizer(demos: dataset.Demos, clip_obs: float) -> policy.ObsNormalizer:
    """The frozen normalisation of the training split (what BC fits), from the dataset stats."""
    std = demos.stats["obs_std"]
    return policy.ObsNormalizer(demos.stats["obs_mean"], std * std, clip_obs, bc.OBS_EPSILON)


def train_rl(
    *,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    init: str,
    demos_path: str | Path,
    bc_checkpoint: str | Path | None,
    policy_cfg: Mapping[str, Any],
    rl_cfg: Mapping[str, Any],
    base_seed: int,
    run_seed: int,
    state_dir: str | Path,
    key: Mapping[str, Any],
    eval_episodes: int,
    clip_obs: float = 10.0,
    threads: int = 1,
    eval_envs: int = 16,
    checkpoint_every: int = 50_000,
    log_metrics: Callable[[dict[str, float], int], None] | None = None,
) -> RLResult:
    """Train one PPO run of an arm (``init``, see :func:`build_model`), resuming from
    ``state_dir``.

    The arms that use the clone take its observation normalisation from its checkpoint; the
    scratch arm computes the same from the dataset's statistics with ``clip_obs``
    (``bc.clip_obs`` in the config). ``key`` (see :func:`run_key`) names the run: only state
    recorded under the same key resumes. Every ``rl_cfg["eval_every"]`` env steps the policy
    drives ``eval_episodes`` held-out episodes. ``threads`` (subproc workers), ``eval_envs`` and
    ``checkpoint_every`` change speed and robustness, never the result of an uninterrupted run.

    Raises :class:`Preempted` after checkpointing when SIGTERM arrives.
    """
    if init not in ARMS:
        raise ValueError(f"init must be one of {', '.join(ARMS)}, got {init!r}")
    torch.set_num_threads(1)  # small MLPs: one thread is fastest and keeps results exact
    state_dir = Path(state_dir)
    with lock_state_dir(state_dir):  # held until the run ends: no two trainers share it
        resume = claim_state_dir(state_dir, key)
        demos = dataset.read(demos_path)
        obs_space, act_space = tasks.spaces(env_id, env_kwargs)
        bc.check_dataset(demos, obs_space, act_space, env_id)
        clone = None
        if init == "scratch":
            normalizer = dataset_normalizer(demos, clip_obs=clip_obs)
        elif bc_checkpoint is None:
            raise ValueError(f"the {init} arm needs a BC checkpoint")
        else:  # the warm start loads the clone into its own network: that must be the config's
            clone, normalizer, ckpt = policy.load_checkpoint(
                bc_checkpoint, obs_space, act_space, policy_cfg if init == "bc" else None
            )
            policy.check_dataset_hash(bc_checkpoint, ckpt, demos_path, demos.attrs["content_hash"])
        env = make_training_env(env_id, env_kwargs, rl_cfg, normalizer, n_workers=threads)
        try:  # the env (worker processes with subproc) must not outlive a failed start
            seed = seeds.rl_seed(base_seed, run_seed)
            device = policy.resolve_device(rl_cfg["device"])
            model, warmup = build_model(
                init,
                env,
                policy_cfg=policy_cfg,
                rl_cfg=rl_cfg,
                clone=clone,
                demos=lambda: _demo_tensors(demos, normalizer, act_space, device),
                seed=seed,
                device=device,
            )
            resumed, evaluations = 0, []
            if resume:
                state = json.loads((state_dir / STATE).read_text())
                load_checkpoint(state_dir / CHECKPOINT, model)
                resumed = state["resumed"] + 1
                # fresh draws, still in the RL seed block
                model.set_random_seed(seed + resumed * rl_cfg["n_envs"])
                evaluations = state["evaluations"]
                log.info("resuming from step %d (resume #%d)", model.num_timesteps, resumed)
            total = int(rl_cfg["total_timesteps"])
        except BaseException:
            env.close()
            raise
        eval_seeds = evaluation.heldout_seeds(base_seed, eval_episodes)
        act_space_env = act_space

        def evaluate() -> dict[str, float]:
            actor = policy.make_actor(model.policy, normalizer, act_space_env)
            result = evaluation.evaluate(env_id, env_kwargs, actor, eval_seeds, n_envs=eval_envs)
            return evaluation.summary(result)

        run = _Run(model, state_dir, dict(rl_cfg), evaluate, evaluations, resumed, checkpoint_every)
        run.last_checkpoint = model.num_timesteps
        if evaluations:
            run.last_eval = int(evaluations[-1]["step"])
        segment = state_dir / f"progress-{model.num_timesteps:09d}.csv"
        outputs: list[KVWriter] = [LogLines(total), CSVOutputFormat(str(segment))]
        if log_metrics is not None:
            outputs.append(MetricsSink(log_metrics))
        model.set_logger(Logger(folder=None, output_formats=outputs))

        callback = Checkpointing(run)
        previous = signal.signal(signal.SIGTERM, lambda *_: setattr(callback, "stop", True))
        start = time.perf_counter()
        try:
            if model.num_timesteps < warmup:
                log.info("critic warm-up: actor frozen for %d env steps", warmup)
                with _frozen(bc.actor_parameters(model.policy)):
                    model.learn(
                        warmup - model.num_timesteps, callback=callback, reset_num_timesteps=False
                    )
            if not callback.stop and model.num_timesteps < total:
                model.learn(
                    total - model.num_timesteps, callback=callback, reset_num_timesteps=False
                )
            if callback.stop:
                run.save(callback.steps_at_rollout_start)
                raise Preempted(f"SIGTERM: checkpoint at step {callback.steps_at_rollout_start}")
        finally:
            signal.signal(signal.SIGTERM, previous)
            env.close()
        run.maybe_evaluate(model.num_timesteps, force=run.last_eval != model.num_timesteps)
        run.save(model.num_timesteps)
        log.info("trained %d env steps in %.1f s", model.num_timesteps, time.perf_counter() - start)
        return RLResult(model, normalizer, run.evaluations, model.num_timesteps, resumed)


def progress_table(state_dir: str | Path) -> pd.DataFrame:
    """The SB3 progress rows of every segment of the run (resumes included), in step order, with
    the columns in a fixed order (env steps first, then by name).

    A segment's rows past the step the next segment resumed from belong to work lost in a hard
    kill (after the last checkpoint) and are left out, so no step appears twice."""
    segments = sorted(Path(state_dir).glob("progress-*.csv"))
    starts = [int(p.stem.partition("-")[2]) for p in segments]
    parts = []
    for path, end in zip(segments, [*starts[1:], None], strict=True):
        if not path.stat().st_size:
            continue
        part = pd.read_csv(path)
        if end is not None:  # rows past the checkpoint the next segment resumed from were lost
            part = part[part["time/total_timesteps"] <= end]
        parts.append(part)
    if not parts:
        return pd.DataFrame()
    table = pd.concat(parts, ignore_index=True)
    table = table.sort_values("time/total_timesteps", kind="stable").reset_index(drop=True)
    # SB3 orders new columns by set difference, which differs from process to process
    return _in_column_order(table, "time/total_timesteps")


def evaluations_table(evaluations: list[dict[str, float]]) -> pd.DataFrame:
    """The held-out evaluations of a run, one row per evaluation point, ``step`` first and the
    rest by name (the rows of a resumed run come back from state.json with sorted keys)."""
    return _in_column_order(pd.DataFrame(evaluations), "step")


def _in_column_order(table: pd.DataFrame, first: str) -> pd.DataFrame:
    return table[[first, *sorted(c for c in table.columns if c != first)]]


def _demo_tensors(
    demos: dataset.Demos,
    normalizer: policy.ObsNormalizer,
    action_space: gym.Space,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    rows = demos.step_rows(demos.split["train"])
    obs = normalizer(demos.steps["observations"][rows])
    actions = torch.as_tensor(policy.scale_actions(demos.steps["actions"][rows], action_space))
    targets = policy.demo_targets(actions, policy.policy_action_space(action_space))
    return torch.as_tensor(obs, device=device), targets.to(device)


class _frozen:
    """Context manager: the given parameters get no gradient inside it."""

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        self.params = params

    def __enter__(self) -> None:
        for p in self.params:
            p.requires_grad_(False)

    def __exit__(self, *exc: object) -> None:
        for p in self.params:
            p.requires_grad_(True)
