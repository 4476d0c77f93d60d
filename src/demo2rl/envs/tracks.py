"""Random closed race tracks: smooth star-shaped curves resampled uniformly in arc length."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

N_POINTS = 512  # centreline samples per track (fixed so tracks batch as (N, M, 2) arrays)
TRACK_RADIUS = 55.0  # mean radius of the polar curve, metres
HALF_WIDTH = 5.0  # half the track width, metres
HARMONICS = (2, 3, 4, 5, 6)  # cos(k θ + φ_k) terms of the radius
MIN_RADIUS_FACTOR = 2.0  # radius of curvature ≥ this × half_width everywhere
MIN_GAP_FACTOR = 4.0  # centreline points far apart along the track are ≥ this × half_width apart
_FINE = 1024  # samples of the analytic curve used for checks and arc-length resampling
_SHRINK = 0.9  # amplitude factor applied until the track is valid
_N_FACTORS = 48  # candidate factors _SHRINK**i, the last one (≈0.007) is a near-circle


@dataclass(frozen=True, eq=False)
class Track:
    """A closed counter-clockwise track; arc length 0 is the start/finish line.

    ``centreline[j]`` sits at arc length ``j * length / M``; ``tangent``/``heading`` are the unit
    direction and angle of the segment ``j -> j+1``; ``curvature`` is signed (positive = left turn).
    """

    centreline: np.ndarray  # (M, 2) float64
    tangent: np.ndarray  # (M, 2) float64, unit
    heading: np.ndarray  # (M,) float64, rad
    curvature: np.ndarray  # (M,) float64, 1/m
    length: float
    half_width: float
    seed: int


def _harmonic_sums(theta: np.ndarray, amp: np.ndarray, phase: np.ndarray) -> tuple:
    """Σ a_k cos, Σ a_k k sin, Σ a_k k² cos of (k θ + φ_k): r(θ)/R - 1 and its derivatives."""
    k = np.asarray(HARMONICS, dtype=np.float64)[:, None]
    arg = k * theta[None, :] + phase[:, None]
    c, s = np.cos(arg), np.sin(arg)
    a = amp[:, None]
    return (a * c).sum(axis=0), (a * k * s).sum(axis=0), (a * k * k * c).sum(axis=0)


def _curve(
    theta: np.ndarray, sums: tuple, f: np.ndarray | float, radius: float, points: bool = True
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Points, |dP/dθ| and signed curvature of r = R (1 + f Σ a_k cos(k θ + φ_k)).

    ``f`` may be a column of amplitude factors, giving one curve per row (then use points=False).
    """
    c0, c1, c2 = sums
    r = radius * (1.0 + f * c0)
    dr = -radius * f * c1
    ddr = -radius * f * c2
    speed = np.sqrt(r * r + dr * dr)
    kappa = (r * r + 2.0 * dr * dr - r * ddr) / speed**3
    if not points:
        return None, speed, kappa
    pts = np.stack([r * np.cos(theta), r * np.sin(theta)], axis=-1)
    return pts, speed, kappa


def _far_apart(pts: np.ndarray, arc: np.ndarray, length: float, hw: float) -> bool:
    """No two points far apart along the track come closer than MIN_GAP_FACTOR × hw."""
    p, s = pts[::8], arc[::8]
    dist = np.hypot(p[:, None, 0] - p[None, :, 0], p[:, None, 1] - p[None, :, 1])
    sep = np.abs(s[:, None] - s[None, :])
    sep = np.minimum(sep, length - sep)
    far = sep > 2.0 * MIN_GAP_FACTOR * hw
    return not np.any(dist[far] < MIN_GAP_FACTOR * hw)


def make_track(
    seed: int,
    *,
    radius: float = TRACK_RADIUS,
    half_width: float = HALF_WIDTH,
    n_points: int = N_POINTS,
) -> Track:
    """Deterministic random track for ``seed`` (any int ≥ 0).

    Harmonic amplitudes are drawn from ``np.random.default_rng(seed)`` and shrunk by a fixed factor
    until the radius of curvature is ≥ 2 × ``half_width`` everywhere and distant parts of the track
    stay ≥ 4 × ``half_width`` apart (a circle is always valid once ``radius`` ≥ 4 × ``half_width``).
    """
    if radius < MIN_GAP_FACTOR * half_width:
        raise ValueError(f"radius={radius} must be ≥ {MIN_GAP_FACTOR} × half_width={half_width}")
    rng = np.random.default_rng(seed)
    n_h = len(HARMONICS)
    scale = rng.uniform(0.5, 1.0)
    amp = scale * rng.uniform(0.1, 1.0, size=n_h) * 0.6 / np.asarray(HARMONICS) ** 0.8
    phase = rng.uniform(0.0, 2.0 * np.pi, size=n_h)

    theta = np.linspace(0.0, 2.0 * np.pi, _FINE + 1)  # closed: last sample = first
    dtheta = 2.0 * np.pi / _FINE
    sums = _harmonic_sums(theta, amp, phase)
    all_factors = _SHRINK ** np.arange(_N_FACTORS, dtype=np.float64)
    last = all_factors[-1]  # a near-circle: always valid as radius ≥ 4 × half_width
    f = None
    for first in range(0, _N_FACTORS, 8):  # scan candidate factors 8 at a time (cheap)
        factors = all_factors[first : first + 8]
        _, _, kappa = _curve(theta, sums, factors[:, None], radius, points=False)
        ok = np.max(np.abs(kappa), axis=1) * MIN_RADIUS_FACTOR * half_width <= 1.0
        ok |= factors == last
        for cand in factors[ok]:
            pts, speed, _ = _curve(theta, sums, cand, radius)
            arc = np.concatenate([[0.0], np.cumsum(0.5 * (speed[1:] + speed[:-1]))]) * dtheta
            if cand == last or _far_apart(pts[:-1], arc[:-1], float(arc[-1]), half_width):
                f = cand
                break
        if f is not None:
            break

    # resample θ uniformly in arc length and evaluate the analytic curve there
    s_target = np.linspace(0.0, arc[-1], n_points, endpoint=False)
    theta_u = np.interp(s_target, arc, theta)
    centre, _, kappa_u = _curve(theta_u, _harmonic_sums(theta_u, amp, phase), f, radius)

    seg = np.roll(centre, -1, axis=0) - centre
    seg_x, seg_y = np.ascontiguousarray(seg[:, 0]), np.ascontiguousarray(seg[:, 1])
    seg_len = np.hypot(seg_x, seg_y)
    tangent = np.stack([seg_x / seg_len, seg_y / seg_len], axis=1)
    heading = np.arctan2(seg_y / seg_len, seg_x / seg_len)
    for arr in (centre, tangent, heading, kappa_u):
        arr.flags.writeable = False
    return Track(
        centreline=centre,
        tangent=tangent,
        heading=heading,
        curvature=kappa_u,
        length=float(seg_len.sum()),
        half_width=float(half_width),
        seed=int(seed),
    )
