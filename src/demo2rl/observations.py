"""What the workflow does with a task's observations, decided in one place from their space.

An observation space is read as images or as a vector, and four modules ask questions of that kind:
the network (:mod:`demo2rl.learning.policy`: a CNN or an MLP, the observation transform), the task
probe (:mod:`demo2rl.workflow.probe`: the clear error for what looks like images but is not one),
the dataset (:mod:`demo2rl.demos.dataset`: which columns are compressed) and the RL recipes
(:mod:`demo2rl.rl.recipe`: what stable-baselines3 scales by 1/255). :class:`ObservationKind` answers
each of them. The questions are not the same test: they agree on every space the probe
accepts, and each says where it differs from :attr:`ObservationKind.image`.

Kept free of torch and stable-baselines3, so that collection need not import them; a test checks
that :attr:`ObservationKind.layout` and :attr:`ObservationKind.sb3_image` agree with SB3's own
tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np

Layout = Literal["HWC", "CHW"]
"""Where an image's channels are: last (height, width, channels) or first."""


@dataclasses.dataclass(frozen=True)
class ObservationKind:
    """The kind of a task's observations: images (in which :data:`Layout`) or a vector, and the
    narrower or looser questions some modules ask instead. Build it with :meth:`of`."""

    layout: Layout | None
    """``"HWC"`` or ``"CHW"`` when the network reads the observations as images, else None
    (a vector, flattened by the MLP). An image is what stable-baselines3 takes for one
    (:attr:`sb3_image`) with its channels on the smallest axis, first or last: the middle one
    SB3 cannot tell, and neither can this."""
    sb3_image: bool
    """Whether stable-baselines3 takes the observations for images (its
    ``preprocessing.is_image_space``): a 3-D uint8 Box with bounds exactly 0 and 255, its
    channels on any axis. Its networks then scale them to [0, 1] (``preprocess_obs``). Differs
    from :attr:`image` only for channels on the middle axis, which the probe rejects."""
    looks_like_image: bool
    """Whether the observations look like a camera's frames in any layout: a Box of 3 or more
    dimensions, or of uint8. Looser than :attr:`image` on purpose: the probe gives what looks
    like images but is not one a clear error."""
    image_column: bool
    """Whether a dataset stores the observations as an image column (:func:`image_column` of
    their dtype and shape): compressed, and left out of the statistics. Looser than
    :attr:`image`: any uint8 observation of two or more dimensions, whatever its bounds."""

    @classmethod
    def of(cls, space: gym.Space) -> ObservationKind:
        """The kind of the observations of ``space`` (any gymnasium space; only a Box can hold
        images)."""
        if not isinstance(space, gym.spaces.Box):
            return cls(layout=None, sb3_image=False, looks_like_image=False, image_column=False)
        sb3_image = (
            len(space.shape) == 3
            and space.dtype == np.uint8
            and not (np.any(space.low != 0) or np.any(space.high != 255))
        )
        layout: Layout | None = None
        if sb3_image:
            smallest = int(np.argmin(space.shape))
            layout = "CHW" if smallest == 0 else "HWC" if smallest == 2 else None
        return cls(
            layout=layout,
            sb3_image=sb3_image,
            looks_like_image=len(space.shape) >= 3 or space.dtype == np.uint8,
            image_column=image_column(space.dtype, space.shape),
        )

    @property
    def image(self) -> bool:
        """Whether the network reads the observations as images (a CNN encoder, no observation
        normalisation; :attr:`layout` says where their channels are)."""
        return self.layout is not None

    @property
    def channels_last(self) -> bool:
        """Whether the observations are images with their channels last (``"HWC"``), which SB3's
        ``VecTransposeImage`` moves first before the network reads them."""
        return self.layout == "HWC"


def image_column(dtype: Any, row_shape: Sequence[int]) -> bool:
    """Whether a dataset column of rows ``row_shape`` holds images, as the dataset tells them
    from the column alone: uint8, two or more dimensions. The dataset compresses such columns
    (when they hold observations) and keeps no statistics of them."""
    return np.dtype(dtype) == np.uint8 and len(row_shape) >= 2
