"""Racing-v0 camera mode: image observations, their batch independence, the privileged state."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.preprocessing import is_image_space

import demo2rl.envs  # noqa: F401  (registers Racing-v0)
from demo2rl.envs import camera
from demo2rl.envs.racing import (
    LOOKAHEAD_RANGE,
    N_LOOKAHEAD,
    OBS_DIM,
    RacingEnv,
    RacingVectorEnv,
)
from demo2rl.envs.sb3 import RacingVecEnv
from demo2rl.experts.racing import pure_pursuit


def noisy_expert(state: np.ndarray, t: int, cars: list[int], wobble: float = 0.6) -> np.ndarray:
    """The expert with a deterministic steering wobble (a function of the step and of each car's
    id in ``cars``, not of its place in the batch): the cars drive off-centre, at varied speeds,
    and some leave the track."""
    act = pure_pursuit(state)
    phase = 1.7 * np.asarray(cars, dtype=np.float64)
    act[:, 0] = np.clip(act[:, 0] + wobble * np.sin(0.15 * t + phase), -1.0, 1.0)
    return act


def drive_vec(n, seeds, steps, mode=AutoresetMode.NEXT_STEP, **kw):
    """Vector env driven by the noisy expert on info["state"]: obs, states, infos per step."""
    vec = RacingVectorEnv(n, autoreset_mode=mode, **kw)
    obs, info = vec.reset(seed=seeds)
    frames, states, infos, acts = [obs], [info["state"]], [info], []
    for t in range(steps):
        a = noisy_expert(info["state"], t, seeds)
        obs, _, _, _, info = vec.step(a)
        frames.append(obs)
        states.append(info["state"])
        infos.append(info)
        acts.append(a)
    return np.array(frames), np.array(states), infos, np.array(acts)


@pytest.mark.parametrize("size", [48, 32])
def test_observations_in_space(size):
    env = RacingEnv(camera=size)
    space = env.observation_space
    assert space.shape == (size, size, 1) and space.dtype == np.uint8
    assert np.all(space.low == 0) and np.all(space.high == 255) and is_image_space(space)
    frames, states, infos, _ = drive_vec(4, [1, 2, 3, 4], 120, camera=size, max_steps=50)
    assert frames.dtype == np.uint8 and frames.shape == (121, 4, size, size, 1)
    assert all(space.contains(f) for f in frames.reshape(-1, size, size, 1)[::7])
    assert states.dtype == np.float32 and states.shape == (121, 4, OBS_DIM)
    view = frames[:, :, : -camera.bar_rows(size)]
    assert set(np.unique(view)) == {camera.GRASS, camera.TRACK}
    assert any(info["off_track"].any() for info in infos)  # frames seen off the track too


def test_cars_independent_of_batch_size():
    seeds = [11, 12, 13, 14, 15]
    kw = {"camera": 48, "max_steps": 60}
    frames, states, infos, _ = drive_vec(5, seeds, 150, **kw)
    assert any(info["track_seed"][0] >= 2**30 for info in infos)  # autoresets happened
    for i in (0, 3):
        f1, s1, _, _ = drive_vec(1, [seeds[i]], 150, **kw)
        assert np.array_equal(f1[:, 0], frames[:, i]) and np.array_equal(s1[:, 0], states[:, i])


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_state_info_is_the_camera_free_observation(mode):
    n, kw = 3, {"max_steps": 40}
    cam = RacingVectorEnv(n, autoreset_mode=mode, camera=32, **kw)
    ref = RacingVectorEnv(n, autoreset_mode=mode, **kw)
    _, info_c = cam.reset(seed=5)
    obs_r, info_r = ref.reset(seed=5)
    assert np.array_equal(info_r["state"], obs_r)  # without a camera: the observation itself
    assert np.array_equal(info_c["state"], obs_r) and info_c["_state"].all()
    finals = 0
    for t in range(100):
        a = noisy_expert(obs_r, t, [0, 1, 2])
        _, _, _, _, info_c = cam.step(a)
        obs_r, _, _, _, info_r = ref.step(a)
        assert info_c["state"].dtype == np.float32 and np.array_equal(info_c["state"], obs_r)
        if "final_info" in info_c:
            finals += 1
            done = info_c["_final_info"]
            fin = info_c["final_info"]
            assert np.array_equal(fin["_state"], done)
            for i in np.flatnonzero(done):
                assert np.array_equal(fin["state"][i], info_r["final_obs"][i])
            assert not fin["state"][~done].any()
    assert finals > 0 or mode == AutoresetMode.NEXT_STEP


def test_single_env_state_and_reset_info():
    env, ref = RacingEnv(camera=48), RacingEnv()
    obs, info = env.reset(seed=9)
    obs_r, info_r = ref.reset(seed=9)
    assert np.array_equal(info_r["state"], obs_r)
    assert info["state"].shape == (OBS_DIM,) and np.array_equal(info["state"], obs_r)
    for _ in range(30):
        a = pure_pursuit(info["state"])
        obs, _, _, _, info = env.step(a)
        obs_r, *_ = ref.step(a)
        assert np.array_equal(info["state"], obs_r)
    assert obs.shape == (48, 48, 1)


def test_track_geometry_and_orientation():
    """Lookahead points (car frame, from the state) fall on track pixels; their mirror images
    across the heading, where well off the track, on grass: the view is not flipped."""
    size, view = 64, 48.0
    env = RacingEnv(camera=size, camera_view=view)
    obs, info = env.reset(seed=4)
    m = view / size
    on, off = 0, 0
    k = N_LOOKAHEAD
    for _ in range(300):
        state = info["state"]
        ahead = state[3 : 3 + k].astype(np.float64) * LOOKAHEAD_RANGE
        left = state[3 + k : 3 + 2 * k].astype(np.float64) * LOOKAHEAD_RANGE
        for fx, ly in zip(ahead, left, strict=True):
            r = int(np.floor((1 - camera.CAR_HEIGHT) * size - fx / m))
            c = int(np.floor(size / 2 - ly / m))
            c_mirror = int(np.floor(size / 2 + ly / m))
            if not (0 <= r < size - camera.bar_rows(size) and 0 <= c < size):
                continue
            assert obs[r, c, 0] == camera.TRACK
            on += 1
            if abs(ly) > 10.0 and 0 <= c_mirror < size:  # 2 half widths off the centreline
                assert obs[r, c_mirror, 0] == camera.GRASS
                off += 1
        obs, _, term, trunc, info = env.step(pure_pursuit(state))
        assert not (term or trunc)
    assert on > 1000 and off > 20
    # the car itself is on the track, at the horizontal centre, 25% up from the bottom
    r_car = int((1 - camera.CAR_HEIGHT) * size)
    assert obs[r_car, size // 2, 0] == camera.TRACK and not info["off_track"]


def test_speed_bar_grows_with_speed():
    size = 48
    env = RacingEnv(camera=size)
    obs, info = env.reset(seed=2)
    bars, speeds = [], []
    for _ in range(40):
        obs, *_, info = env.step(np.array([0.0, 1.0], dtype=np.float32))
        bar = obs[size - camera.bar_rows(size) :, :, 0].astype(np.int64)
        assert np.array_equal(bar[0], bar[1])
        bars.append(bar[0])
        speeds.append(info["speed"])
    fill = np.array([b.sum() / 255.0 for b in bars])
    assert np.all(np.diff(fill) > 0) and np.all(np.diff(speeds) > 0)
    expected = size * np.array(speeds) / env.params.max_speed
    assert np.all(np.abs(fill - expected) <= 0.5 / 255 + 1e-9)
    for b, length in zip(bars, expected, strict=True):  # a bar from the left, then empty
        full = int(np.floor(length))
        assert np.all(b[:full] == 255) and np.all(b[full + 1 :] == 0)
    env.reset(seed=2)
    obs, _ = env.reset(seed=2)
    assert not obs[size - camera.bar_rows(size) :].any()  # at rest: empty bar


def test_three_adapters_give_identical_frames():
    n, kw, seed = 3, {"camera": 32, "max_steps": 30}, 21
    vec = RacingVectorEnv(n, autoreset_mode=AutoresetMode.SAME_STEP, **kw)
    sb3 = RacingVecEnv(n, **kw)
    singles = [RacingEnv(**kw) for _ in range(n)]
    o_vec, i_vec = vec.reset(seed=seed)
    sb3.seed(seed)
    o_sb3 = sb3.reset()
    single = [env.reset(seed=seed + i) for i, env in enumerate(singles)]
    assert np.array_equal(o_vec, o_sb3)
    assert np.array_equal(np.stack([o for o, _ in single]), o_vec)
    for i in range(n):
        assert np.array_equal(sb3.reset_infos[i]["state"], i_vec["state"][i])
        assert np.array_equal(single[i][1]["state"], i_vec["state"][i])
    states = i_vec["state"]
    done_seen = False
    for t in range(70):
        a = noisy_expert(states, t, [0, 1, 2])
        o_vec, _, te, tr, i_vec = vec.step(a)
        o_sb3, _, d_sb3, i_sb3 = sb3.step(a)
        assert np.array_equal(o_vec, o_sb3) and np.array_equal(d_sb3, te | tr)
        for i, env in enumerate(singles):
            o, _, te_i, tr_i, info = env.step(a[i])
            if te_i or tr_i:
                done_seen = True
                assert np.array_equal(o, i_vec["final_obs"][i])
                assert np.array_equal(o, i_sb3[i]["terminal_observation"])
                assert np.array_equal(info["state"], i_vec["final_info"]["state"][i])
                assert np.array_equal(info["state"], i_sb3[i]["state"])
                o, info = env.reset()  # unseeded, like the vector envs' autoreset
                assert np.array_equal(sb3.reset_infos[i]["state"], info["state"])
            else:
                assert np.array_equal(info["state"], i_sb3[i]["state"])
            assert np.array_equal(o, o_vec[i]) and np.array_equal(info["state"], i_vec["state"][i])
        states = i_vec["state"]
    assert done_seen
    assert np.array_equal(np.stack(sb3.get_attr("state")), i_vec["state"])


def test_check_env_and_render():
    check_env(gym.make("Racing-v0", render_mode="rgb_array", camera=48).unwrapped)
    sb3_check_env(RacingEnv(camera=48), warn=True)
    env = RacingEnv(render_mode="rgb_array", camera=32)
    env.reset(seed=1)
    img = env.render()
    assert img.shape == (400, 800, 3) and img.dtype == np.uint8
    plain = RacingEnv(render_mode="rgb_array")
    plain.reset(seed=1)
    assert np.array_equal(plain.render(), img[:, :400])  # the overview, camera beside it
    vec = RacingVecEnv(2, render_mode="rgb_array", camera=32)
    vec.reset()
    assert [f.shape for f in vec.get_images()] == [(400, 800, 3)] * 2


def test_camera_kwargs_checked_and_default_unchanged():
    for bad in ({"camera": 4}, {"camera": -1}, {"camera": 48.0}, {"camera": True}):
        with pytest.raises(ValueError, match="camera"):
            RacingEnv(**bad)
    with pytest.raises(ValueError, match="camera_view"):
        RacingEnv(camera=48, camera_view=0.0)
    env = RacingEnv()
    assert env.core.camera is None and env.observation_space.shape == (OBS_DIM,)
    obs, info = env.reset(seed=0)
    assert np.array_equal(info["state"], obs)  # the state is in every info, camera or not
    obs, _, _, _, info = env.step(np.zeros(2, dtype=np.float32))
    assert np.array_equal(info["state"], obs)
    sb3 = RacingVecEnv(2)
    first = sb3.reset()
    np.testing.assert_array_equal(sb3.reset_infos[0]["state"], first[0])
    obs, _, _, infos = sb3.step(np.zeros((2, 2), dtype=np.float32))
    np.testing.assert_array_equal(infos[1]["state"], obs[1])
