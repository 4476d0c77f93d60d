"""Racing-v0: a batched kinematic-bicycle racing simulator and its gymnasium adapters.

(About 450 lines, on purpose: the dynamics, observation and reward of the task read top to
bottom in one file; the tracks are envs/tracks.py, the SB3 VecEnv envs/sb3.py.)

``RacingCore`` steps N cars at once with plain numpy on contiguous 1-D float64 arrays, one track
per car. Every per-car result is bitwise independent of N and of the car's position in the batch
(no BLAS, no reductions across cars, transcendental ufuncs only on contiguous 1-D inputs), so the
single env (``RacingEnv``, N=1), the gymnasium vector env (``RacingVectorEnv``) and the SB3 VecEnv
(``demo2rl.envs.sb3.RacingVecEnv``) produce identical numbers for the same seeds and actions.

Observation (float32, ``3 + 3K`` values, K = ``N_LOOKAHEAD``)::

    [0]              speed / max_speed                                  in [0, 1]
    [1]              lateral offset / half_width (left positive)        |.| > 1 means off track
    [2]              heading error: yaw - centreline heading, rad       in [-pi, pi)
    [3 : 3+K]        lookahead x (forward) / lookahead range, car frame
    [3+K : 3+2K]     lookahead y (left) / lookahead range, car frame
    [3+2K : 3+3K]    centreline curvature at the lookahead points * CURVATURE_SCALE

The lookahead points lie on the centreline at arc distances ``j * LOOKAHEAD_SPACING``
(j = 0..K-1) ahead of the car's projection; the lookahead range is ``(K - 1) * LOOKAHEAD_SPACING``.

Camera mode (env kwarg ``camera=N`` > 0, default 0): the observation is instead an ``N x N x 1``
uint8 top-down chase view of the car with a speed bar (``camera_view`` metres across; layout and
cost in envs/camera.py), and the state vector above is what every info (reset and step, every
adapter) carries as ``"state"``: float32 ``(OBS_DIM,)`` per car, ``(N, OBS_DIM)`` in the
vector envs, privileged state for experts that drive from it (``task.expert.input:
info.state``). Infos carry it without a camera too (it then equals the observation), so that an
expert reading it works with the camera on or off.

Seeding: ``reset(seed=s)`` builds the track from seed ``s`` (the car always starts at arc length 0
on the centreline, aligned, at rest) and reseeds that car's generator with ``s``. Unseeded resets
(including autoresets) draw the next track seed from that generator in ``[2**30, 2**31)``, a range
that explicitly seeded demo/eval runs (seeds < 2**30) never use.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv

from demo2rl.envs.camera import Camera, camera_space, check_camera
from demo2rl.envs.tracks import HALF_WIDTH, MIN_RADIUS_FACTOR, N_POINTS, TRACK_RADIUS, Track
from demo2rl.envs.tracks import make_track as _make_track

UNFINGERPRINTED_IMPORTS = {
    "demo2rl.envs.render": "drawing only (RacingCore.render): no observation, reward or info "
    "comes from it, so editing it reruns none of the rules that step this env; the racing "
    "report, which draws with it, imports it itself",
}

# fixed physics / observation constants (not env kwargs)
DT = 0.1  # s per step (render_fps = 10)
WHEELBASE = 2.5  # m
MAX_STEER = 0.5  # rad, front-wheel angle at |action[0]| = 1
SCRUB = 0.5  # speed lost per m/s^2 of lateral acceleration asked beyond grip (1/s) ...
MAX_SCRUB = 8.0  # ... capped at this deceleration (m/s^2)
N_LOOKAHEAD = 12  # K lookahead points
LOOKAHEAD_SPACING = 4.0  # m between lookahead points
LOOKAHEAD_RANGE = (N_LOOKAHEAD - 1) * LOOKAHEAD_SPACING  # m, scale of the lookahead coordinates
CURVATURE_SCALE = 10.0  # m, curvature observations are kappa * CURVATURE_SCALE
OBS_DIM = 3 + 3 * N_LOOKAHEAD
UNSEEDED_LOW, UNSEEDED_HIGH = 2**30, 2**31  # track seeds drawn by unseeded resets


@dataclass(frozen=True)
class RacingParams:
    """Env kwargs shared by all adapters (defaults are the Racing-v0 defaults)."""

    max_steps: int = 600  # truncation inside the core (the expert does ~2 laps)
    half_width: float = HALF_WIDTH  # m, half the track width
    track_radius: float = TRACK_RADIUS  # m, mean track radius (lap of ~350-400 m)
    grip: float = 8.5  # m/s^2, lateral-acceleration limit mu*g
    max_speed: float = 30.0  # m/s, top speed (quadratic drag balances max_accel there)
    max_accel: float = 4.0  # m/s^2 at full throttle
    max_brake: float = 8.0  # m/s^2 at full brake
    progress_scale: float = 0.1  # reward per metre of centreline progress
    off_track_penalty: float = 0.5  # reward subtracted per step with |offset| > half_width
    off_track_limit: float = 3.0  # m beyond the edge at which the episode terminates
    camera: int = 0  # 0: state-vector observation; N > 0: N x N x 1 uint8 chase-view image
    camera_view: float = 48.0  # m, side of the square the camera image covers (camera > 0)

    def __post_init__(self) -> None:
        check_camera(self.camera, self.camera_view)


DEFAULTS = RacingParams()


def observation_space(params: RacingParams) -> spaces.Box:
    """Finite Box of the state vector (the observation when camera=0; the core clips to it)."""
    k = N_LOOKAHEAD
    reach = params.half_width + params.off_track_limit + params.max_speed * DT + 1.0
    off = reach / params.half_width
    pt = 1.0 + reach / LOOKAHEAD_RANGE
    kap = 1.1 * CURVATURE_SCALE / (MIN_RADIUS_FACTOR * params.half_width)
    low = np.array([0.0, -off, -np.pi] + [-pt] * (2 * k) + [-kap] * k, dtype=np.float32)
    high = np.array([1.0, off, np.pi] + [pt] * (2 * k) + [kap] * k, dtype=np.float32)
    return spaces.Box(low, high, dtype=np.float32)


ACTION_SPACE = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)


def _wrap(angle: np.ndarray) -> np.ndarray:
    """Wrap angles to [-pi, pi) without transcendental functions."""
    return np.mod(angle + np.pi, 2.0 * np.pi) - np.pi


def track_seed_for(seed: int | None, rng: np.random.Generator) -> int:
    """The explicit seed, or the next unseeded track seed drawn from ``rng``."""
    if seed is not None:
        return int(seed)
    return int(rng.integers(UNSEEDED_LOW, UNSEEDED_HIGH))


class CarSeeds:
    """One generator per car, reseeded by explicit seeds like a gymnasium Env's ``np_random``."""

    def __init__(self, n: int):
        self.rngs: list[np.random.Generator | None] = [None] * n

    def state(self) -> str:
        """The generators' states, as JSON (None for a car not yet reset)."""
        return json.dumps([None if g is None else g.bit_generator.state for g in self.rngs])

    def load_state(self, text: str) -> None:
        """Put back :meth:`state`'s generators."""
        states = json.loads(text)
        if len(states) != len(self.rngs):
            raise ValueError(f"{len(states)} car generators saved, {len(self.rngs)} cars here")
        for i, saved in enumerate(states):
            self.rngs[i] = None
            if saved is not None:
                self.rngs[i], _ = seeding.np_random(0)
                self.rngs[i].bit_generator.state = saved

    def track_seeds(self, indices: Sequence[int], seeds: Sequence[int | None]) -> list[int]:
        """Track seeds for ``indices`` (``seeds`` aligned with them; None = draw from the rng)."""
        out = []
        for i, seed in zip(indices, seeds, strict=True):
            if seed is not None or self.rngs[i] is None:
                self.rngs[i], _ = seeding.np_random(None if seed is None else int(seed))
            out.append(track_seed_for(seed, self.rngs[i]))
        return out


