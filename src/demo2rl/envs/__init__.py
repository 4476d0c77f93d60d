"""Built-in environments. Importing this module registers ``Racing-v0`` with gymnasium.

It imports neither torch nor stable_baselines3 (the SB3 adapter lives in ``demo2rl.envs.sb3``).
What a task brings beyond its registration (its metrics, its replays, its own SB3 VecEnv) is
declared in :mod:`demo2rl.envs.capabilities`, which only the jobs that evaluate a policy or step
RL envs import.
"""

import gymnasium


def env_name(env_id: str) -> str:
    """The name ``env_id`` is registered under: a ``"package.module:Env-v0"`` id without the
    module it imports first (``Env-v0``)."""
    return env_id.rpartition(":")[2]


if "Racing-v0" not in gymnasium.registry:
    gymnasium.register(
        id="Racing-v0",
        entry_point="demo2rl.envs.racing:RacingEnv",
        vector_entry_point="demo2rl.envs.racing:RacingVectorEnv",
    )
