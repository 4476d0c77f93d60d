"""One RL training run around the recipe of :mod:`demo2rl.rl.recipe`: inputs, resume, the
evaluation and checkpoint schedule, SIGTERM, logging, and the final save.

Runs are resumable: every ``checkpoint_every`` env steps (and on SIGTERM, e.g. a SLURM
preemption) the model and the run's state are saved atomically to a state directory beside the
outputs (:mod:`demo2rl.rl.state`); a restarted job continues from there and stops at its
budget (:attr:`demo2rl.config.RLConfig.budget`). An uninterrupted run and a resumed one evaluate
and checkpoint at the same steps.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import CSVOutputFormat, KVWriter, Logger
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.vec_env import VecEnv

from demo2rl import arms, io, seeds, tasks
from demo2rl.demos import dataset
from demo2rl.learning import acting, checkpoints, evaluation, policy
from demo2rl.observations import ObservationKind
from demo2rl.rl import recipe, resume_point, state
from demo2rl.rl.progress import LogLines, MetricsSink, training_cpu_seconds
from demo2rl.specs.train_rl import RLJob

log = logging.getLogger(__package__)  # "demo2rl.rl", as in every job log before the split

PREEMPTED_EXIT_CODE = 75
"""Exit status of a job stopped by SIGTERM after saving its checkpoint (EX_TEMPFAIL)."""


@dataclasses.dataclass
class RLResult:
    """What a finished run produced."""

    model: recipe.GuidedPPO | recipe.DemoSAC
    normalizer: policy.ObsTransform
    evaluations: list[dict[str, float]]
    timesteps: int
    resumed: int
    observation_space: gym.Space
    action_space: gym.Space


class Preempted(Exception):
    """The run received SIGTERM; its checkpoint is saved and rerunning the job resumes it."""

    exit_code = PREEMPTED_EXIT_CODE
    """The status the job exits with (:func:`demo2rl.workflow.runner.run_rule`)."""


def train_rl(
    job: RLJob,
    *,
    key: dict[str, Any],
    log_metrics: Callable[[dict[str, float], int], None] | None = None,
    eval_seeds: Sequence[int] | None = None,
) -> RLResult:
    """Train one run of ``job.arm`` (PPO or SAC) (see :mod:`demo2rl.rl.recipe`), resuming from
    ``job.state_dir``.

    The arms that use the clone take its observation normalisation from its checkpoint; the
    others build the same from the dataset's statistics with ``job.clip_obs``. ``key`` (see
    :func:`demo2rl.rl.state.run_key`) names the run: only state recorded under the same key
    resumes. Every ``rl.eval_every`` (``rl.sac.eval_every``) env steps the policy drives
    ``job.eval_episodes`` held-out episodes (``eval_seeds`` instead: benchmarks/arms.py chooses
    settings on tuning episodes, :func:`demo2rl.learning.evaluation.tuning_seeds`). The job's
    speed settings (subproc workers, evaluation envs, checkpoint spacing) change speed and
    robustness, never the result of an uninterrupted run.
    ``log_metrics(metrics, step)`` receives every rollout's metrics.

    Raises :class:`Preempted` after checkpointing when SIGTERM arrives.
    """
    arm, rl_cfg = arms.get(job.arm), job.rl
    torch.set_num_threads(1)  # small MLPs: one thread is fastest and keeps results exact
    state_dir = Path(job.state_dir)
    with state.lock_state_dir(state_dir):  # held until the run ends: no two trainers share it
        resume = state.claim_state_dir(state_dir, key)
        inputs = _read_inputs(job)
        env = recipe.make_training_env(
            job.task, rl_cfg, inputs.normalizer, inputs.act_space, n_workers=job.threads
        )
        try:  # the env (worker processes with subproc) must not outlive a failed start
            begin = _build_or_resume(job, arm, inputs, env, state_dir if resume else None)
        except BaseException:
            env.close()
            raise
        model = begin.model
        schedule = Schedule(
            model,
            state_dir,
            _evaluator(job, model, inputs, eval_seeds),
            begin.evaluations,
            begin.resumed,
            rl_cfg.evaluate_every,
            job.checkpoint_every,
        )
        segment = _set_logger(model, state_dir, rl_cfg.budget, log_metrics, begin.at)
        start = time.perf_counter()
        _learn(job, arm, model, env, schedule, segment)
        _finish(model, schedule)
        log.info("trained %d env steps in %.1f s", model.num_timesteps, time.perf_counter() - start)
        return RLResult(
            model,
            inputs.normalizer,
            schedule.evaluations,
            model.num_timesteps,
            begin.resumed,
            inputs.obs_space,
            inputs.act_space,
        )


@dataclasses.dataclass
class _Inputs:
    """What a run reads before it builds its model: the task's spaces, the observation
    normaliser and, for an arm that uses it, the clone."""

    obs_space: gym.Space
    act_space: gym.Space
    normalizer: policy.ObsTransform
    clone: BasePolicy | None


def _read_inputs(job: RLJob) -> _Inputs:
    """The task's spaces, checked against the dataset, and the normaliser: the clone's (with the
    clone, checked to be trained on this dataset) or else one from the dataset's statistics."""
    task = job.task
    demos = dataset.read_tables(job.demos)  # no frames: only a guide needs the steps
    obs_space, act_space = tasks.spaces(task.env_id, task.env_kwargs, task.frame_stack)
    dataset.check_dataset(demos, obs_space, act_space, task.env_id)
    if job.clone is None:  # (RLJob checks that the arms that need it are given it)
        normalizer = policy.obs_transform(obs_space, demos.stats, job.clip_obs)
        return _Inputs(obs_space, act_space, normalizer, clone=None)
    # the clone must be the config's network: BC trains the same `policy` slice, a warm start
    # loads it into its own, the residual copies its actor into its base
    clone, normalizer, ckpt = checkpoints.load_checkpoint(
        job.clone, obs_space, act_space, job.policy
    )
    checkpoints.check_dataset_hash(job.clone, ckpt, job.demos, demos.attrs["content_hash"])
    return _Inputs(obs_space, act_space, normalizer, clone)


