"""Vectorised environments for RL: the task's native batched VecEnv, SB3's DummyVecEnv, or a pool
of worker processes for expensive simulators.

The number of envs is a hyperparameter (it changes results); the number of worker processes is a
runtime setting (it does not). ``subproc`` therefore runs ``n_envs`` envs on ``n_workers``
processes, each worker an SB3 ``DummyVecEnv`` of a contiguous chunk: the envs, their seeds and
their auto-resets are exactly those of one ``DummyVecEnv`` of all of them.

With a ``timeout_s`` (``task.timeout_s``), a reset or step of the batch that takes longer raises
:class:`demo2rl.tasks.deadline.UserCodeTimeout` naming the env, the call and the envs: in this
process by ``SIGALRM`` (:class:`TimedVecEnv`), in worker processes by waiting on their pipes with
a timeout (:class:`WorkerPoolVecEnv`, which then stops its workers).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import CloudpickleWrapper

from demo2rl import tasks
from demo2rl.learning import vec_env_choice
from demo2rl.tasks import deadline


def make_vec_env(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    n_envs: int,
    kind: str,
    *,
    n_workers: int = 1,
    wrap: Callable[[gym.Env], gym.Env] | None = None,
    frame_stack: int = 1,
    max_episode_steps: int | None = None,
    timeout_s: float | None = None,
) -> VecEnv:
    """``n_envs`` envs of the task as an SB3 VecEnv of the given kind (see the module doc; ``auto``
    is resolved by :func:`demo2rl.learning.vec_env_choice.resolve_vec_env`).

    ``wrap`` is applied to each single env (dummy, subproc) after stacking ``frame_stack``
    observations (:func:`demo2rl.tasks.stack_frames`); a native VecEnv gets neither, so a task
    whose envs need wrapping (e.g. action rescaling) or stacking must use dummy or subproc.
    Single envs' episodes are cut at ``max_episode_steps`` (``task.max_episode_steps``) when the
    task sets no limit of its own (:func:`demo2rl.tasks.make_env`); a native VecEnv must end its
    episodes itself. ``timeout_s`` (``task.timeout_s``; None: no limit) limits each reset and
    step of the batch (see the module doc).
    """
    kind = vec_env_choice.resolve_vec_env(kind, env_id, frame_stack)
    if kind == "native":
        native = vec_env_choice.native_vec_env(env_id)
        if native is None:
            raise ValueError(f"rl.vec_env 'native': {env_id!r} has no native VecEnv; use auto")
        if wrap is not None or frame_stack > 1:
            raise ValueError(f"rl.vec_env 'native': {env_id!r} needs wrapped envs; use dummy")
        venv = tasks.resolve_entry_point(native)(n_envs, **dict(env_kwargs))
        return TimedVecEnv(venv, env_id, timeout_s) if timeout_s is not None else venv
    fns = [
        _EnvFactory(env_id, dict(env_kwargs), wrap, frame_stack, max_episode_steps)
        for _ in range(n_envs)
    ]
    if kind == "dummy":
        dummy = DummyVecEnv(fns)
        return TimedVecEnv(dummy, env_id, timeout_s) if timeout_s is not None else dummy
    # subproc (resolve_vec_env refused any other kind)
    return WorkerPoolVecEnv(fns, n_workers, env_id=env_id, timeout_s=timeout_s)


def _describe_envs(envs: Sequence[int], episodes: np.ndarray) -> str:
    """Envs ``envs`` (indices in the batch) and the episode each is in (1: the first since the
    last reset of the batch), for a timeout's message."""
    span = f"env {envs[0]}" if len(envs) == 1 else f"envs {envs[0]}-{envs[-1]}"
    numbers = ", ".join(str(int(episodes[i]) + 1) for i in envs[:16])
    more = ", ..." if len(envs) > 16 else ""
    return f"{span} of {len(episodes)}, in episode {numbers}{more} since the last reset"


class TimedVecEnv(VecEnvWrapper):
    """A VecEnv stepped in this process whose ``reset`` and ``step_wait`` each must return within
    ``timeout_s`` seconds, else :class:`demo2rl.tasks.deadline.UserCodeTimeout` names the env, the
    call and the envs (:func:`demo2rl.tasks.deadline.limit`: ``SIGALRM``, main thread only).
    ``step_async`` only hands the actions over, as SB3's VecEnvs do, and is not limited."""

    def __init__(self, venv: VecEnv, env_id: str, timeout_s: float) -> None:
        super().__init__(venv)
        self.env_id, self.timeout_s = env_id, timeout_s
        self.episodes = np.zeros(venv.num_envs, np.int64)
        """The episode each env is in, counted from 0 at the last reset (for messages)."""

    def _where(self) -> str:
        return _describe_envs(list(range(self.num_envs)), self.episodes)

    def reset(self) -> Any:
        with deadline.limit(self.timeout_s, f"the env {self.env_id!r}: reset", self._where):
            obs = self.venv.reset()
        self.episodes[:] = 0
        return obs

    def step_wait(self) -> Any:
        with deadline.limit(self.timeout_s, f"the env {self.env_id!r}: step", self._where):
            obs, rewards, dones, infos = self.venv.step_wait()
        self.episodes += np.asarray(dones, dtype=bool)
        return obs, rewards, dones, infos


