"""Racing-v0: tracks, dynamics, determinism, adapters, autoreset, rendering."""

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from stable_baselines3.common.vec_env import DummyVecEnv

import demo2rl.envs  # noqa: F401  (registers Racing-v0)
from demo2rl.envs.racing import (
    DEFAULTS,
    DT,
    MAX_STEER,
    N_LOOKAHEAD,
    OBS_DIM,
    UNSEEDED_HIGH,
    UNSEEDED_LOW,
    WHEELBASE,
    RacingCore,
    RacingEnv,
    RacingParams,
    RacingVectorEnv,
)
from demo2rl.envs.render import render_rgb
from demo2rl.envs.sb3 import RacingVecEnv
from demo2rl.envs.tracks import N_POINTS, make_track

K = N_LOOKAHEAD


def action_table(steps: int, n: int, seed: int = 0) -> np.ndarray:
    """Random actions biased to throttle and left, so cars speed up and some leave the track."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1.0, 1.0, size=(steps, n, 2))
    a[..., 0] = 0.5 * a[..., 0] + 0.15
    a[..., 1] = 0.5 + 0.5 * np.abs(a[..., 1])
    return a.astype(np.float32)


def follow(obs: np.ndarray, gain: float = 1.0) -> np.ndarray:
    """Minimal pure-pursuit steering toward the 3rd lookahead point, zero pedal."""
    x, y = obs[:, 3 + 2], obs[:, 3 + K + 2]
    steer = np.arctan(WHEELBASE * 2.0 * y / (x * x + y * y) / 44.0) / MAX_STEER * gain
    return np.stack([np.clip(steer, -1, 1), np.zeros_like(steer)], axis=1)


# ---------------------------------------------------------------- tracks


def test_tracks_valid_over_many_seeds():
    hw = DEFAULTS.half_width
    for seed in range(150):
        tr = make_track(seed)
        pts = tr.centreline
        assert pts.shape == (N_POINTS, 2) and tr.curvature.shape == (N_POINTS,)
        assert 250.0 <= tr.length <= 450.0
        assert np.max(np.abs(tr.curvature)) * 2.0 * hw <= 1.02  # radius ≥ 2 half widths
        seg = np.hypot(*(np.roll(pts, -1, axis=0) - pts).T)
        assert np.allclose(seg, tr.length / N_POINTS, rtol=0.02)  # uniform in arc length
        area = 0.5 * np.sum(pts[:, 0] * np.roll(pts[:, 1], -1) - np.roll(pts[:, 0], -1) * pts[:, 1])
        assert area > 0  # counter-clockwise
        # distant parts of the track never come close: the bands cannot touch
        dist = np.hypot(pts[:, None, 0] - pts[None, :, 0], pts[:, None, 1] - pts[None, :, 1])
        arc = np.arange(N_POINTS) * tr.length / N_POINTS
        sep = np.abs(arc[:, None] - arc[None, :])
        sep = np.minimum(sep, tr.length - sep)
        assert dist[sep > 10 * hw].min() > 3.0 * hw
    corners = [1.0 / np.abs(make_track(s).curvature).max() for s in range(150)]
    assert min(corners) < 11.0 and max(corners) > 20.0  # hairpins and sweepers


def test_track_deterministic():
    a, b = make_track(123), make_track(123)
    assert np.array_equal(a.centreline, b.centreline) and a.length == b.length
    assert not np.array_equal(a.centreline, make_track(124).centreline)


# ---------------------------------------------------------------- dynamics


def fresh_core(seed: int = 3) -> RacingCore:
    core = RacingCore(1)
    core.reset_cars([0], [seed])
    return core


def test_throttle_accelerates_and_brake_stops():
    core = fresh_core()
    speeds = []
    for _ in range(20):
        core.step(np.array([[0.0, 1.0]]))
        speeds.append(core.speed[0])
    assert np.all(np.diff(speeds) > 0)
    assert speeds[0] == pytest.approx(DEFAULTS.max_accel * DT)
    top = speeds[-1]
    core.step(np.array([[0.0, -1.0]]))
    assert top - core.speed[0] > 0.7 * DEFAULTS.max_brake * DT
    for _ in range(40):
        core.step(np.array([[0.0, -1.0]]))
    assert core.speed[0] == 0.0  # no reversing


def test_positive_steering_turns_left():
    core = fresh_core()
    for _ in range(10):
        core.step(np.array([[0.0, 1.0]]))
    yaw0 = core.yaw[0]
    core.step(np.array([[0.5, 0.0]]))
    assert 0 < core.yaw[0] - yaw0 < 0.5
    core2 = fresh_core()
    for _ in range(10):
        core2.step(np.array([[0.0, 1.0]]))
    core2.step(np.array([[-0.5, 0.0]]))
    assert core2.yaw[0] - yaw0 < 0


def test_grip_limits_yaw_rate_and_scrubs_speed():
    core = fresh_core()
    core.speed[:] = 3.0  # slow: the requested yaw rate is achieved
    yaw0 = core.yaw[0]
    core.step(np.array([[1.0, 0.0]]))
    v = core.speed[0]
    assert core.yaw[0] - yaw0 == pytest.approx(v * np.tan(MAX_STEER) / WHEELBASE * DT, rel=1e-9)
    core = fresh_core()
    core.speed[:] = 20.0  # fast: yaw rate saturates at grip / v and the car loses speed
    yaw0 = core.yaw[0]
    core.step(np.array([[1.0, 0.0]]))
    v_before_scrub = 20.0 - DEFAULTS.max_accel * (20.0 / DEFAULTS.max_speed) ** 2 * DT
    assert core.yaw[0] - yaw0 == pytest.approx(DEFAULTS.grip / v_before_scrub * DT, rel=1e-9)
    assert core.speed[0] < v_before_scrub - 0.5  # asked for ~4x the grip: scrubs speed


@pytest.mark.parametrize("speed,slides", [(6.0, False), (24.0, True)])
def test_too_fast_into_tight_corner_slides_off(speed, slides):
    seed = next(s for s in range(100) if np.abs(make_track(s).curvature).max() > 0.09)
    track = make_track(seed)
    apex = int(np.argmax(np.abs(track.curvature)))
    start = (apex - int(40.0 / (track.length / N_POINTS))) % N_POINTS  # 40 m before the apex
    core = fresh_core(seed)
    core.x[:], core.y[:] = track.centreline[start]
    core.yaw[:] = track.heading[start]
    core.cos_yaw[:], core.sin_yaw[:] = np.cos(core.yaw), np.sin(core.yaw)
    core.seg[:], core.s[:] = start, start * core.ds[0]
    core.speed[:] = speed
    off = False
    for _ in range(60):
        obs = core.observe()
        act = follow(obs)
        act[:, 1] = 0.3 * (speed - core.speed[0])  # hold the speed
        core.step(act)
        off |= bool(abs(core.lateral[0]) > DEFAULTS.half_width)
    assert off == slides


def test_reward_is_progress_and_off_track_penalty():
    core = fresh_core()
    total = 0.0
    for _ in range(30):
        r, term, trunc = core.step(np.array([[0.0, 1.0]]))
        total += r[0]
        assert not term[0] and not trunc[0]
    assert total == pytest.approx(DEFAULTS.progress_scale * core.progress[0], abs=1e-9)
    core.lateral[:] = DEFAULTS.half_width + 1.0  # pretend to be off, but keep the position
    core.x += -core.sin_yaw * (DEFAULTS.half_width + 1.0)
    core.y += core.cos_yaw * (DEFAULTS.half_width + 1.0)
    r, term, _ = core.step(np.array([[0.0, 0.0]]))
    assert core.info_arrays()["off_track"][0] and not term[0]
    assert r[0] < 0


def test_truncation_and_termination():
    env = RacingEnv(max_steps=7)
    env.reset(seed=0)
    for t in range(7):
        _, _, term, trunc, _ = env.step(np.array([0.0, 0.2], dtype=np.float32))
        assert not term and trunc == (t == 6)
    env = RacingEnv()
    env.reset(seed=0)
    term = False
    for _ in range(200):  # full throttle, full left: leaves the track and terminates
        _, _, term, trunc, info = env.step(np.array([1.0, 1.0], dtype=np.float32))
        if term:
            break
    assert term and info["off_track"]


# ---------------------------------------------------------------- determinism and batching


def rollout_core(seeds, actions: np.ndarray, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    core = RacingCore(len(seeds), RacingParams(**kwargs))
    core.reset_cars(range(len(seeds)), seeds)
    obs, rew = [core.observe()], []
    for a in actions:
        r, _, _ = core.step(a)
        obs.append(core.observe())
        rew.append(r)
    return np.array(obs), np.array(rew)


def test_same_seed_same_actions_identical():
    acts = action_table(200, 3)
    o1, r1 = rollout_core([5, 6, 7], acts)
    o2, r2 = rollout_core([5, 6, 7], acts)
    assert np.array_equal(o1, o2) and np.array_equal(r1, r2)


def test_cars_independent_of_batch_size_and_position():
    seeds = [11, 12, 13, 14, 15]
    acts = action_table(250, 5, seed=1)
    obs, rew = rollout_core(seeds, acts)
    for i, seed in enumerate(seeds):  # alone (N=1)
        o1, r1 = rollout_core([seed], acts[:, i : i + 1])
        assert np.array_equal(o1[:, 0], obs[:, i]) and np.array_equal(r1[:, 0], rew[:, i])
    perm = [3, 0, 4, 1, 2]  # permuted batch
    op, rp = rollout_core([seeds[p] for p in perm], acts[:, perm])
    assert np.array_equal(op, obs[:, perm]) and np.array_equal(rp, rew[:, perm])
    big = 19  # larger batch, car 2 at position 11 among other cars
    others = action_table(250, big, seed=2)
    others[:, 11] = acts[:, 2]
    ob, rb = rollout_core([100 + j if j != 11 else seeds[2] for j in range(big)], others)
    assert np.array_equal(ob[:, 11], obs[:, 2]) and np.array_equal(rb[:, 11], rew[:, 2])


def test_obs_always_inside_observation_space():
    space = RacingEnv().observation_space
    obs, _ = rollout_core(list(range(8)), action_table(300, 8, seed=3))
    assert obs.dtype == np.float32 and obs.shape[-1] == OBS_DIM
    assert np.all(obs >= space.low) and np.all(obs <= space.high)
    assert np.all(np.isfinite(obs))


def test_unseeded_reset_draws_reserved_track_seed():
    env = RacingEnv()
    env.reset(seed=4)
    _, info = env.reset()
    assert UNSEEDED_LOW <= info["track_seed"] < UNSEEDED_HIGH
    _, info = env.reset(seed=4)
    assert info["track_seed"] == 4
    _, info2 = env.reset()
    env.reset(seed=4)
    assert env.reset()[1]["track_seed"] == info2["track_seed"]  # chain is reproducible


# ---------------------------------------------------------------- adapters agree exactly


def run_gym_vec(venv, seed, actions):
    out = [venv.reset(seed=seed)[0]]
    rews, terms, truncs, finals = [], [], [], []
    for a in actions:
        o, r, te, tr, info = venv.step(a)
        out.append(o)
        rews.append(r)
        terms.append(te)
        truncs.append(tr)
        finals.append(info.get("final_obs"))
    return np.array(out), np.array(rews), np.array(terms), np.array(truncs), finals


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_vector_env_matches_sync_vector_env_of_single_envs(mode):
    n, kw = 4, {"max_steps": 40}
    acts = action_table(130, n, seed=4)
    ref = SyncVectorEnv([lambda: RacingEnv(**kw) for _ in range(n)], autoreset_mode=mode)
    ours = RacingVectorEnv(n, autoreset_mode=mode, **kw)
    assert ours.metadata["autoreset_mode"] == mode
    a = run_gym_vec(ref, 50, acts)
    b = run_gym_vec(ours, 50, acts)
    for x, y in zip(a[:4], b[:4], strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    assert a[2].any() and a[3].any()  # both terminations and truncations happened
    if mode == AutoresetMode.SAME_STEP:
        for fa, fb in zip(a[4], b[4], strict=True):
            assert (fa is None) == (fb is None)
            if fa is not None:
                for ea, eb in zip(fa, fb, strict=True):
                    assert (ea is None and eb is None) or np.array_equal(ea, eb)


def test_three_adapters_agree_across_episode_ends():
    n, kw, seed = 4, {"max_steps": 40}, 77
    acts = action_table(130, n, seed=5)
    _, r_vec, te_vec, tr_vec, _ = run_gym_vec(
        RacingVectorEnv(n, autoreset_mode=AutoresetMode.SAME_STEP, **kw), seed, acts
    )
    ovec = RacingVectorEnv(n, autoreset_mode=AutoresetMode.SAME_STEP, **kw)
    sb3 = RacingVecEnv(n, **kw)
    dummy = DummyVecEnv([lambda: RacingEnv(**kw) for _ in range(n)])
    sb3.seed(seed)
    dummy.seed(seed)
    o_sb3, o_dummy = sb3.reset(), dummy.reset()
    o_vec, _ = ovec.reset(seed=seed)
    assert np.array_equal(o_sb3, o_vec) and np.array_equal(o_dummy, o_vec)
    for t, a in enumerate(acts):
        o1, r1, d1, i1 = sb3.step(a)
        o2, r2, d2, i2 = dummy.step(a)
        o3, r3, te3, tr3, i3 = ovec.step(a)
        assert np.array_equal(o1, o2) and np.array_equal(o1, o3)
        assert np.array_equal(r1, r_vec[t]) and np.array_equal(r1, r3)
        assert r1.dtype == np.float64 and np.array_equal(r1.astype(np.float32), r2)
        assert np.array_equal(d1, d2) and np.array_equal(d1, te3 | tr3)
        assert np.array_equal(te3, te_vec[t]) and np.array_equal(tr3, tr_vec[t])
        for j in range(n):
            assert i1[j]["TimeLimit.truncated"] == i2[j]["TimeLimit.truncated"]
            assert i1[j].get("lap_time") == i2[j].get("lap_time")
            # SB3 infos of a finished car describe its last step, gymnasium's its new episode
            vec_info = i3["final_info"] if d1[j] else i3
            assert i1[j]["track_seed"] == i2[j]["track_seed"] == vec_info["track_seed"][j]
            assert i1[j]["progress"] == i2[j]["progress"] == vec_info["progress"][j]
            if d1[j]:
                a, b = dict(sb3.reset_infos[j]), dict(dummy.reset_infos[j])
                assert np.array_equal(a.pop("state"), b.pop("state")) and a == b
                term = i1[j]["terminal_observation"]
                assert np.array_equal(term, i2[j]["terminal_observation"])
                assert np.array_equal(term, i3["final_obs"][j])
    # explicit reseeds after the episode ends agree too
    sb3.seed(900)
    dummy.seed(900)
    assert np.array_equal(sb3.reset(), dummy.reset())
    assert sb3.get_attr("track_seed") == [900 + i for i in range(n)]


def test_partial_reset_with_mask_matches_sync_vector_env():
    n, kw = 5, {"max_steps": 25}
    acts = action_table(80, n, seed=6)
    ref = SyncVectorEnv(
        [lambda: RacingEnv(**kw) for _ in range(n)], autoreset_mode=AutoresetMode.DISABLED
    )
    ours = gym.make_vec("Racing-v0", num_envs=n, autoreset_mode=AutoresetMode.DISABLED, **kw)
    assert isinstance(ours.unwrapped, RacingVectorEnv)
    assert ours.metadata["autoreset_mode"] == AutoresetMode.DISABLED
    o_ref, _ = ref.reset(seed=[1, 2, 3, 4, 5])
    o_our, _ = ours.reset(seed=[1, 2, 3, 4, 5])
    assert np.array_equal(o_ref, o_our)
    n_resets = 0
    for t, a in enumerate(acts):
        r1, r2 = ref.step(a), ours.step(a)
        for x, y in zip(r1[:4], r2[:4], strict=True):
            assert np.array_equal(x, y)
        mask = r1[2] | r1[3]  # finished cars get unseeded resets ...
        seeds: list[int | None] = [None] * n
        if t == 12:  # ... and two running cars are reseeded explicitly mid-episode
            mask[[1, 3]] = True
            seeds[1], seeds[3] = 20, 40
        if mask.any():
            n_resets += 1
            o_ref, i_ref = ref.reset(seed=seeds, options={"reset_mask": mask.copy()})
            o_our, i_our = ours.reset(seed=seeds, options={"reset_mask": mask.copy()})
            assert np.array_equal(o_ref, o_our)
            assert np.array_equal(i_our["_track_seed"], mask)
            assert np.array_equal(i_ref["track_seed"][mask], i_our["track_seed"][mask])
            if t == 12:
                assert list(i_our["track_seed"][[1, 3]]) == [20, 40]
    assert n_resets >= 3


def test_partial_reset_leaves_other_cars_alone():
    n = 5
    mask = np.array([False, True, False, True, False])
    vec = RacingVectorEnv(n, autoreset_mode=AutoresetMode.DISABLED)
    vec.reset(seed=0)
    a = np.tile(np.array([[0.05, 0.8]], dtype=np.float32), (n, 1))
    for _ in range(20):
        before, *_ = vec.step(a)
    o_vec, info = vec.reset(seed=[None, 20, None, 40, None], options={"reset_mask": mask})
    assert np.array_equal(o_vec[~mask], before[~mask])
    assert np.all(info["progress"][~mask] == 0) and not info["_progress"][~mask].any()
    single = RacingEnv()
    o, _ = single.reset(seed=20)
    assert np.array_equal(o, o_vec[1])
    o_next, *_ = vec.step(a)
    o_single, *_ = single.step(a[1])
    assert np.array_equal(o_single, o_next[1])
    assert np.all(o_next[~mask, 0] > before[~mask, 0])  # the others kept driving


def test_vector_reset_seed_int_means_seed_plus_i():
    vec = RacingVectorEnv(3)
    _, info = vec.reset(seed=10)
    assert list(info["track_seed"]) == [10, 11, 12]
    assert not info["_lap_time"].any() and np.isnan(info["lap_time"]).all()


def test_next_step_autoreset_semantics():
    vec = RacingVectorEnv(2, max_steps=3)
    vec.reset(seed=[1, 2])
    a = np.zeros((2, 2), dtype=np.float32)
    for _ in range(3):
        _, r, _, trunc, _ = vec.step(a)
    assert trunc.all()
    obs, r, term, trunc, info = vec.step(a)  # this step resets instead of stepping
    assert np.all(r == 0) and not term.any() and not trunc.any()
    assert np.all(info["progress"] == 0) and np.all(obs[:, 0] == 0)
    assert np.all(info["track_seed"] >= UNSEEDED_LOW)


def test_disabled_mode_does_not_reset():
    vec = RacingVectorEnv(2, autoreset_mode="Disabled", max_steps=2)
    vec.reset(seed=[1, 2])
    a = np.full((2, 2), 0.5, dtype=np.float32)
    vec.step(a)
    _, _, _, trunc, _ = vec.step(a)
    assert trunc.all()
    _, _, _, trunc, info = vec.step(a)
    assert trunc.all() and list(info["track_seed"]) == [1, 2]


# ---------------------------------------------------------------- API checks, rendering


def test_gymnasium_check_env():
    from gymnasium.utils.env_checker import check_env

    check_env(gym.make("Racing-v0", render_mode="rgb_array").unwrapped)
    check_env(gym.make("Racing-v0", half_width=4.0, off_track_limit=1.0).unwrapped)


def test_sb3_check_env():
    from stable_baselines3.common.env_checker import check_env

    check_env(RacingEnv(), warn=True)


def test_render_image():
    track = make_track(2)
    img = render_rgb(track, *track.centreline[10], track.heading[10], size=200)
    assert img.shape == (200, 200, 3) and img.dtype == np.uint8
    colours = {tuple(c) for c in img.reshape(-1, 3)[::7]}
    assert (110, 110, 110) in colours and (60, 140, 60) in colours  # track and grass
    assert np.any(np.all(img == (220, 30, 30), axis=-1))  # the car
    env = RacingEnv(render_mode="rgb_array")
    env.reset(seed=1)
    assert env.render().shape == (400, 400, 3)
    assert RacingEnv().render() is None
    vec = RacingVectorEnv(2, render_mode="rgb_array")
    vec.reset(seed=0)
    assert len(vec.render()) == 2
    sb3 = RacingVecEnv(2, render_mode="rgb_array")
    sb3.reset()
    assert sb3.render(mode="rgb_array").shape[-1] == 3
    assert len(sb3.get_images()) == 2


def test_sb3_vecenv_methods():
    sb3 = RacingVecEnv(3, max_steps=10)
    assert sb3.env_is_wrapped(gym.Wrapper) == [False] * 3
    assert sb3.get_attr("render_mode") == [None] * 3
    sb3.seed(5)
    sb3.reset()
    assert sb3.get_attr("track_seed", indices=[0, 2]) == [5, 7]
    assert sb3.env_method("render", indices=1) == [None]
    sb3.set_attr("foo", 3)
    assert sb3.get_attr("foo") == [3, 3, 3]
    with pytest.raises(ValueError):
        sb3.set_attr("foo", 4, indices=[0])


def test_import_does_not_pull_torch_or_sb3():
    code = (
        "import sys, gymnasium, demo2rl.envs; "
        "assert 'Racing-v0' in gymnasium.registry; "
        "assert 'torch' not in sys.modules and 'stable_baselines3' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
