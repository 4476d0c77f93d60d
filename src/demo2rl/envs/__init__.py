"""Built-in environments. Importing this module registers ``Racing-v0`` with gymnasium.

It imports neither torch nor stable_baselines3 (the SB3 adapter lives in ``demo2rl.envs.sb3``).
What a task shows in the report beyond its return (its metrics, its replays) is declared in
:mod:`demo2rl.envs.capabilities`, which only the jobs that evaluate a policy import.
"""

import gymnasium

if "Racing-v0" not in gymnasium.registry:
    gymnasium.register(
        id="Racing-v0",
        entry_point="demo2rl.envs.racing:RacingEnv",
        vector_entry_point="demo2rl.envs.racing:RacingVectorEnv",
    )