@dataclasses.dataclass
class _Beginning:
    """The model a run trains and where it begins: step 0, or the checkpoint it resumes."""

    model: recipe.GuidedPPO | recipe.DemoSAC
    resumed: int
    """How many times the run has resumed, this time included (0 for a fresh run)."""
    evaluations: list[dict[str, float]]
    """The evaluations made before the checkpoint (none for a fresh run)."""
    at: resume_point.ResumePoint | None
    """The checkpoint's position (None for a fresh run)."""


def _build_or_resume(
    job: RLJob, arm: arms.Arm, inputs: _Inputs, env: VecEnv, resume_from: Path | None
) -> _Beginning:
    """The arm's model on ``env``, seeded for the run; with ``resume_from``, restored to the
    checkpoint saved there. An env that cannot restore its state is reseeded instead (new
    episodes), with a warning that the run now differs from an uninterrupted one."""
    rl_cfg, normalizer, act_space = job.rl, inputs.normalizer, inputs.act_space
    seed = seeds.rl_seed(job.seed, job.run_seed)
    device = policy.resolve_device(
        rl_cfg.device, cuda_pays=ObservationKind.of(inputs.obs_space).image
    )
    model = recipe.build_model(
        recipe.Start(
            arm=arm,
            env=env,
            policy_cfg=job.policy,
            rl_cfg=rl_cfg,
            clone=inputs.clone,
            demos=lambda: recipe.demo_tensors(
                dataset.read(job.demos), normalizer, act_space, device
            ),
            transitions=lambda n_steps, gamma: recipe.demo_transitions(
                dataset.read(job.demos), act_space, n_steps, gamma
            ),
            seed=seed,
            device=device,
        )
    )
    if resume_from is None:
        return _Beginning(model, resumed=0, evaluations=[], at=None)
    saved, at = state.load_state(resume_from / state.CHECKPOINT, model)
    resumed = saved["resumed"] + 1
    if not (at.env_saved and resume_point.env_is_stateful(env)):
        env.seed(seed + resumed * rl_cfg.envs)  # new episodes, in the RL seed block
        log.warning(
            "%s has no state_dict()/load_state_dict(): resuming at step %d with every "
            "env reset (new episodes); weights, optimizer and random streams are the "
            "checkpoint's, but from here on the run differs from an uninterrupted one",
            type(env.unwrapped).__name__,
            at.timesteps,
        )
    resume_point.restore(model, at)
    log.info("resuming from step %d (resume #%d)", model.num_timesteps, resumed)
    return _Beginning(model, resumed, saved["evaluations"], at)


