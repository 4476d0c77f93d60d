"""Vectorised environments for RL: the task's native batched VecEnv, SB3's DummyVecEnv, or a pool
of worker processes for expensive simulators.

The number of envs is a hyperparameter (it changes results); the number of worker processes is a
runtime setting (it does not). ``subproc`` therefore runs ``n_envs`` envs on ``n_workers``
processes, each worker an SB3 ``DummyVecEnv`` of a contiguous chunk: the envs, their seeds and
their auto-resets are exactly those of one ``DummyVecEnv`` of all of them.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv
from stable_baselines3.common.vec_env.base_vec_env import CloudpickleWrapper

from demo2rl import tasks, vec_kinds


def make_vec_env(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    n_envs: int,
    kind: str,
    *,
    n_workers: int = 1,
    wrap: Callable[[gym.Env], gym.Env] | None = None,
    frame_stack: int = 1,
) -> VecEnv:
    """``n_envs`` envs of the task as an SB3 VecEnv of the given kind (see the module doc; ``auto``
    is resolved by :func:`demo2rl.vec_kinds.resolve_vec_env`).

    ``wrap`` is applied to each single env (dummy, subproc) after stacking ``frame_stack``
    observations (:func:`demo2rl.tasks.stack_frames`); a native VecEnv gets neither, so a task
    whose envs need wrapping (e.g. action rescaling) or stacking must use dummy or subproc.
    """
    kind = vec_kinds.resolve_vec_env(kind, env_id, frame_stack)
    if kind == "native":
        native = vec_kinds.native_vec_env(env_id)
        if native is None:
            raise ValueError(f"rl.vec_env 'native': {env_id!r} has no native VecEnv; use auto")
        if wrap is not None or frame_stack > 1:
            raise ValueError(f"rl.vec_env 'native': {env_id!r} needs wrapped envs; use dummy")
        return tasks.resolve_entry_point(native)(n_envs, **dict(env_kwargs))
    fns = [_EnvFactory(env_id, dict(env_kwargs), wrap, frame_stack) for _ in range(n_envs)]
    if kind == "dummy":
        return DummyVecEnv(fns)
    return WorkerPoolVecEnv(fns, n_workers)  # subproc (resolve_vec_env refused any other kind)


class _EnvFactory:
    """A picklable env constructor (for worker processes)."""

    def __init__(
        self, env_id: str, env_kwargs: dict[str, Any], wrap: Callable | None, frame_stack: int
    ) -> None:
        self.env_id, self.env_kwargs, self.wrap = env_id, env_kwargs, wrap
        self.frame_stack = frame_stack

    def __call__(self) -> gym.Env:
        env = tasks.make_env(self.env_id, self.env_kwargs, frame_stack=self.frame_stack)
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
    """``n_envs`` envs on ``n_workers`` processes, each a ``DummyVecEnv`` of a contiguous chunk."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], n_workers: int) -> None:
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
        probe = env_fns[0]()
        super().__init__(len(env_fns), probe.observation_space, probe.action_space)
        probe.close()

    def step_async(self, actions: np.ndarray) -> None:
        for remote, chunk in zip(self.remotes, self.chunks, strict=True):
            remote.send(("step", actions[chunk[0] : chunk[-1] + 1]))

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        results = [remote.recv() for remote in self.remotes]
        obs, rewards, dones, infos = zip(*results, strict=True)
        return (
            np.concatenate(obs),
            np.concatenate(rewards),
            np.concatenate(dones),
            list(chain(*infos)),
        )

    def reset(self) -> np.ndarray:
        for remote, chunk in zip(self.remotes, self.chunks, strict=True):
            remote.send(("reset", [self._seeds[i] for i in chunk]))
        obs = np.concatenate([remote.recv() for remote in self.remotes])
        self._reset_seeds()
        return obs

    def _call(self, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        for remote in self.remotes:
            remote.send(("call", (name, args, kwargs)))
        return list(chain.from_iterable(remote.recv() for remote in self.remotes))

    def close(self) -> None:
        for remote in self.remotes:
            remote.send(("close", None))
        for proc in self.processes:
            proc.join(timeout=10)

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