class _EnvFactory:
    """A picklable env constructor (for worker processes)."""

    def __init__(
        self,
        env_id: str,
        env_kwargs: dict[str, Any],
        wrap: Callable | None,
        frame_stack: int,
        max_episode_steps: int | None = None,
    ) -> None:
        self.env_id, self.env_kwargs, self.wrap = env_id, env_kwargs, wrap
        self.frame_stack, self.max_episode_steps = frame_stack, max_episode_steps

    def __call__(self) -> gym.Env:
        env = tasks.make_env(
            self.env_id,
            self.env_kwargs,
            frame_stack=self.frame_stack,
            max_episode_steps=self.max_episode_steps,
        )
        return self.wrap(env) if self.wrap else env


def _worker(remote: Any, fns: CloudpickleWrapper) -> None:
    venv = DummyVecEnv(fns.var)
    while True:
        cmd, data = remote.recv()
        if cmd == "step":
            remote.send(venv.step(data))
        elif cmd == "reset":
            venv._seeds = data  # the seeds SB3's VecEnv.seed() stored in the parent
            remote.send(venv.reset())
        elif cmd == "call":
            name, args, kwargs = data
            remote.send(getattr(venv, name)(*args, **kwargs))
        elif cmd == "close":
            venv.close()
            remote.close()
            return


class WorkerPoolVecEnv(VecEnv):
    """``n_envs`` envs on ``n_workers`` processes, each a ``DummyVecEnv`` of a contiguous chunk.

    With ``timeout_s``, a worker that does not answer a reset, step or call within it (the
    workers run in parallel: one limit for the batch) is a
    :class:`demo2rl.tasks.deadline.UserCodeTimeout` naming ``env_id``, the call, the worker and its
    envs; every worker is then stopped (a hung one cannot be asked to close). Starting the
    workers (imports, building the envs) is not limited.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        n_workers: int,
        *,
        env_id: str = "?",
        timeout_s: float | None = None,
    ) -> None:
        self.env_id, self.closed = env_id, False
        self.timeout_s: float | None = None  # (set below: starting the workers is not limited)
        n_workers = max(1, min(n_workers, len(env_fns)))
        self.chunks = [c.tolist() for c in np.array_split(np.arange(len(env_fns)), n_workers)]
        ctx = mp.get_context(
            "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        )
        self.remotes, self.processes = [], []
        for chunk in self.chunks:
            parent, child = ctx.Pipe()
            fns = CloudpickleWrapper([env_fns[i] for i in chunk])
            proc = ctx.Process(target=_worker, args=(child, fns), daemon=True)
            proc.start()
            child.close()
            self.remotes.append(parent)
            self.processes.append(proc)
        self.episodes = np.zeros(len(env_fns), np.int64)
        """The episode each env is in, counted from 0 at the last reset (for messages)."""
        probe = env_fns[0]()
        super().__init__(len(env_fns), probe.observation_space, probe.action_space)
        probe.close()
        self.timeout_s = timeout_s

    def _receive(self, call: str) -> list[Any]:
        """Every worker's answer to ``call``, within ``timeout_s`` for the batch (see the class)."""
        if self.timeout_s is None:
            return [remote.recv() for remote in self.remotes]
        end = time.monotonic() + self.timeout_s
        answers = []
        for k, (remote, chunk) in enumerate(zip(self.remotes, self.chunks, strict=True)):
            if not remote.poll(max(0.0, end - time.monotonic())):
                self._stop_workers()
                where = f"worker {k}: {_describe_envs(chunk, self.episodes)}"
                what = f"the env {self.env_id!r}: {call}"
                raise deadline.UserCodeTimeout(deadline.message(what, self.timeout_s, where))
            answers.append(remote.recv())
        return answers

    def step_async(self, actions: np.ndarray) -> None:
        for remote, chunk in zip(self.remotes, self.chunks, strict=True):
            remote.send(("step", actions[chunk[0] : chunk[-1] + 1]))

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        obs, rewards, dones, infos = zip(*self._receive("step"), strict=True)
        dones = np.concatenate(dones)
        self.episodes += dones.astype(bool)
        return np.concatenate(obs), np.concatenate(rewards), dones, list(chain(*infos))

    def reset(self) -> np.ndarray:
        for remote, chunk in zip(self.remotes, self.chunks, strict=True):
            remote.send(("reset", [self._seeds[i] for i in chunk]))
        obs = np.concatenate(self._receive("reset"))
        self._reset_seeds()
        self.episodes[:] = 0
        return obs

    def _call(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        for remote in self.remotes:
            remote.send(("call", (name, args, kwargs)))
        return list(chain.from_iterable(self._receive(name)))

    def close(self) -> None:
        if self.closed:
            return
        for remote in self.remotes:
            remote.send(("close", None))
        for proc in self.processes:
            proc.join(timeout=10)
        self._stop_workers()

    def _stop_workers(self) -> None:
        """End every worker still running (a hung one never reads a close) and the pipes."""
        for proc in self.processes:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
        for remote in self.remotes:
            remote.close()
        self.closed = True

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return self._select(self._call("get_attr", attr_name), indices)

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        if indices is not None:
            raise NotImplementedError("set_attr on a subset of a WorkerPoolVecEnv")
        self._call("set_attr", attr_name, value)

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> list:
        return self._select(self._call("env_method", method_name, *args, **kwargs), indices)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: Any = None) -> list[bool]:
        return self._select(self._call("env_is_wrapped", wrapper_class), indices)

    def get_images(self) -> list[np.ndarray | None]:
        return self._call("get_images")

    def _select(self, values: list[Any], indices: Any) -> list[Any]:
        return [values[i] for i in self._get_indices(indices)]
