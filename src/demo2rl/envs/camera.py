"""Camera (pixel) observations of Racing-v0: an ego-centric top-down chase view per car.

Env kwargs ``camera=N`` (N > 0) and ``camera_view=V`` (metres) make the observation an
``N x N x 1`` uint8 grayscale image, ``Box(0, 255, (N, N, 1), uint8)``:

* the view is a square of side V metres in the car's frame, heading up: the car sits at the
  horizontal centre, ``CAR_HEIGHT`` (25%) of the image height up from the bottom, so 75% of the
  view lies ahead of it; image row 0 is the far end ahead, column 0 the car's left-most side.
  Pixel (r, c) shows the world point ``(0.75 N - r - 0.5) * V / N`` metres ahead of the car and
  ``(c + 0.5 - N / 2) * V / N`` metres to its right (nearest neighbour, no anti-aliasing);
* track surface is ``TRACK`` (170), grass and everything off the track ``GRASS`` (30);
* the bottom ``bar_rows(N)`` rows (an eighth of the image, at least 2: 6 at N = 48) are the
  speed bar, not the view: with
  ``L = N * speed / max_speed``, column c holds ``round(255 * clip(L - c, 0, 1))``: 255 over the
  first ``floor(L)`` columns, the fractional part of L in the next one, 0 (``BAR_OFF``) after
  it. Speed is thus readable from one frame (the bar's total intensity / 255 = L) and no view
  pixel is ever 0 or 255.

How (the cost matters: PPO steps many cars per batch):

* when a car gets a track, the track band (the centreline offset by +-half_width along the
  vertex normals: an outer polygon filled with TRACK, the inner one with GRASS) is rasterised
  once, with PIL, into a bitmap in world coordinates with ``SUPERSAMPLE`` (4) bitmap pixels per
  camera pixel (at least ``MIN_RES`` metres per pixel); each car has a slot of one
  ``(n, H, W)`` uint8 array (grown when a track does not fit; slot pixels outside the car's own
  bitmap, and a border of at least 2 pixels around it, are GRASS);
* each step, the camera's pixel offsets (precomputed, in bitmap pixels, car frame) are rotated
  by every car's ``cos_yaw``/``sin_yaw`` and shifted by its position with elementwise ops only,
  clipped to the slot (points beyond it land on its grass border) and gathered with one fancy
  index. No reductions across cars and no transcendental functions, so every car's frame is
  bitwise independent of the batch size and of its position in the batch, like the rest of
  ``demo2rl.envs.racing``.

Measured cost per car-step, batch of 16 cars (one core of a shared 2-core CPU, numpy 2.4):

=====================================  ========  =========  =========  =========
                                       camera=0  camera=32  camera=48  camera=64
=====================================  ========  =========  =========  =========
``RacingCore.step`` + ``observe``      6.4 us    10.8 us    15.7 us    21.4 us
vector env ``step`` (infos, "state")   10.4 us   -          24.3 us    32.4 us
SB3 ``RacingVecEnv.step``              11.0 us   -          25.3 us    35.0 us
=====================================  ========  =========  =========  =========

(adapter rows: the expert driving with a steering wobble, 23 episode ends in 600 steps).
Rasterising a track costs ~0.5-0.9 ms per reset on top of ``make_track``'s ~1 ms, so with very
short episodes (a car off the track every ~15 steps) the vector env costs ~50 us per car-step at
camera=48 (21 us at camera=0). Memory: one slot of ~768 x 768 bytes per car at camera=48
(0.25 m per pixel), ~1024 x 1024 at camera=64 (0.1875 m).
"""

from __future__ import annotations

import numbers

import numpy as np
from gymnasium import spaces
from PIL import Image, ImageDraw

from demo2rl.envs.tracks import Track