class RacingCore:
    """N cars on N tracks, stepped together. All state is per-car contiguous 1-D arrays."""

    def __init__(self, num_cars: int, params: RacingParams = DEFAULTS):
        n, m = int(num_cars), N_POINTS
        self.n, self.m, self.params = n, m, params
        self._drag = params.max_accel / params.max_speed**2
        self.state_space = observation_space(params)
        self._obs_low = self.state_space.low.astype(np.float64)
        self._obs_high = self.state_space.high.astype(np.float64)
        # camera mode: per-car track bitmaps, and images as observations
        self.camera: Camera | None = None
        self.obs_space = self.state_space
        if params.camera:
            self.camera = Camera(
                n, params.camera, params.camera_view, params.track_radius, params.half_width
            )
            self.obs_space = camera_space(params.camera)
        self._ahead = np.arange(N_LOOKAHEAD, dtype=np.float64) * LOOKAHEAD_SPACING
        self._base = np.arange(n, dtype=np.int64) * m  # offset of car i's track in the flat arrays
        self._rows = np.arange(n)
        # local projection window: a track is ≥ 2 pi track_radius long, so a car moving at
        # max_speed (either way) passes < `reach` segments per step; search twice that around it
        reach = int(np.ceil(params.max_speed * DT * m / (2.0 * np.pi * params.track_radius)))
        self._window = np.arange(-2 * reach - 2, 2 * reach + 3)
        self.tracks: list[Track | None] = [None] * n
        # car state
        self.x, self.y, self.yaw = np.zeros(n), np.zeros(n), np.zeros(n)
        self.cos_yaw, self.sin_yaw = np.ones(n), np.zeros(n)
        self.speed, self.s, self.lateral = np.zeros(n), np.zeros(n), np.zeros(n)
        self.seg, self.t = np.zeros(n, dtype=np.int64), np.zeros(n)  # s = (seg + t) * ds
        self.progress, self.lap_time = np.zeros(n), np.full(n, np.nan)
        self.laps = np.zeros(n, dtype=np.int64)
        self.steps = np.zeros(n, dtype=np.int64)
        self.track_seed = np.zeros(n, dtype=np.int64)
        # tracks, flattened to n * m rows so one fancy index gathers from every car's own track
        self.length, self.ds = np.ones(n), np.ones(n)
        # segment j: start point, unit direction, length (for the projection)
        self.seg_table = np.zeros((n * m, 5))  # x, y, ux, uy, len
        # point j and its increment to point j+1 (for interpolating lookahead points)
        self.point_table = np.zeros((n * m, 8))  # x, dx, y, dy, kappa, dkappa, heading, dheading

    CAR_STATE = (
        *("x", "y", "yaw", "cos_yaw", "sin_yaw", "speed", "s", "lateral", "seg", "t"),
        *("progress", "lap_time", "laps", "steps", "track_seed"),
    )
    """The per-car arrays that make a car's state; its track is rebuilt from ``track_seed``."""

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every car's state (copies of :data:`CAR_STATE`; the tracks are rebuilt from their
        seeds), for resuming in the middle of episodes."""
        return {name: getattr(self, name).copy() for name in self.CAR_STATE}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Put back :meth:`state_dict`'s cars, on their tracks, bit for bit."""
        p = self.params
        for name in self.CAR_STATE:
            value = np.asarray(state[name])
            old = getattr(self, name)
            if value.shape != old.shape or value.dtype != old.dtype:
                raise ValueError(
                    f"car state {name!r}: {value.dtype}{value.shape} saved, "
                    f"{old.dtype}{old.shape} here"
                )
        for i, seed in enumerate(np.asarray(state["track_seed"]).tolist()):
            if self.tracks[i] is None or self.track_seed[i] != seed:
                self._load_track(
                    i, _make_track(seed, radius=p.track_radius, half_width=p.half_width)
                )
        for name in self.CAR_STATE:
            setattr(self, name, np.array(state[name]))

    def reset_cars(self, indices: Sequence[int], track_seeds: Sequence[int]) -> None:
        """Put cars ``indices`` at the start of fresh tracks built from ``track_seeds``."""
        p = self.params
        for i, seed in zip(indices, track_seeds, strict=True):
            track = _make_track(seed, radius=p.track_radius, half_width=p.half_width)
            self._load_track(int(i), track)
        idx = np.asarray(indices, dtype=np.int64)
        start = self.point_table[self._base[idx]]
        self.x[idx], self.y[idx], self.yaw[idx] = start[:, 0], start[:, 2], start[:, 6]
        self.cos_yaw[idx] = np.cos(np.ascontiguousarray(self.yaw[idx]))
        self.sin_yaw[idx] = np.sin(np.ascontiguousarray(self.yaw[idx]))
        for arr in (self.speed, self.s, self.t, self.lateral, self.progress):
            arr[idx] = 0.0
        self.seg[idx] = 0
        self.laps[idx] = 0
        self.steps[idx] = 0
        self.lap_time[idx] = np.nan

    def _load_track(self, i: int, track: Track) -> None:
        sl = slice(i * self.m, (i + 1) * self.m)
        pts = track.centreline
        seg = np.roll(pts, -1, axis=0) - pts
        self.tracks[i] = track
        self.track_seed[i] = track.seed
        self.length[i] = track.length
        self.ds[i] = track.length / self.m
        seg_len = np.hypot(np.ascontiguousarray(seg[:, 0]), np.ascontiguousarray(seg[:, 1]))
        self.seg_table[sl] = np.column_stack([pts, track.tangent, seg_len])
        kappa, head = track.curvature, track.heading
        self.point_table[sl] = np.column_stack(
            [
                *(pts[:, 0], seg[:, 0], pts[:, 1], seg[:, 1]),
                *(kappa, np.roll(kappa, -1) - kappa, head, _wrap(np.roll(head, -1) - head)),
            ]
        )
        if self.camera is not None:
            self.camera.load(i, track)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Advance every car by DT; returns (reward float64, terminated bool, truncated bool)."""
        p = self.params
        a = np.asarray(actions, dtype=np.float64).reshape(self.n, 2)
        a = np.minimum(np.maximum(a, -1.0), 1.0)
        steer = np.ascontiguousarray(a[:, 0]) * MAX_STEER
        pedal = np.ascontiguousarray(a[:, 1])

        # longitudinal: throttle or brake, quadratic drag, no reversing
        v = self.speed
        accel = np.where(pedal >= 0.0, pedal * p.max_accel, pedal * p.max_brake)
        v = np.maximum(v + (accel - self._drag * v * v) * DT, 0.0)
        # lateral: kinematic bicycle yaw rate, saturated by grip (the car slides wide and scrubs)
        yaw_rate = v * np.tan(steer) / WHEELBASE
        excess = np.abs(yaw_rate) * v - p.grip
        limit = p.grip / np.maximum(v, 1e-6)
        yaw_rate = np.minimum(np.maximum(yaw_rate, -limit), limit)
        scrub = np.minimum(SCRUB * np.maximum(excess, 0.0), MAX_SCRUB) * DT
        v = np.maximum(v - scrub, 0.0)
        self.speed = v
        self.yaw = _wrap(self.yaw + yaw_rate * DT)
        self.cos_yaw, self.sin_yaw = np.cos(self.yaw), np.sin(self.yaw)
        self.x = self.x + v * self.cos_yaw * DT
        self.y = self.y + v * self.sin_yaw * DT

        # progress along the centreline (local search around the last segment)
        s_old = self.s
        self._project()
        ds = self.s - s_old
        ds = ds - self.length * np.rint(ds / self.length)  # across the start/finish line
        self.progress = self.progress + ds
        laps = np.maximum(self.laps, np.floor(self.progress / self.length).astype(np.int64))
        first = (laps >= 1) & np.isnan(self.lap_time)
        if first.any():
            before = self.progress - ds
            frac = np.minimum(np.maximum((self.length - before) / np.maximum(ds, 1e-9), 0.0), 1.0)
            self.lap_time = np.where(first, (self.steps + frac) * DT, self.lap_time)
        self.laps = laps
        self.steps = self.steps + 1

        off = np.abs(self.lateral)
        reward = p.progress_scale * ds - p.off_track_penalty * (off > p.half_width)
        terminated = off > p.half_width + p.off_track_limit
        truncated = self.steps >= p.max_steps
        return reward, terminated, truncated

    def _project(self) -> None:
        """Nearest centreline segment within the window: updates seg, s and lateral."""
        cand = (self.seg[:, None] + self._window[None, :]) % self.m
        g = self.seg_table[cand + self._base[:, None]]  # (N, W, 5)
        ux, uy, seg_len = g[..., 2], g[..., 3], g[..., 4]
        dx = self.x[:, None] - g[..., 0]
        dy = self.y[:, None] - g[..., 1]
        along = dx * ux + dy * uy
        lat = ux * dy - uy * dx
        t = np.minimum(np.maximum(along / seg_len, 0.0), 1.0)
        gap = along - t * seg_len
        k = np.argmin(gap * gap + lat * lat, axis=1)
        rows = self._rows
        self.seg = cand[rows, k]
        self.t = t[rows, k]
        self.lateral = lat[rows, k]
        self.s = (self.seg + self.t) * self.ds

    def observe(self) -> np.ndarray:
        """Observations of all cars: the state vectors, or with a camera its uint8 images."""
        if self.camera is None:
            return self.observe_state()
        return self.camera_frames(self._rows)

    def camera_frames(self, cars: np.ndarray) -> np.ndarray:
        """Camera images (len(cars), N, N, 1) uint8 of cars ``cars`` (camera mode only)."""
        if self.camera is None:
            raise RuntimeError("camera_frames() needs the camera kwarg > 0")
        cars = np.asarray(cars, dtype=np.int64)
        return self.camera.frames(
            cars,
            self.x[cars],
            self.y[cars],
            self.cos_yaw[cars],
            self.sin_yaw[cars],
            self.speed[cars] / self.params.max_speed,
        )

    def observe_state(self) -> np.ndarray:
        """State vectors of all cars, float32 (N, OBS_DIM), clipped to ``state_space``."""
        k = N_LOOKAHEAD
        pos = (self.s[:, None] + self._ahead[None, :]) / self.ds[:, None]
        i0 = np.floor(pos)
        frac = pos - i0
        g = self.point_table[i0.astype(np.int64) % self.m + self._base[:, None]]  # (N, K, 8)
        rx = g[..., 0] + frac * g[..., 1] - self.x[:, None]
        ry = g[..., 2] + frac * g[..., 3] - self.y[:, None]
        c, s = self.cos_yaw[:, None], self.sin_yaw[:, None]
        here = self.point_table[self._base + self.seg]
        heading = here[:, 6] + self.t * here[:, 7]

        out = np.empty((self.n, OBS_DIM))
        out[:, 0] = self.speed / self.params.max_speed
        out[:, 1] = self.lateral / self.params.half_width
        out[:, 2] = _wrap(self.yaw - heading)
        out[:, 3 : 3 + k] = (c * rx + s * ry) / LOOKAHEAD_RANGE
        out[:, 3 + k : 3 + 2 * k] = (c * ry - s * rx) / LOOKAHEAD_RANGE
        out[:, 3 + 2 * k :] = (g[..., 4] + frac * g[..., 5]) * CURVATURE_SCALE
        np.minimum(np.maximum(out, self._obs_low, out=out), self._obs_high, out=out)
        return out.astype(np.float32)

    def info_arrays(self) -> dict[str, np.ndarray]:
        """Per-car info values as arrays of shape (N,), and "state" (N, OBS_DIM)."""
        arrays = {
            "speed": self.speed.copy(),
            "progress": self.progress.copy(),
            "laps": self.laps.copy(),
            "lap_time": self.lap_time.copy(),
            "off_track": np.abs(self.lateral) > self.params.half_width,
            "track_seed": self.track_seed.copy(),
        }
        arrays["state"] = self.observe_state()
        return arrays

    def info(self, i: int) -> dict[str, Any]:
        """Info dict of car ``i`` with Python scalars; ``lap_time`` only once a lap is done;
        "state", the car's state vector (float32 (OBS_DIM,))."""
        info = {
            "speed": float(self.speed[i]),
            "progress": float(self.progress[i]),
            "laps": int(self.laps[i]),
            "off_track": bool(abs(self.lateral[i]) > self.params.half_width),
            "track_seed": int(self.track_seed[i]),
        }
        if not np.isnan(self.lap_time[i]):  # NaN would break equality checks (check_env)
            info["lap_time"] = float(self.lap_time[i])
        info["state"] = self.observe_state()[i]
        return info

    def render(self, i: int, size: int = 400) -> np.ndarray:
        """rgb_array frame of car ``i``: (size, size, 3) overview; with a camera (size, 2 size, 3),
        the overview and, right of it, the camera image the policy sees (scaled up)."""
        track = self.tracks[i]
        if track is None:
            raise RuntimeError("reset() before render()")
        # deferred: only drawing loads the renderer (and PIL); no code fingerprint follows this
        # import (UNFINGERPRINTED_IMPORTS above)
        from demo2rl.envs.render import render_camera, render_rgb

        img = render_rgb(track, self.x[i], self.y[i], self.yaw[i], size=size)
        if self.camera is None:
            return img
        frame = self.camera_frames(np.array([i]))[0]
        return np.concatenate([img, render_camera(frame, self.params.camera_view, size)], axis=1)


