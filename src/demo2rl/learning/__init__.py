"""Learning from the demonstrations: the shared policy network and what trains or runs it.

:mod:`~demo2rl.learning.policy` is the network behaviour cloning and PPO share (and SAC's actor
layout), with its observation transforms; :mod:`~demo2rl.learning.checkpoints` saves and loads it
with what it takes to trust it; :mod:`~demo2rl.learning.bc` and :mod:`~demo2rl.learning.bc_data`
clone the demonstrations from memory-resident or streamed batches; :mod:`~demo2rl.learning.dagger`
relabels the clone's own states; :mod:`~demo2rl.learning.acting`,
:mod:`~demo2rl.learning.evaluation` and the vectorised envs (:mod:`~demo2rl.learning.vec`,
:mod:`~demo2rl.learning.vec_env_choice`) run a policy on held-out tracks;
:mod:`~demo2rl.learning.guidance` and :mod:`~demo2rl.learning.augment` are the terms and
augmentations the arms share. The RL arms themselves are :mod:`demo2rl.rl`.
"""
