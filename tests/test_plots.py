"""Every figure is a valid, non-empty image: the plot functions alone and the workflow's plots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import TEST_CONFIG
from PIL import Image

from demo2rl.envs.render import render_rgb
from demo2rl.envs.tracks import make_track
from demo2rl.report import plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EXP = yaml.safe_load(TEST_CONFIG.read_text())["experiment"]


def assert_png(path: Path, min_colours: int = 8) -> np.ndarray:
    """A PNG by its signature, decodable by Pillow, and not one flat colour; its pixels."""
    data = Path(path).read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    with Image.open(path) as image:
        image.verify()  # structure and checksums
    with Image.open(path) as image:
        assert image.format == "PNG"
        pixels = np.asarray(image.convert("RGB"))
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    colours = np.unique(pixels.reshape(-1, 3), axis=0)
    assert len(colours) >= min_colours, f"{path} is (nearly) uniform: {len(colours)} colours"
    return pixels


def assert_gif(path: Path) -> int:
    """An animated GIF that Pillow decodes frame by frame, frames not all alike; frame count."""
    assert Path(path).read_bytes()[:6] in (b"GIF87a", b"GIF89a")
    with Image.open(path) as image:
        assert image.format == "GIF" and image.is_animated
        frames = []
        for i in range(image.n_frames):
            image.seek(i)
            frames.append(np.asarray(image.convert("RGB")))
    assert len(np.unique(frames[0].reshape(-1, 3), axis=0)) > 3
    assert any(not np.array_equal(frames[0], f) for f in frames[1:]), "the frames do not move"
    return len(frames)


def band(steps: np.ndarray, level: float) -> dict[str, np.ndarray]:
    mean = level + np.log1p(steps / 1000)
    return {"step": steps, "mean": mean, "low": mean - 1, "high": mean + 1}


def test_learning_curves(tmp_path: Path):
    steps = np.arange(0, 10_001, 2000.0)
    out = tmp_path / "curves.png"
    plots.learning_curves(
        {"RL from BC": band(steps, 5), "RL from scratch": band(steps, -2)},
        {"expert": 9.0, "behaviour clone": 4.0},
        out,
        colors={"expert": "black"},
        confidence=0.95,
    )
    assert_png(out)


def test_learning_curves_by_cpu_seconds_in_a_second_panel(tmp_path: Path):
    """With curves by training CPU seconds, a panel of them beside the steps' panel: the arm drawn
    only there (in its colour) shows in the right half of the figure, and only there."""
    steps, seconds = np.arange(0, 10_001, 2000.0), np.arange(0, 61, 12.0)
    by_steps = {"RL from scratch": band(steps, -2)}
    by_cpu = {"SAC on demos + replay": band(seconds * 100, 5) | {"seconds": seconds}}
    colors = {"RL from scratch": "tab:green", "SAC on demos + replay": "tab:cyan"}
    one, two = tmp_path / "one.png", tmp_path / "two.png"
    plots.learning_curves(by_steps, {"expert": 9.0}, one, colors=colors, confidence=0.95)
    plots.learning_curves(
        by_steps, {"expert": 9.0}, two, colors=colors, confidence=0.95, by_cpu=by_cpu
    )
    single, double = assert_png(one), assert_png(two)
    assert double.shape[1] == 2 * single.shape[1] and double.shape[0] == single.shape[0]
    cyan = np.array([0x17, 0xBE, 0xCF])  # tab:cyan
    is_cyan = np.all(np.abs(double.astype(int) - cyan) <= 8, axis=2)
    half = double.shape[1] // 2
    assert is_cyan[:, half:].sum() > 100 and is_cyan[:, :half].sum() == 0


def test_the_cost_panel_places_each_arm_by_its_cpu_seconds_and_env_steps(tmp_path: Path):
    """The cost to a target as one point per arm on log axes: the arm that is cheaper on both
    axes lies lower and further left; an arm that never got there is named, not drawn."""
    colors = {"cheap": "tab:cyan", "dear": "tab:red", "never": "tab:green"}
    out = tmp_path / "costs.png"
    costs = {"cheap": (20.0, 50_000.0), "dear": (400.0, 300_000.0), "never": (None, None)}
    plots.costs_figure(costs, out, colors=colors, target="scratch PPO's final return")
    image = assert_png(out).astype(int)

    def centre(rgb: tuple[int, int, int]) -> np.ndarray:
        mask = np.all(np.abs(image - np.array(rgb)) <= 8, axis=2)
        assert mask.sum() > 20, rgb
        return np.argwhere(mask).mean(axis=0)  # (row, column)

    cheap, dear = centre((0x17, 0xBE, 0xCF)), centre((0xD6, 0x27, 0x28))
    assert cheap[1] < dear[1] and cheap[0] > dear[0]  # left of it, and below it
    green = np.all(np.abs(image - np.array([0x2C, 0xA0, 0x2C])) <= 8, axis=2)
    assert green.sum() == 0  # never reached: named in the corner, no point
    # beside the curves: a third panel
    steps = np.arange(0, 10_001, 2000.0)
    three = tmp_path / "three.png"
    plots.learning_curves(
        {"cheap": band(steps, 5)},
        {},
        three,
        colors=colors,
        confidence=0.95,
        by_cpu={"cheap": band(steps / 100, 5) | {"seconds": steps / 100}},
        costs=costs,
        target="scratch PPO's final return",
    )
    assert assert_png(three).shape[1] > 2.5 * assert_png(three).shape[0]


def test_final_returns(tmp_path: Path):
    estimates = {
        "expert": {"iqm": 50, "iqm_ci": [48, 52], "mean": 49.5, "runs": [49.5]},
        "RL from BC": {"iqm": 55, "iqm_ci": [50, 58], "mean": 54, "runs": [51, 54, 57]},
    }
    improvement = {"RL from BC > expert": {"probability": 0.8, "ci": [0.6, 0.95]}}
    out = tmp_path / "final.png"
    plots.final_returns(estimates, improvement, out, confidence=0.95)
    assert_png(out)


def test_track_lines_colour_the_driven_line_by_speed(tmp_path: Path):
    track = make_track(300_000_000)
    n = 200
    xy = track.centreline[np.linspace(0, len(track.centreline) - 1, n).astype(int)]
    drives = {
        name: {"x": xy[:, 0] + shift, "y": xy[:, 1], "speed": np.linspace(0, top, n)}
        for name, shift, top in (("expert", 0.0, 20.0), ("best RL run", 1.5, 25.0))
    }
    out = tmp_path / "track.png"
    plots.track_lines(
        track.centreline, track.half_width, drives, out, notes={"expert": "lap 30.0 s"}
    )
    pixels = assert_png(out, min_colours=50)  # track, grass, and a colour ramp
    assert pixels.shape[1] > pixels.shape[0]  # panels side by side


def test_animation_writes_a_looping_gif(tmp_path: Path):
    track = make_track(5)
    frames = [render_rgb(track, *track.centreline[i * 20], 0.0, size=120) for i in range(6)]
    out = tmp_path / "lap.gif"
    plots.animation(frames, out, fps=5, captions=[f"t {i}" for i in range(6)])
    assert assert_gif(out) == 6
    with Image.open(out) as image:
        assert image.info["duration"] == 200 and image.info["loop"] == 0
    with pytest.raises(ValueError, match="captions"):
        plots.animation(frames, out, captions=["one"])
    with pytest.raises(ValueError, match="no frames"):
        plots.animation([], out)


def test_loss_curves(tmp_path: Path):
    history = [{"epoch": e, "train_nll": 2 / e, "valid_nll": 2.2 / e + 0.01 * e} for e in (1, 2, 3)]
    out = tmp_path / "loss.png"
    plots.loss_curves(history, out)
    assert_png(out)


def test_plot_bc_stage_draws_the_losses_recorded_in_metrics_json(tmp_path: Path):
    """The loss plot is its own stage (rule plot_bc), drawn from BC's metrics.json."""
    from demo2rl.stages import plot_bc

    class Run:  # the one tracking call the stage makes
        def __init__(self) -> None:
            self.artifacts: list[str] = []

        def log_artifact(self, path, *args) -> None:
            self.artifacts.append(str(path))

    history = [{"epoch": e, "train_nll": 2 / e, "valid_nll": 2.2 / e + 0.01 * e} for e in (1, 2, 3)]
    metrics = tmp_path / "bc" / "metrics.json"
    metrics.parent.mkdir()
    metrics.write_text(json.dumps({"history": history, "best_epoch": 2}))
    out = tmp_path / "bc" / "loss.png"
    run = Run()
    plot_bc.plot_bc(metrics=str(metrics), out=str(out), run=run)
    assert_png(out)
    assert run.artifacts == [str(out)]


@pytest.mark.integration
def test_every_plot_of_the_workflow_is_a_valid_image(test_workflow: Path):
    results = test_workflow / "results" / EXP
    pngs = [*sorted((results / "report" / "plots").glob("[!.]*.png")), results / "bc" / "loss.png"]
    names = {p.name for p in pngs}
    assert {"learning_curves.png", "final_returns.png", "track_lines.png", "loss.png"} <= names
    for png in pngs:
        assert_png(png)
    assert assert_gif(results / "report" / "plots" / "best_lap.gif") > 2