class RacingEnv(gym.Env):
    """Single-car Racing-v0 (the core with N=1). See the module docstring for obs and seeding."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = None, **kwargs: Any):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"unsupported render_mode {render_mode!r}")
        self.render_mode = render_mode
        self.params = RacingParams(**kwargs)
        self.core = RacingCore(1, self.params)
        self.observation_space = self.core.obs_space
        self.action_space = ACTION_SPACE

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """New track from ``seed`` (or drawn from np_random in [2**30, 2**31) when None)."""
        super().reset(seed=seed)
        self.core.reset_cars([0], [track_seed_for(seed, self.np_random)])
        return self.core.observe()[0], self.core.info(0)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """One DT step of the single car."""
        if self.core.tracks[0] is None:
            raise RuntimeError("reset() before step()")
        reward, terminated, truncated = self.core.step(np.asarray(action).reshape(1, 2))
        obs = self.core.observe()[0]
        return obs, float(reward[0]), bool(terminated[0]), bool(truncated[0]), self.core.info(0)

    def render(self) -> np.ndarray | None:
        """Top-down rgb_array frame (None when render_mode is None)."""
        return None if self.render_mode is None else self.core.render(0)


def _vector_infos(arrays: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, Any]:
    """gymnasium vector-style infos: values where ``mask`` and ``_key`` masks.

    Entries outside the mask are 0, except ``lap_time``: NaN and unmasked until a lap is done.
    Values may have trailing dimensions (the camera mode's "state", (N, OBS_DIM)).
    """
    infos: dict[str, Any] = {}
    for key, val in arrays.items():
        present = mask & ~np.isnan(val) if key == "lap_time" else mask
        fill = np.array(np.nan if key == "lap_time" else 0, dtype=val.dtype)
        infos[key] = np.where(present.reshape(-1, *(1,) * (val.ndim - 1)), val, fill)
        infos[f"_{key}"] = present
    return infos


class RacingVectorEnv(VectorEnv):
    """Batched Racing-v0 over one ``RacingCore``, with all three gymnasium autoreset modes.

    ``reset(seed=..., options={"reset_mask": mask})`` resets only the masked cars (like
    ``SyncVectorEnv``); ``seed`` may be None, an int (car i gets seed + i) or a list of N seeds.
    """

    metadata: ClassVar[dict[str, Any]] = {
        "render_modes": ["rgb_array"],
        "render_fps": 10,
        "autoreset_mode": AutoresetMode.NEXT_STEP,
    }

    def __init__(
        self,
        num_envs: int = 1,
        *,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        render_mode: str | None = None,
        **kwargs: Any,
    ):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"unsupported render_mode {render_mode!r}")
        self.num_envs = int(num_envs)
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.metadata = {**type(self).metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = render_mode
        self.params = RacingParams(**kwargs)
        self.core = RacingCore(self.num_envs, self.params)
        self.single_observation_space = self.core.obs_space
        self.single_action_space = ACTION_SPACE
        self.observation_space = gym.vector.utils.batch_space(self.core.obs_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(ACTION_SPACE, self.num_envs)
        self._seeds = CarSeeds(self.num_envs)
        self._autoreset = np.zeros(self.num_envs, dtype=bool)

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset all cars, or only ``options["reset_mask"]`` ones; returns (obs, infos)."""
        n = self.num_envs
        if seed is None:
            seeds: list[int | None] = [None] * n
        elif isinstance(seed, int | np.integer):
            seeds = [int(seed) + i for i in range(n)]
        else:
            seeds = list(seed)
        if len(seeds) != n:
            raise ValueError(f"expected {n} seeds, got {len(seeds)}")
        mask = np.ones(n, dtype=bool)
        if options is not None and "reset_mask" in options:
            mask = np.asarray(options["reset_mask"])
            if mask.shape != (n,) or mask.dtype != np.bool_ or not mask.any():
                raise ValueError(f"reset_mask must be a bool array of shape ({n},) with a True")
        idx = np.flatnonzero(mask)
        self.core.reset_cars(idx, self._seeds.track_seeds(idx, [seeds[i] for i in idx]))
        self._autoreset[idx] = False
        return self.core.observe(), _vector_infos(self.core.info_arrays(), mask)

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every car; finished cars are reset according to ``autoreset_mode``."""
        if any(t is None for t in self.core.tracks):
            raise RuntimeError("reset() before step()")
        core = self.core
        reward, terminated, truncated = core.step(actions)
        all_cars = np.ones(self.num_envs, dtype=bool)
        infos: dict[str, Any] = {}
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            idx = np.flatnonzero(self._autoreset)
            if idx.size:  # cars that finished last step restart now instead of stepping
                core.reset_cars(idx, self._seeds.track_seeds(idx, [None] * idx.size))
                reward[idx], terminated[idx], truncated[idx] = 0.0, False, False
            obs = core.observe()
        elif self.autoreset_mode == AutoresetMode.SAME_STEP:
            obs = core.observe()
            done = terminated | truncated
            if done.any():
                idx = np.flatnonzero(done)
                final_obs = np.full(self.num_envs, None, dtype=object)
                for i in idx:
                    final_obs[i] = obs[i]
                infos["final_obs"], infos["_final_obs"] = final_obs, done.copy()
                infos["final_info"] = _vector_infos(core.info_arrays(), done)
                infos["_final_info"] = done.copy()
                core.reset_cars(idx, self._seeds.track_seeds(idx, [None] * idx.size))
                obs = core.observe()
        else:  # DISABLED: the caller resets finished cars with options={"reset_mask": ...}
            obs = core.observe()
        self._autoreset = terminated | truncated
        infos.update(_vector_infos(core.info_arrays(), all_cars))
        return obs, reward, terminated, truncated, infos

    def render(self) -> tuple[np.ndarray, ...] | None:
        """One rgb_array frame per car (None when render_mode is None)."""
        if self.render_mode is None:
            return None
        return tuple(self.core.render(i) for i in range(self.num_envs))