GRASS = 30  # grey value of everything off the track
TRACK = 170  # grey value of the track surface
BAR_ON, BAR_OFF = 255, 0  # speed bar: filled part, empty part
BAR_FRACTION = 8  # the speed bar is the bottom 1/BAR_FRACTION of the image (>= MIN_BAR_ROWS rows)
MIN_BAR_ROWS = 2
CAR_HEIGHT = 0.25  # the car sits this fraction of the image height up from the bottom
SUPERSAMPLE = 4  # bitmap pixels per camera pixel (along each axis)
MIN_RES = 0.05  # m, finest bitmap resolution (bounds the bitmap memory for tiny views)
MIN_SIZE = 8  # smallest image side (camera kwarg) accepted
_GROW = 64  # slot sizes are rounded up to a multiple of this many pixels


def bar_rows(size: int) -> int:
    """Rows of the speed bar in an image of ``size`` rows. Thick on purpose: with a 2-row bar at
    48x48, NatureCNN clones (8x8 stride-4 first layer) misread speed and braked to a halt on 4
    of 20 held-out tracks (BC 0.74 of the expert's return); with 6 rows they drove like the
    expert (1.00; docs/results.md#pixels)."""
    return max(MIN_BAR_ROWS, size // BAR_FRACTION)


def camera_space(size: int) -> spaces.Box:
    """The observation space of ``camera=size``: uint8 images (size, size, 1) in [0, 255]."""
    return spaces.Box(0, 255, (size, size, 1), np.uint8)


def check_camera(size: int, view: float) -> None:
    """Raise ValueError for camera kwargs the camera cannot take (size 0 means no camera)."""
    integer = isinstance(size, numbers.Integral) and not isinstance(size, bool)
    if not integer or size < 0 or 0 < size < MIN_SIZE:
        raise ValueError(f"camera must be 0 (state vector) or an int >= {MIN_SIZE}, got {size!r}")
    if not view > 0.0:
        raise ValueError(f"camera_view must be > 0 metres, got {view!r}")


class Camera:
    """Per-car track bitmaps and the chase-view sampler for ``n`` cars (see module docstring)."""

    def __init__(self, n: int, size: int, view: float, track_radius: float, half_width: float):
        check_camera(size, view)
        self.n, self.size, self.view = int(n), int(size), float(view)
        self.res = max(self.view / (SUPERSAMPLE * self.size), MIN_RES)  # m per bitmap pixel
        self.margin = 1.0 + 2.0 * self.res  # m of grass around the band: >= 2 pixels
        # bitmap origin (world x, y of the corner of pixel (0, 0)) of each car's slot
        self.x0, self.y0 = np.zeros(self.n), np.zeros(self.n)
        # initial slot side: tracks reach ~1.6 track_radius from the origin (1000 seeds: < 1.58)
        side = 2.0 * (1.6 * track_radius + half_width + self.margin) / self.res
        side = int(np.ceil(side / _GROW)) * _GROW
        self.grid = np.full((self.n, side, side), GRASS, dtype=np.uint8)
        # camera pixel offsets in bitmap pixels, car frame: forward of each view row, left of
        # each column (float32: half the memory traffic of float64, ~1e-4 pixel precision)
        m = self.view / self.size / self.res
        self.bar_rows = bar_rows(self.size)
        rows = np.arange(self.size - self.bar_rows, dtype=np.float64)
        cols = np.arange(self.size, dtype=np.float64)
        self._fwd = (((1.0 - CAR_HEIGHT) * self.size - rows - 0.5) * m).astype(np.float32)
        self._left = (-(cols - self.size / 2.0 + 0.5) * m).astype(np.float32)
        self._bar_cols = cols[None, :]

    # ------------------------------------------------------------------ tracks

    def load(self, i: int, track: Track) -> None:
        """Rasterise ``track`` into car ``i``'s slot (once per track)."""
        pts = track.centreline
        lo = pts.min(axis=0) - (track.half_width + self.margin)
        hi = pts.max(axis=0) + (track.half_width + self.margin)
        w, h = (np.ceil((hi - lo) / self.res).astype(np.int64) + 1).tolist()
        self._fit(h, w)
        # vertex normals: mean of the two adjacent segment directions, turned left
        tan = track.tangent + np.roll(track.tangent, 1, axis=0)
        tan = tan / np.hypot(tan[:, 0], tan[:, 1])[:, None]
        normal = np.stack([-tan[:, 1], tan[:, 0]], axis=1)
        img = Image.new("L", (w, h), GRASS)
        draw = ImageDraw.Draw(img)
        for side, fill in ((-1.0, TRACK), (1.0, GRASS)):  # outer band edge, then the infield
            edge = (pts + side * track.half_width * normal - lo) / self.res - 0.5  # PIL: centres
            draw.polygon([tuple(p) for p in edge.tolist()], fill=fill)
        slot = self.grid[i]
        slot[:h, :w] = np.asarray(img, dtype=np.uint8)
        slot[h:, :] = GRASS
        slot[:h, w:] = GRASS
        self.x0[i], self.y0[i] = lo

    def _fit(self, h: int, w: int) -> None:
        """Grow every slot (keeping the contents) so that an h x w bitmap fits."""
        _, rows, cols = self.grid.shape
        if h <= rows and w <= cols:
            return
        rows = max(rows, int(np.ceil(h / _GROW)) * _GROW)
        cols = max(cols, int(np.ceil(w / _GROW)) * _GROW)
        grid = np.full((self.n, rows, cols), GRASS, dtype=np.uint8)
        grid[:, : self.grid.shape[1], : self.grid.shape[2]] = self.grid
        self.grid = grid

    # ------------------------------------------------------------------ frames

    def frames(
        self,
        cars: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        cos_yaw: np.ndarray,
        sin_yaw: np.ndarray,
        speed_frac: np.ndarray,
    ) -> np.ndarray:
        """Images (len(cars), N, N, 1) uint8 of the cars ``cars`` (slot indices) at poses
        ``x``, ``y``, ``cos_yaw``, ``sin_yaw`` (aligned with ``cars``) and ``speed_frac`` =
        speed / max_speed."""
        n, size = len(cars), self.size
        _, rows, cols = self.grid.shape
        index = np.int32 if self.grid.size < 2**31 else np.int64
        # bitmap coordinates (u, v) of every camera pixel, elementwise only (batch independent);
        # separable: u = (x + c * fwd[row]) - s * left[col], v = (y + s * fwd[row]) + c * left[col]
        c = cos_yaw.astype(np.float32)[:, None]
        s = sin_yaw.astype(np.float32)[:, None]
        x_px = ((x - self.x0[cars]) / self.res).astype(np.float32)[:, None]
        y_px = ((y - self.y0[cars]) / self.res).astype(np.float32)[:, None]
        u = (x_px + c * self._fwd)[:, :, None] - (s * self._left)[:, None, :]
        v = (y_px + s * self._fwd)[:, :, None] + (c * self._left)[:, None, :]
        np.clip(u, 0.0, cols - 1, out=u)  # points beyond the slot land on its grass border
        np.clip(v, 0.0, rows - 1, out=v)
        flat = v.astype(index)  # >= 0, so truncation is floor
        flat *= cols
        flat += u.astype(index)
        flat += (np.asarray(cars, dtype=index) * (rows * cols))[:, None, None]
        out = np.empty((n, size, size, 1), dtype=np.uint8)
        out[:, : size - self.bar_rows, :, 0] = self.grid.reshape(-1)[flat]
        fill = np.minimum(np.maximum(speed_frac, 0.0), 1.0) * size
        bar = np.minimum(np.maximum(fill[:, None] - self._bar_cols, 0.0), 1.0)
        bar = np.rint(bar * (BAR_ON - BAR_OFF) + BAR_OFF).astype(np.uint8)
        out[:, size - self.bar_rows :, :, 0] = bar[:, None, :]
        return out
