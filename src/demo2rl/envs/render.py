"""Top-down rgb_array rendering of a track and a car, and of camera observations, with PIL (no
display needed)."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from demo2rl.envs.camera import CAR_HEIGHT
from demo2rl.envs.tracks import Track

GRASS = (60, 140, 60)
TARSAC = (110, 110, 110)
KERB = (235, 235, 235)
CAR = (220, 30, 30)
CAR_LENGTH = 4.5  # metres (drawn 1.5x enlarged so it stays visible)
CAR_WIDTH = 2.0


def render_rgb(track: Track, x: float, y: float, yaw: float, size: int = 400) -> np.ndarray:
    """Top-down view of ``track`` with the car at (x, y, yaw): uint8 array (size, size, 3)."""
    pts = track.centreline
    margin = track.half_width + 2.0
    lo = pts.min(axis=0) - margin
    extent = float(np.max(pts.max(axis=0) + margin - lo))
    scale = size / extent  # pixels per metre, same on both axes

    def to_px(p: np.ndarray) -> list[tuple[float, float]]:
        u = (p[..., 0] - lo[0]) * scale
        v = size - (p[..., 1] - lo[1]) * scale  # image y points down
        return list(zip(u.tolist(), v.tolist(), strict=True))

    img = Image.new("RGB", (size, size), GRASS)
    draw = ImageDraw.Draw(img)
    closed = np.vstack([pts, pts[:1]])
    width = max(1, round(2.0 * track.half_width * scale))
    draw.line(to_px(closed), fill=TARSAC, width=width, joint="curve")

    normal = np.array([-track.tangent[0, 1], track.tangent[0, 0]])
    start = np.stack([pts[0] - track.half_width * normal, pts[0] + track.half_width * normal])
    draw.line(to_px(start), fill=KERB, width=max(1, round(0.8 * scale)))

    c, s = np.cos(yaw), np.sin(yaw)
    body = np.array([[1.0, 0.0], [-0.6, 0.5], [-0.6, -0.5]]) * [CAR_LENGTH, CAR_WIDTH] * 1.5
    world = np.stack([x + c * body[:, 0] - s * body[:, 1], y + s * body[:, 0] + c * body[:, 1]], 1)
    draw.polygon(to_px(world), fill=CAR, outline=(0, 0, 0))
    return np.asarray(img, dtype=np.uint8)


def render_camera(frame: np.ndarray, view: float, size: int = 400) -> np.ndarray:
    """A camera observation (N, N, 1) uint8 scaled up (nearest) to an rgb image (size, size, 3),
    with the car outlined where it sits (``view``: metres the image covers)."""
    n = frame.shape[0]
    img = Image.fromarray(np.ascontiguousarray(frame[..., 0])).resize((size, size), Image.NEAREST)
    img = img.convert("RGB")
    scale = size / view  # pixels per metre
    cx, cy = size / 2.0, (1.0 - CAR_HEIGHT) * size
    body = np.array([[1.0, 0.0], [-0.6, 0.5], [-0.6, -0.5]]) * [CAR_LENGTH, CAR_WIDTH]
    corners = [(cx - b[1] * scale, cy - b[0] * scale) for b in body.tolist()]  # forward = up
    ImageDraw.Draw(img).polygon(corners, outline=CAR, width=max(1, size // (4 * n)))
    return np.asarray(img, dtype=np.uint8)
