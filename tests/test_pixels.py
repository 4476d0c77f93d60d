"""Camera observations through every stage's code: the image classification agrees with SB3's,
frames stack identically in every env the workflow makes, a privileged expert drives from the
state while the data holds frames, BC keeps frames uint8 and streams them like it holds them,
and every arm starts from the CNN clone as it should, then trains."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import configs
import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first
from test_rl import RL_CFG, dataset_and_clone, job

from demo2rl import arms, observations, rl, tasks
from demo2rl.demos import dataset, rollout
from demo2rl.learning import acting, augment, bc, bc_data, checkpoints, policy, vec
from demo2rl.observations import ObservationKind
from demo2rl.stages import train_rl as train_rl_stage

CAMERA = {"camera": 16, "camera_view": 40.0, "max_steps": 40}
TASK = ("Racing-v0", CAMERA)
EXPERT = "demo2rl.experts.racing:pure_pursuit"
POLICY_CFG = configs.policy(cnn="small", net_arch=[32])


@pytest.fixture(scope="module")
def pixels(tmp_path_factory) -> tuple[Path, Path]:
    """A pixel dataset (12 episodes of 16x16 frames, 2 stacked, the expert reading the state)
    and a CNN clone trained on it."""
    return dataset_and_clone(
        tmp_path_factory.mktemp("pixels"),
        *TASK,
        EXPERT,
        12,
        policy_cfg=POLICY_CFG,
        frame_stack=2,
        expert_input="info.state",
        batch_size=64,
        max_epochs=3,
        patience=3,
    )


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Box(0, 255, (16, 16, 1), np.uint8),
        gym.spaces.Box(0, 255, (3, 32, 32), np.uint8),
        gym.spaces.Box(0, 255, (32, 3, 32), np.uint8),
        gym.spaces.Box(0, 255, (8, 8, 8), np.uint8),
        gym.spaces.Box(0, 1, (16, 16, 3), np.uint8),
        gym.spaces.Box(0, 255, (16, 16, 3), np.float32),
        gym.spaces.Box(0, 255, (4, 16, 16, 3), np.uint8),
        gym.spaces.Box(-1, 1, (39,), np.float32),
        gym.spaces.Discrete(3),
    ],
)
def test_image_classification_is_sb3s(space):
    """ObservationKind (torch-free, for collection) says what SB3 will do with the space: its
    ``sb3_image`` is SB3's test, and an image is one of those with its channels first or last."""
    kind = ObservationKind.of(space)
    assert kind.sb3_image == is_image_space(space)
    assert kind.image == (is_image_space(space) and np.argmin(space.shape) != 1)
    if kind.image:
        want = "CHW" if is_image_space_channels_first(space) else "HWC"
        assert kind.layout == want
        assert kind.channels_last == (want == "HWC")


@pytest.mark.parametrize(
    ("space", "looks_like_image", "image_column"),
    [
        (gym.spaces.Box(0, 255, (16, 16, 3), np.uint8), True, True),
        (gym.spaces.Box(0, 1, (16, 16, 3), np.uint8), True, True),
        (gym.spaces.Box(0, 255, (16, 16), np.uint8), True, True),
        (gym.spaces.Box(0, 255, (4, 16, 16, 3), np.uint8), True, True),
        (gym.spaces.Box(0, 255, (16,), np.uint8), True, False),
        (gym.spaces.Box(0, 255, (16, 16, 3), np.float32), True, False),
        (gym.spaces.Box(0, 1, (16, 16), np.float32), False, False),
        (gym.spaces.Box(-1, 1, (39,), np.float32), False, False),
        (gym.spaces.Discrete(3), False, False),
    ],
)
def test_the_probe_and_the_dataset_ask_looser_questions_than_image(
    space, looks_like_image, image_column
):
    """What the probe explains as almost-images (a Box of 3 or more dimensions, or of uint8) and
    what the dataset stores as image columns (uint8 rows of 2 or more dimensions) include every
    image, and more; the dataset's rule reads a column's dtype and row shape alone."""
    kind = ObservationKind.of(space)
    assert kind.looks_like_image == looks_like_image
    assert kind.image_column == image_column
    assert observations.image_column(space.dtype, space.shape) == image_column
    assert not kind.image or (kind.looks_like_image and kind.image_column)