def _evaluator(
    job: RLJob,
    model: recipe.GuidedPPO | recipe.DemoSAC,
    inputs: _Inputs,
    eval_seeds: Sequence[int] | None,
) -> Callable[[], dict[str, float]]:
    """The run's held-out evaluation of the model's current policy: its metrics on
    ``eval_seeds``, by default the job's held-out episodes."""
    if eval_seeds is None:
        eval_seeds = evaluation.heldout_seeds(job.seed, job.eval_episodes)

    def evaluate() -> dict[str, float]:
        actor = acting.make_actor(model.policy, inputs.normalizer, inputs.act_space)
        result = evaluation.evaluate(job.task, actor, eval_seeds, n_envs=job.eval_envs)
        return result.info_means()

    return evaluate


def _set_logger(
    model: recipe.GuidedPPO | recipe.DemoSAC,
    state_dir: Path,
    total: int,
    log_metrics: Callable[[dict[str, float], int], None] | None,
    at: resume_point.ResumePoint | None,
) -> Path:
    """Give the model its progress outputs: the job log's lines, a progress segment in
    ``state_dir`` from the model's step on, and ``log_metrics``; a resumed run (``at``) gets
    back what the killed run had logged for its next row. Returns the segment's path."""
    segment = state_dir / f"progress-{model.num_timesteps:09d}.csv"
    outputs: list[KVWriter] = [LogLines(total), CSVOutputFormat(str(segment))]
    if log_metrics is not None:
        outputs.append(MetricsSink(log_metrics))
    model.set_logger(Logger(folder=None, output_formats=outputs))
    if at is not None:  # what the killed run had logged for its next progress row
        resume_point.restore_log(model.logger, at)
    return segment


def _learn(
    job: RLJob,
    arm: arms.Arm,
    model: recipe.GuidedPPO | recipe.DemoSAC,
    env: VecEnv,
    schedule: Schedule,
    segment: Path,
) -> None:
    """Train the model up to the run's budget on ``schedule``, then close ``env``.

    SIGTERM stops it at the next rollout start, which is checkpointed, and raises
    :class:`Preempted`; SIGTERM is ignored from then on. A full disk (the progress rows are
    appended to ``segment``) raises :class:`demo2rl.io.DiskFull`, and a non-finite value
    :class:`recipe.NonFiniteValue` naming the arm, seed and step and the checkpoint that stays.
    """
    callback = OnRolloutStart(schedule)
    previous = signal.signal(signal.SIGTERM, lambda *_: setattr(callback, "stop", True))
    try:
        _learn_to_budget(model, schedule, callback, job.rl.budget)
    except OSError as err:  # SB3 appends the progress rows to the segment in place
        full = None if isinstance(err, io.DiskFull) else io.as_disk_full(err, segment)
        if full is None:
            raise
        raise full from err
    except recipe.NonFiniteValue as err:
        last = schedule.last_checkpoint
        raise recipe.NonFiniteValue(
            f"{arm.name} arm, seed {job.run_seed}, env step {model.num_timesteps}: {err}. "
            f"No policy written; the last checkpoint (step {last}) in {schedule.state_dir} "
            "stays resumable"
        ) from None
    finally:
        # a preempted run is on its way out (checkpoint saved, then its job's tracking
        # flushed): more SIGTERMs (SLURM signals every process of the job step, Snakemake
        # passes its own on) must not kill it before it exits with PREEMPTED_EXIT_CODE
        signal.signal(signal.SIGTERM, signal.SIG_IGN if callback.stop else previous)
        env.close()


