"""The off-policy arms' replay: SB3's buffer, plus the demonstrations in every batch, and both
stored in a checkpoint as plain tensors.

:class:`DemoReplayBuffer` is stable-baselines3's n-step replay buffer (its own storage, its own
sampling of the online part) with a fixed share of every batch drawn uniformly from the
demonstrations (RLPD's symmetric sampling, Ball et al. 2023). The demonstrations enter as SB3
would have stored them had the agent taken those steps itself: observations as the env gives
them (the buffer normalises both parts with the same frozen statistics when it samples), actions
scaled to the policy's [-1, 1] exactly as SB3 scales its own (``policy.scale_action``), the true
rewards, and an episode's end a terminal only where the env terminated it: a time-limit
truncation bootstraps. n-step returns are precomputed once for the demonstrations by SB3's own
rule (stop at a termination or a truncation, discount ``gamma`` per step taken).

:func:`buffer_state` and :func:`load_buffer_state` save and restore the online part (its arrays,
position and fill) as tensors for the run's one atomic checkpoint; SB3's own
``save_replay_buffer`` pickles, which a checkpoint loaded with ``weights_only=True`` refuses.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.buffers import NStepReplayBuffer, ReplayBuffer
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from stable_baselines3.common.vec_env import VecNormalize

from demo2rl.learning import augment


@dataclasses.dataclass(frozen=True)
class DemoTransitions:
    """Demonstration transitions as an n-step replay holds them.

    ``frames`` holds every observation once (the steps' and each episode's final one); a
    transition names its observation and its n-step next observation by row of ``frames``, so
    images are not stored twice. ``actions`` are in the policy's [-1, 1] (as SB3 stores its own),
    ``returns`` the discounted sums of up to n true rewards, ``dones`` 1.0 where the n-step
    window ends in a termination (not a truncation), ``discounts`` ``gamma ** k`` for the k
    steps taken.
    """

    frames: np.ndarray
    obs_row: np.ndarray
    next_row: np.ndarray
    actions: np.ndarray
    returns: np.ndarray
    dones: np.ndarray
    discounts: np.ndarray

    def __len__(self) -> int:
        return len(self.obs_row)


def demo_transitions(
    observations: np.ndarray,
    final_observations: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    terminated: np.ndarray,
    lengths: np.ndarray,
    *,
    n_steps: int,
    gamma: float,
) -> DemoTransitions:
    """The n-step transitions of whole episodes laid end to end (``lengths`` steps each, in
    order) with their ``final_observations``; ``actions`` already in the policy's [-1, 1]. An
    episode that ends without ``terminated`` was truncated: its last transitions bootstrap from
    its final observation."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total != len(observations) or len(lengths) != len(final_observations):
        raise ValueError(
            f"{len(observations)} steps and {len(final_observations)} final observations for "
            f"episodes of {total} steps in all ({len(lengths)} episodes)"
        )
    starts = np.cumsum(lengths) - lengths
    episode = np.repeat(np.arange(len(lengths)), lengths)
    end = (starts + lengths)[episode]  # one past each step's episode's last step
    t = np.arange(total)
    k = np.minimum(n_steps, end - t)  # steps in the window (no termination inside: below)
    term = np.asarray(terminated, dtype=bool)
    # a termination inside the window ends it there (only an episode's last step terminates,
    # but a dataset may hold one earlier: stop at the first)
    for i in range(1, n_steps):
        stops = (i < k) & term[np.minimum(t + i - 1, total - 1)]
        k = np.where(stops, i, k)
    rewards = np.asarray(rewards, dtype=np.float64)
    returns = np.zeros(total, dtype=np.float64)
    for i in range(n_steps):
        inside = i < k
        returns[inside] += gamma**i * rewards[t[inside] + i]
    last = t + k - 1
    # the next observation after step `last`: the following step's, or the episode's final one
    is_final = last == end - 1
    next_row = np.where(is_final, total + episode, last + 1)
    frames = np.concatenate([observations, final_observations])
    return DemoTransitions(
        frames=frames,
        obs_row=t,
        next_row=next_row,
        actions=np.asarray(actions, dtype=np.float32),
        returns=returns.astype(np.float32)[:, None],
        dones=term[last].astype(np.float32)[:, None],
        discounts=(gamma ** k.astype(np.float32)).astype(np.float32)[:, None],
    )