def test_frames_stack_identically_in_every_env_the_workflow_makes():
    """The same seeds and actions give the same stacked frames in a single env, the rollouts'
    vector env and the RL stage's SB3 VecEnv; the stack is the last frames along channels."""
    n, steps = 3, 6
    single = tasks.make_env(*TASK, frame_stack=n)
    vector = tasks.make_vector_env(*TASK, 2, frame_stack=n)
    sb3 = vec.make_vec_env(*TASK, 2, "auto", frame_stack=n)  # auto picks dummy when stacking
    assert single.observation_space.shape == (16, 16, n)
    plain = tasks.make_env(*TASK)
    sb3.seed(5)
    got_single, _ = single.reset(seed=5)
    got_vector, _ = vector.reset(seed=[5, 6])
    got_sb3 = sb3.reset()
    frames = [plain.reset(seed=5)[0]] * n
    actions = np.tile([[0.1, 0.6]], (2, 1)).astype(np.float32)
    for _ in range(steps):
        expected = np.concatenate(frames[-n:], axis=-1)
        np.testing.assert_array_equal(got_single, expected)
        np.testing.assert_array_equal(got_vector[0], expected)
        np.testing.assert_array_equal(got_sb3[0], expected)
        got_single = single.step(actions[0])[0]
        got_vector = vector.step(actions)[0]
        got_sb3 = sb3.step(actions)[0]
        frames.append(plain.step(actions[0])[0])
    assert len({f.tobytes() for f in frames}) > 2  # the frames moved


def test_a_privileged_expert_reads_the_state_while_the_data_holds_frames():
    """On the camera task, the expert fed info['state'] drives exactly as it does on the state
    task: same actions and returns, while the recorded observations are the camera's frames."""
    seeds = [3, 4, 5]
    expert = tasks.load_expert(EXPERT)
    pixels_run = rollout.run_episodes(
        configs.task(*TASK), expert, seeds, n_envs=2, policy_input="info.state"
    )
    state_task = configs.task("Racing-v0", {"max_steps": 40})
    state_run = rollout.run_episodes(state_task, expert, seeds, n_envs=3)
    np.testing.assert_array_equal(pixels_run[0]["actions"], state_run[0]["actions"])
    np.testing.assert_array_equal(pixels_run[1]["return"], state_run[1]["return"])
    assert pixels_run[0]["observations"].shape[1:] == (16, 16, 1)
    assert pixels_run[0]["observations"].dtype == np.uint8


def test_an_info_key_the_env_does_not_report_stops_the_rollout_naming_it():
    expert = tasks.load_expert(EXPERT)
    with pytest.raises(rollout.RolloutError) as caught:
        rollout.run_episodes(configs.task(*TASK), expert, [3], n_envs=1, policy_input="info.speeds")
    message = str(caught.value)
    assert "'Racing-v0' reports no info['speeds'] at reset" in message
    assert "its info has: " in message and "state" in message and "_state" not in message


def test_bc_keeps_frames_uint8_and_streams_them_as_it_holds_them(pixels):
    demos_path, _ = pixels
    with bc_data.open_split_dataset(demos_path) as data:
        assert data.images
        transform = data.normalizer(10.0)
        assert isinstance(transform, policy.ImageObs) and transform.channels_last
        space = dataset.space_from_description(data.demos.attrs["action_space"])
        memory = bc_data.loaders(data, transform, space, torch.device("cpu"), 0.5, 1)
        stream = bc_data.loaders(data, transform, space, torch.device("cpu"), 1e-12, 1)
        assert (memory[2], stream[2]) == ("memory", "stream")
        pixels_bytes = data.train_mask.sum() * 16 * 16 * 2
        assert data.bytes_needed() < 4 * pixels_bytes  # uint8 counted, not float32
        for loader in (memory[0], stream[0]):
            obs, _ = next(loader.batches(8, None))
            assert obs.dtype == torch.uint8 and obs.shape[1:] == (2, 16, 16)  # channels first
        memory_rows = torch.cat([o for o, _ in memory[0].batches(64, None)])
        stream_rows = torch.cat([o for o, _ in stream[0].batches(64, None)])
        assert torch.equal(memory_rows, stream_rows)  # in file order: the same frames
    cfg = configs.bc(device="cpu", batch_size=64, max_epochs=2, patience=2)
    held = bc.train_bc(demos_path, policy_cfg=POLICY_CFG, bc_cfg=cfg, seed=1, threads=1)
    streamed = bc.train_bc(
        demos_path,
        policy_cfg=POLICY_CFG,
        bc_cfg=dataclasses.replace(cfg, memory_fraction=1e-12),
        seed=1,
        threads=1,
    )
    assert (held.data_path, streamed.data_path) == ("memory", "stream")
    # different shuffles (whole split vs blocks), the same data: close losses after 2 epochs
    a, b = held.history[-1]["valid_nll"], streamed.history[-1]["valid_nll"]
    assert abs(a - b) < 0.25 * abs(a) + 0.5, (a, b)
    augmented = bc.train_bc(
        demos_path,
        policy_cfg=POLICY_CFG,
        bc_cfg=dataclasses.replace(cfg, augment=2),
        seed=1,
        threads=1,
    )
    assert augmented.history[0]["train_nll"] != held.history[0]["train_nll"]


