"""Which stable-baselines3 VecEnv steps a task's RL envs: the values of ``rl.vec_env``, and the
tasks that bring a batched VecEnv of their own.

Kept apart from :mod:`demo2rl.learning.vec` (which imports SB3) so that the workflow resolves
``auto`` when it parses the config, and apart from :mod:`demo2rl.tasks` so that only the RL stage's
code
fingerprint covers the native VecEnvs named here.
"""

from __future__ import annotations

from demo2rl import tasks

NATIVE_VEC_ENVS: dict[str, str] = {"Racing-v0": "demo2rl.envs.sb3:RacingVecEnv"}
"""Tasks with a batched stable-baselines3 VecEnv of their own, for RL: gymnasium id -> entry
point of a VecEnv class taking ``(num_envs, **env_kwargs)``. See :func:`register_native_vec_env`."""
VEC_ENVS = ("auto", "native", "dummy", "subproc")
"""The values of ``rl.vec_env``."""


def register_native_vec_env(env_id: str, entry_point: str) -> None:
    """Declare a task's own SB3 VecEnv (e.g. next to its ``gymnasium.register`` call, in the
    module a ``"package.module:Env-v0"`` id imports), which ``rl.vec_env: auto`` then uses.

    Its episodes must be those of SB3's ``DummyVecEnv`` over the task's single envs, seed for
    seed (same-step autoreset, ``terminal_observation`` in the infos), or results will depend on
    the vec env kind.
    """
    NATIVE_VEC_ENVS[tasks.env_name(env_id)] = entry_point


def native_vec_env(env_id: str) -> str | None:
    """The entry point of the task's own SB3 VecEnv, or None (imports the env's module first)."""
    tasks.env_spec(env_id)
    return NATIVE_VEC_ENVS.get(tasks.env_name(env_id))


def resolve_vec_env(kind: str, env_id: str, frame_stack: int = 1) -> str:
    """``rl.vec_env`` as it runs: ``auto`` is ``native`` when the task has its own VecEnv
    (:func:`native_vec_env`) and stacks no frames, and ``dummy`` (SB3's DummyVecEnv) otherwise."""
    if kind not in VEC_ENVS:
        raise tasks.TaskError(f"rl.vec_env must be one of {', '.join(VEC_ENVS)}, got {kind!r}")
    if kind == "auto":
        native = frame_stack == 1 and native_vec_env(env_id) is not None
        return "native" if native else "dummy"
    return kind
