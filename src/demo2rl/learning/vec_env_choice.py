"""Which stable-baselines3 VecEnv steps a task's RL envs: the values of ``rl.vec_env``, and the
task's own batched VecEnv where its package registers one
(:attr:`demo2rl.envs.capabilities.Capabilities.sb3_vec_env`).

Kept apart from :mod:`demo2rl.learning.vec` (which imports SB3) so that the workflow resolves
``auto`` when it parses the config.
"""

from __future__ import annotations

from demo2rl import tasks
from demo2rl.envs import capabilities

VEC_ENVS = ("auto", "native", "dummy", "subproc")
"""The values of ``rl.vec_env``."""


def native_vec_env(env_id: str) -> str | None:
    """The entry point of the task's own SB3 VecEnv, or None (imports the env's module first)."""
    tasks.env_spec(env_id)
    return capabilities.of(env_id).sb3_vec_env


def resolve_vec_env(kind: str, env_id: str, frame_stack: int = 1) -> str:
    """``rl.vec_env`` as it runs: ``auto`` is ``native`` when the task has its own VecEnv
    (:func:`native_vec_env`) and stacks no frames, and ``dummy`` (SB3's DummyVecEnv) otherwise."""
    if kind not in VEC_ENVS:
        raise tasks.TaskError(f"rl.vec_env must be one of {', '.join(VEC_ENVS)}, got {kind!r}")
    if kind == "auto":
        native = frame_stack == 1 and native_vec_env(env_id) is not None
        return "native" if native else "dummy"
    return kind