def test_random_shift_moves_frames_by_whole_pixels_with_edges_replicated():
    frames = torch.arange(2 * 1 * 5 * 5, dtype=torch.uint8).reshape(2, 1, 5, 5)
    shifted = augment.random_shift(frames, 2, torch.Generator().manual_seed(0))
    assert shifted.dtype == torch.uint8 and shifted.shape == frames.shape
    padded = torch.nn.functional.pad(frames.float(), (2, 2, 2, 2), mode="replicate")
    for i in range(2):  # each output is some 5x5 window of the padded frame
        windows = padded[i, 0].unfold(0, 5, 1).unfold(1, 5, 1).reshape(-1, 5, 5)
        assert (windows == shifted[i, 0].float()).all(dim=(1, 2)).any()


def test_every_arm_starts_from_the_cnn_clone_and_trains(pixels, tmp_path):
    """The warm start loads the clone strictly; the residual's base is exactly the clone (its
    own frozen encoder), its correction reads a fresh one; kickstart's teacher is the clone;
    scratch is fresh. Each then trains a few PPO updates on frames (no VecNormalize)."""
    demos_path, clone_path = pixels
    task = configs.task(*TASK, entry_point=EXPERT)
    task = dataclasses.replace(task, frame_stack=2)
    obs_space, act_space = tasks.spaces(*TASK, 2)
    clone, transform, _ = checkpoints.load_checkpoint(clone_path, obs_space, act_space)
    assert isinstance(clone.features_extractor, policy.SmallCNN)
    frames = dataset.read(demos_path).steps["observations"][:50]
    states = torch.as_tensor(transform(frames))
    cfg = RL_CFG | {"vec_env": "auto", "n_envs": 4, "total_timesteps": 256, "eval_every": 256}
    cfg["ppo"] = RL_CFG["ppo"] | {"n_steps": 64, "batch_size": 64, "n_epochs": 1}
    for arm in (a for a in arms.BUILTIN if not arms.get(a).off_policy):
        spec = job(pixels, tmp_path / arm, arm, cfg, task=TASK, eval_episodes=2)
        spec = dataclasses.replace(spec, task=task, policy=POLICY_CFG)
        env = rl.make_training_env(spec.task, spec.rl, transform, act_space, n_workers=1)
        try:
            start = rl.Start(
                arms.get(arm),
                env,
                POLICY_CFG,
                spec.rl,
                clone,
                lambda: None,
                lambda *_: None,
                3,
                "cpu",
            )
            model = rl.build_model(start)
        finally:
            env.close()
        mine = model.policy
        # SB3's advice to train on the CPU is for MLPs: none for this CNN on a GPU (SB3's check
        # reads only the device's type)
        model.device = torch.device("cuda")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model._maybe_recommend_cpu()
        model.device = torch.device("cpu")
        with torch.no_grad():
            want = acting.mean_actions(clone, states)
            got = acting.mean_actions(mine, states)
        if arm == "bc":
            assert mine.state_dict().keys() == clone.state_dict().keys()
            for name, value in clone.state_dict().items():
                if name != "log_std":  # the warm start sets its own exploration
                    assert torch.equal(mine.state_dict()[name], value), name
        elif arm == "residual":
            assert isinstance(mine, policy.ResidualPolicy)
            base = policy.BaseModel.extract_features(mine, states, mine.base_encoder)
            with torch.no_grad():
                base_mean = mine.base(base)
            np.testing.assert_array_equal(base_mean.numpy(), want.numpy())
            assert not torch.equal(
                mine.features_extractor.cnn[0].weight, clone.features_extractor.cnn[0].weight
            )
            torch.testing.assert_close(got, want, atol=0.05, rtol=0)  # a near-zero correction
        elif arm == "kickstart":
            assert model.guide is not None and model.guide.teacher is clone
            assert not torch.allclose(got, want, atol=1e-3)
        else:
            assert not torch.allclose(got, want, atol=1e-3)
        result = rl.train_rl(spec, key=train_rl_stage.run_key(spec, "demos", "clone"))
        assert result.timesteps == 256 and isinstance(result.normalizer, policy.ImageObs)
        assert np.isfinite(result.evaluations[-1]["return_mean"])


