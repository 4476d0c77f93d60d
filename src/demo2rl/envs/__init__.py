"""Built-in environments. Importing this module registers ``Racing-v0`` with gymnasium.

It imports neither torch nor stable_baselines3 (the SB3 adapter lives in ``demo2rl.envs.sb3``).
"""

import gymnasium

REPLAYED = frozenset({"Racing-v0"})
"""The tasks whose report replays their held-out episodes (the rule plot_racing: the lines the
policies drove, and the best run's lap), by gymnasium id: what the workflow asks, so that it
names no task."""

if "Racing-v0" not in gymnasium.registry:
    gymnasium.register(
        id="Racing-v0",
        entry_point="demo2rl.envs.racing:RacingEnv",
        vector_entry_point="demo2rl.envs.racing:RacingVectorEnv",
    )
