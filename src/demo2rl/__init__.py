"""demo2rl: expert demonstrations -> behaviour cloning -> reinforcement learning, reproducibly."""

__version__ = "0.1.0"