@pytest.mark.parametrize("arm", ["sac", "rlpd"])
def test_the_sac_arms_train_on_frames_stored_as_uint8(pixels, tmp_path, arm):
    """SAC on the camera task: the actor and the critics each read frames through their own
    image encoder (the config's); the replay stores the frames uint8 (channels first, as SB3's
    transposed env gives them) and so does rlpd's demonstration half; a few updates train."""
    task = dataclasses.replace(configs.task(*TASK, entry_point=EXPERT), frame_stack=2)
    cfg = RL_CFG | {"vec_env": "auto", "n_envs": 4, "eval_every": 256}
    cfg["sac"] = RL_CFG["sac"] | {
        "n_envs": 4,
        "eval_every": 256,
        "total_timesteps": 256,
        "learning_starts": 64,
        "buffer_size": 1024,
        "batch_size": 32,
        "critic_net_arch": [16],
        "augment": 2,
        "compile": False,
    }
    spec = job(pixels, tmp_path / arm, arm, cfg, task=TASK, eval_episodes=2)
    spec = dataclasses.replace(spec, task=task, policy=POLICY_CFG)
    result = rl.train_rl(spec, key=train_rl_stage.run_key(spec, "demos", "clone"))
    model = result.model
    assert result.timesteps == 256 and np.isfinite(result.evaluations[-1]["return_mean"])
    assert isinstance(model.actor.features_extractor, policy.SmallCNN)
    assert isinstance(model.critic.features_extractor, policy.SmallCNN)
    assert model.actor.features_extractor is not model.critic.features_extractor
    buffer = model.replay_buffer
    assert buffer.observations.dtype == np.uint8
    assert buffer.observations.shape[2:] == model.observation_space.shape  # (C, H, W)
    assert buffer.augment == 2
    if arm == "rlpd":
        assert buffer.demos is not None and buffer.demos.frames.dtype == np.uint8
        assert buffer.demos.frames.shape[1:] == model.observation_space.shape
        batch = buffer.sample(32)
        assert batch.observations.shape[1:] == model.observation_space.shape


def test_frames_are_gathered_batch_by_batch_into_the_batches_a_shuffled_copy_gives():
    """Frames skip the epoch's shuffled copy (half the RAM) and still make the same batches, in
    the same order, that the whole-split gather makes of vectors; kept batches stay intact."""
    frames = torch.randint(0, 256, (50, 1, 3, 3), dtype=torch.uint8)
    actions = torch.randn(50, 2)
    cpu = torch.device("cpu")
    per_batch = bc_data.MemoryLoader(frames, actions, cpu)
    whole = bc_data.MemoryLoader(frames.float(), actions, cpu)
    assert per_batch.per_batch and not whole.per_batch
    assert per_batch._obs_buf.numel() == 0  # no copy of the split
    got = list(per_batch.batches(8, torch.Generator().manual_seed(4)))
    want = list(whole.batches(8, torch.Generator().manual_seed(4)))
    assert len(got) == len(want) == 7
    for (obs, act), (obs_w, act_w) in zip(got, want, strict=True):
        assert obs.dtype == torch.uint8
        assert torch.equal(obs.float(), obs_w) and torch.equal(act, act_w)