class DemoReplayBuffer(NStepReplayBuffer):
    """SB3's n-step replay (``n_steps=1``: one-step returns, as its plain buffer) whose every
    batch is ``demo_fraction`` demonstrations (rounded to whole transitions) and the rest its own
    replay, demonstrations first. Both parts are drawn with numpy's global generator, as SB3
    draws its own (so a run's checkpoint of that stream covers both).

    Give it the demonstrations with :meth:`set_demos` before the first batch; ``demo_fraction``
    0 makes it SB3's buffer exactly.

    With ``augment`` > 0 (image observations, channels first), every batch's observations and
    next observations are shifted by up to ``augment`` pixels each way, each frame by its own offset
    (DrQ, :mod:`demo2rl.learning.augment`), drawn from the same numpy stream after the batch.
    """

    def __init__(
        self,
        *args: Any,
        demo_fraction: float = 0.5,
        n_steps: int = 1,
        gamma: float = 0.99,
        augment: int = 0,
        **kwargs: Any,
    ) -> None:
        if not 0.0 <= demo_fraction < 1.0:
            raise ValueError(f"demo_fraction {demo_fraction}: in [0, 1)")
        kwargs.setdefault("handle_timeout_termination", True)
        super().__init__(*args, n_steps=n_steps, gamma=gamma, **kwargs)
        self.demo_fraction = demo_fraction
        self.demos: DemoTransitions | None = None
        if augment and len(self.obs_shape) != 3:
            raise ValueError(f"augment {augment}: image observations only, not {self.obs_shape}")
        self.augment = augment

    def set_demos(self, demos: DemoTransitions) -> None:
        """Use ``demos`` (n-step with this buffer's ``n_steps`` and ``gamma``) from now on."""
        if len(demos) == 0:
            raise ValueError("no demonstration transitions to mix into the batches")
        shape = self.obs_shape
        if demos.frames.shape[1:] != shape:
            raise ValueError(
                f"demonstration observations of shape {demos.frames.shape[1:]}, the replay's "
                f"are {shape}"
            )
        if demos.actions.shape[1:] != (self.action_dim,):
            raise ValueError(
                f"demonstration actions of shape {demos.actions.shape[1:]}, the replay's are "
                f"({self.action_dim},)"
            )
        self.demos = demos

    def demo_count(self, batch_size: int) -> int:
        """Demonstration transitions in a batch of ``batch_size``."""
        return round(self.demo_fraction * batch_size) if self.demo_fraction else 0

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> ReplayBufferSamples:
        batch = self._mixed_sample(batch_size, env)
        if not self.augment:
            return batch
        # offsets for (observations, next observations) x (rows, columns) x frames
        offsets = torch.from_numpy(np.random.randint(0, 2 * self.augment + 1, (2, 2, batch_size)))  # noqa: NPY002
        return batch._replace(
            observations=augment.shift_frames(batch.observations, self.augment, offsets[0]),
            next_observations=augment.shift_frames(
                batch.next_observations, self.augment, offsets[1]
            ),
        )

    def _mixed_sample(self, batch_size: int, env: VecNormalize | None) -> ReplayBufferSamples:
        n_demo = self.demo_count(batch_size)
        if n_demo == 0:
            return super().sample(batch_size, env=env)
        if self.demos is None:
            raise RuntimeError("DemoReplayBuffer.set_demos was never called")
        demo = self._demo_samples(n_demo, env)
        own = super().sample(batch_size - n_demo, env=env)  # discounts too: SB3's n-step buffer
        return ReplayBufferSamples(*(torch.cat([a, b]) for a, b in zip(demo, own, strict=True)))

    def _demo_samples(self, n: int, env: VecNormalize | None) -> ReplayBufferSamples:
        demos = self.demos
        assert demos is not None
        rows = np.random.randint(0, len(demos), size=n)  # noqa: NPY002 (SB3's stream)
        obs = self._normalize_obs(demos.frames[demos.obs_row[rows]], env)
        next_obs = self._normalize_obs(demos.frames[demos.next_row[rows]], env)
        return ReplayBufferSamples(
            observations=self.to_torch(obs),
            actions=self.to_torch(demos.actions[rows]),
            next_observations=self.to_torch(next_obs),
            dones=self.to_torch(demos.dones[rows]),
            rewards=self.to_torch(self._normalize_reward(demos.returns[rows], env)),
            discounts=self.to_torch(demos.discounts[rows]),
        )


BUFFER_ARRAYS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
"""The arrays of SB3's replay a checkpoint holds (in their dtype; images stay uint8)."""


def buffer_state(buffer: ReplayBuffer) -> dict[str, Any]:
    """The online replay as tensors: its filled rows of every array, its position and fill."""
    rows = buffer.buffer_size if buffer.full else buffer.pos
    arrays = {
        name: torch.from_numpy(np.ascontiguousarray(getattr(buffer, name)[:rows]))
        for name in BUFFER_ARRAYS
        if getattr(buffer, name, None) is not None
    }
    return {"arrays": arrays, "pos": int(buffer.pos), "full": bool(buffer.full)}


def load_buffer_state(buffer: ReplayBuffer, state: dict[str, Any]) -> None:
    """Put :func:`buffer_state`'s content back into ``buffer`` (one of the same shape)."""
    for name, tensor in state["arrays"].items():
        array = getattr(buffer, name)
        values = tensor.numpy()
        if values.shape[1:] != array.shape[1:] or len(values) > len(array):
            raise ValueError(
                f"replay {name} of shape {tuple(values.shape)} does not fit {array.shape}"
            )
        array[: len(values)] = values
    buffer.pos, buffer.full = int(state["pos"]), bool(state["full"])