def _learn_to_budget(
    model: recipe.GuidedPPO | recipe.DemoSAC,
    schedule: Schedule,
    callback: OnRolloutStart,
    total: int,
) -> None:
    """SB3's ``learn`` from the model's step to ``total``, ``callback`` evaluating and
    checkpointing on ``schedule``; if SIGTERM stopped it, the checkpoint of the last rollout
    start and :class:`Preempted`."""
    if getattr(model, "critic_warmup", 0) > model.num_timesteps:
        log.info("critic warm-up: actor frozen for %d env steps", model.critic_warmup)
    if model.num_timesteps < total:
        try:
            model.learn(
                total - model.num_timesteps,
                callback=callback,
                reset_num_timesteps=False,
                # an off-policy run's rows: every LOG_EVERY steps (OnRolloutStart), not
                # SB3's every few episodes (several rows in one step when envs end alike)
                log_interval=None if schedule.off_policy else 1,
            )
        except StoppedAtRolloutStart:
            pass  # (an off-policy run's checkpoint is saved)
    if callback.stop:
        step = schedule.save_last_rollout_start()
        raise Preempted(f"SIGTERM: checkpoint at step {step}")


def _finish(model: recipe.GuidedPPO | recipe.DemoSAC, schedule: Schedule) -> None:
    """The end of a run at its budget: the final evaluation (unless one was made at this step),
    an off-policy run's last progress row, the final checkpoint, and the progress segment
    closed."""
    end = model.num_timesteps
    schedule.maybe_evaluate(end, force=schedule.last_eval != end)
    if schedule.off_policy and schedule.last_dump != end:
        schedule.dump(end)
    schedule.save(resume_point.capture(model))
    model.logger.close()  # the progress segment's file


class StoppedAtRolloutStart(Exception):
    """An off-policy run stopped by SIGTERM at a rollout start, its checkpoint saved."""


class OnRolloutStart(BaseCallback):
    """At each rollout start (after an update): check the update's losses are finite (a PPO
    update's weights were checked at its end); evaluate and checkpoint when due.

    SIGTERM: PPO's rollout (hundreds of env steps) stops at the next env step, and the run saves
    the state of the rollout start before it (the weights are unchanged since). An off-policy
    run's rollout is one vector step, followed by its update: it stops at the next rollout
    start, saving that (SB3 would drop the step it stops in, its transition never stored)."""

    def __init__(self, schedule: Schedule) -> None:
        super().__init__()
        self.schedule = schedule
        self.stop = False

    def _on_rollout_start(self) -> None:
        check_update(self.model)
        if not self.schedule.off_policy:  # (an off-policy run's rows record it as they are dumped)
            self.model.logger.record("time/cpu_s", self.schedule.cpu_seconds())
        self.schedule.maybe_evaluate(self.num_timesteps)
        self.schedule.maybe_dump(self.num_timesteps)
        self.schedule.at_rollout_start()
        if self.stop and self.schedule.off_policy:
            raise StoppedAtRolloutStart

    def _on_step(self) -> bool:
        return self.schedule.off_policy or not self.stop


LOSSES = (
    *("loss", "policy_gradient_loss", "value_loss", "entropy_loss", "approx_kl", "guide_loss"),
    *("actor_loss", "critic_loss", "ent_coef_loss"),
)
"""The update's logged losses (PPO's, SAC's) that must be finite (not explained_variance: NaN
when every return is the same)."""


def check_update(model: recipe.GuidedPPO | recipe.DemoSAC) -> None:
    """Raise :class:`recipe.NonFiniteValue` if the last update logged a non-finite loss (its
    weights were checked at the update's end: :meth:`recipe.GuidedPPO.train`)."""
    logged = model.logger.name_to_value
    bad = [f"train/{k}" for k in LOSSES if not np.isfinite(logged.get(f"train/{k}", 0.0))]
    if bad:
        raise recipe.NonFiniteValue(
            f"non-finite {', '.join(bad)} in the update before this rollout"
        )


