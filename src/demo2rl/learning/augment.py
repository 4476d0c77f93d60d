"""Image augmentation: DrQ's random shift (Kostrikov et al. 2020), for BC's batches and the SAC
arms' replay batches alike.

Each frame of a channels-first batch is padded by ``pad`` pixels (edges replicated) and cropped
back at an offset in [0, 2 * pad], i.e. shifted by up to ``pad`` pixels each way. Frames keep
their dtype (the network scales them). The offsets are drawn by the caller's random stream: BC's
own generator, the replay's numpy stream (so that a resumed SAC run draws what it would have).
"""

from __future__ import annotations

import torch


def shift_frames(obs: torch.Tensor, pad: int, offsets: torch.Tensor) -> torch.Tensor:
    """``obs`` (n, C, H, W) with frame ``i`` shifted by ``offsets[:, i]`` (rows, columns), each
    offset in [0, 2 * pad] (``pad`` is no shift)."""
    n, _, height, width = obs.shape
    padded = torch.nn.functional.pad(obs.float(), (pad, pad, pad, pad), mode="replicate")
    dy, dx = offsets.to(obs.device).reshape(2, n, 1)
    rows = (torch.arange(height, device=obs.device) + dy)[:, :, None]  # (n, H, 1)
    cols = (torch.arange(width, device=obs.device) + dx)[:, None, :]  # (n, 1, W)
    batch = torch.arange(n, device=obs.device)[:, None, None]
    shifted = padded.permute(0, 2, 3, 1)[batch, rows, cols]  # (n, H, W, C)
    return shifted.permute(0, 3, 1, 2).to(obs.dtype).contiguous()


def random_shift(obs: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """``obs`` shifted by offsets drawn on the CPU from ``generator`` (results do not depend on
    the device)."""
    offsets = torch.randint(0, 2 * pad + 1, (2, obs.shape[0]), generator=generator)
    return shift_frames(obs, pad, offsets)