LOG_EVERY = 2000
"""Env steps between an off-policy run's progress rows (PPO's: one per rollout)."""


class Schedule:
    """When a run evaluates (every ``eval_every`` env steps, and at the end), checkpoints
    (every ``checkpoint_every``) and, off-policy, writes a progress row (every
    :data:`LOG_EVERY`), counted from step 0 across resumes; and the saving itself."""

    def __init__(
        self,
        model: recipe.GuidedPPO | recipe.DemoSAC,
        state_dir: Path,
        evaluate: Callable[[], dict[str, float]],
        evaluations: list[dict[str, float]],
        resumed: int,
        eval_every: int,
        checkpoint_every: int,
    ) -> None:
        self.model, self.state_dir, self.evaluate = model, state_dir, evaluate
        self.evaluations, self.resumed = evaluations, resumed
        self.eval_every, self.checkpoint_every = eval_every, checkpoint_every
        self.last_eval = int(evaluations[-1]["step"]) if evaluations else -1
        self.last_checkpoint = model.num_timesteps
        self.rollout_start: resume_point.ResumePoint | None = None
        self.off_policy = isinstance(model, OffPolicyAlgorithm)
        self.last_dump = model.num_timesteps
        self.cpu_start = training_cpu_seconds()

    def cpu_seconds(self) -> float:
        """CPU seconds of the training since the run (or its resume) started: this process's
        and its worker processes' (:func:`training_cpu_seconds`); each progress row's
        ``time/cpu_s``, which restarts at a resume as SB3's ``time/time_elapsed`` does."""
        return training_cpu_seconds() - self.cpu_start

    def maybe_dump(self, step: int) -> None:
        """An off-policy run's progress row, when due."""
        if self.off_policy and step // LOG_EVERY > self.last_dump // LOG_EVERY:
            self.dump(step)

    def dump(self, step: int) -> None:
        self.model.logger.record("time/cpu_s", self.cpu_seconds())
        compiling = getattr(self.model, "compile_cpu_s", None)
        if compiling is not None:  # (of those, the SAC update's compile: FastSAC.compile_cpu_s)
            self.model.logger.record("time/compile_cpu_s", compiling)
        self.model.dump_logs()
        self.last_dump = step

    def maybe_evaluate(self, step: int, force: bool = False) -> None:
        if not force and self.last_eval >= 0 and step - self.last_eval < self.eval_every:
            return
        row = {"step": float(step), **self.evaluate()}
        self.evaluations.append(row)
        self.last_eval = step
        for key, value in row.items():
            if key != "step":
                self.model.logger.record(f"eval/{key}", value)
        log.info("eval at step %d: return %.2f", step, row["return_mean"])

    def at_rollout_start(self) -> None:
        """Note where the run stands (what a SIGTERM during PPO's rollout saves); checkpoint it
        when due. (An off-policy rollout is a single vector step: its run takes a position only
        to save it, at a due checkpoint or a SIGTERM.)"""
        due = self.model.num_timesteps - self.last_checkpoint >= self.checkpoint_every
        if self.off_policy and not due:
            self.rollout_start = None
            return
        self.rollout_start = resume_point.capture(self.model)
        if due:
            self.save(self.rollout_start)

    def save_last_rollout_start(self) -> int:
        """Checkpoint the last rollout start (weights unchanged since: no update in between);
        returns its step."""
        at = self.rollout_start or resume_point.capture(self.model)
        self.save(at)
        return at.timesteps

    def save(self, at: resume_point.ResumePoint) -> None:
        """The checkpoint of position ``at`` (the weights are the model's now), atomically."""
        run = {"evaluations": self.evaluations, "resumed": self.resumed}
        state.save_state(self.state_dir / state.CHECKPOINT, self.model, run, at)
        self.last_checkpoint = at.timesteps
        log.info("checkpoint at step %d -> %s", at.timesteps, self.state_dir)
