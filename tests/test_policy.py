"""The shared policy: SB3 compatibility, normalisation, action scaling, acting, checkpoints
(demo2rl.learning.policy, demo2rl.learning.acting, demo2rl.learning.checkpoints)."""

from __future__ import annotations

import dataclasses

import configs
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.wrappers import RescaleAction
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize
from torch import nn

from demo2rl.config import ConfigError
from demo2rl.demos.dataset import describe_space
from demo2rl.learning import acting, checkpoints
from demo2rl.learning import policy as P

CFG = configs.policy(net_arch={"pi": [32, 32], "vf": [16]}, activation="relu", log_std_init=-0.5)
OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)  # Pendulum's: rescaled to [-1, 1]
ONE = np.float32(1.0)


def make_policy(cfg=CFG, seed: int = 0):
    torch.manual_seed(seed)
    return P.build_policy(OBS, ACT, cfg)


def make_normalizer() -> P.ObsNormalizer:
    return P.ObsNormalizer(np.array([0.1, -0.2, 1.0]), np.array([0.5, 2.0, 1e-12]), 5.0, 1e-8)


def test_sb3_policy_kwargs_maps_the_config():
    kwargs = P.sb3_policy_kwargs(CFG, OBS)
    assert kwargs == {
        "net_arch": {"pi": [32, 32], "vf": [16]},
        "activation_fn": nn.ReLU,
        "log_std_init": -0.5,
        "ortho_init": True,
    }
    one_list = P.sb3_policy_kwargs(configs.policy(net_arch=[8]), OBS)
    assert one_list["net_arch"] == {"pi": [8], "vf": [8]}
    with pytest.raises(ConfigError, match="policy.activation.*'swish'"):
        P.sb3_policy_kwargs(configs.policy(activation="swish"), OBS)
    with pytest.raises(ConfigError, match="policy.depth"):
        configs.policy(depth=3)


def test_build_policy_is_what_ppo_builds_and_loads_strictly():
    env = DummyVecEnv([lambda: RescaleAction(gym.make("Pendulum-v1"), ONE * -1, ONE)])
    model = PPO("MlpPolicy", env, policy_kwargs=P.sb3_policy_kwargs(CFG, OBS), device="cpu", seed=0)
    policy = make_policy()
    assert type(policy) is type(model.policy)
    assert policy.action_space == model.policy.action_space == gym.spaces.Box(-1, 1, (1,))
    assert repr(policy) == repr(model.policy)
    model.policy.load_state_dict(policy.state_dict(), strict=True)
    x = torch.randn(5, 3)
    with torch.no_grad():
        torch.testing.assert_close(
            model.policy.get_distribution(x).mode(), policy.get_distribution(x).mode()
        )


def test_normalizer_matches_frozen_vecnormalize_bitwise():
    norm = make_normalizer()
    venv = VecNormalize(
        DummyVecEnv([lambda: gym.make("Pendulum-v1")]),
        training=False,
        norm_obs=True,
        norm_reward=False,
        clip_obs=norm.clip_obs,
        epsilon=norm.epsilon,
    )
    norm.apply_to(venv)
    obs = np.random.default_rng(0).normal(scale=3.0, size=(64, 3)).astype(np.float32)
    ours, theirs = norm(obs), venv.normalize_obs(obs)
    assert ours.dtype == theirs.dtype == np.float32
    np.testing.assert_array_equal(ours, theirs)
    assert np.abs(ours).max() == norm.clip_obs  # the near-constant feature is clipped
    back = P.ObsNormalizer.from_dict(norm.to_dict())
    np.testing.assert_array_equal(back.mean, norm.mean)
    np.testing.assert_array_equal(back.var, norm.var)
    assert (back.clip_obs, back.epsilon) == (norm.clip_obs, norm.epsilon)
    with pytest.raises(ValueError, match="clip_obs"):
        P.ObsNormalizer(norm.mean, norm.var, 3.0).apply_to(venv)


def test_action_scaling_inverts_rescale_action():
    assert P.needs_rescale(ACT)
    assert not P.needs_rescale(gym.spaces.Box(-1.0, 1.0, (2,)))
    assert not P.needs_rescale(gym.spaces.Box(-np.inf, np.inf, (2,)))
    assert not P.needs_rescale(gym.spaces.Discrete(3))
    box = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32))
    expert = np.array([[-2.0, 0.0], [2.0, 10.0], [0.5, 2.5]], np.float32)
    scaled = P.scale_actions(expert, box)
    np.testing.assert_allclose(scaled, [[-1, -1], [1, 1], [0.25, -0.5]], atol=1e-7)
    wrapper = RescaleAction(_BoxEnv(box), ONE * -1, ONE)
    np.testing.assert_allclose(np.stack([wrapper.action(a) for a in scaled]), expert, atol=1e-6)
    same = np.array([[0.3, -0.7]], np.float32)
    np.testing.assert_array_equal(P.scale_actions(same, gym.spaces.Box(-1.0, 1.0, (2,))), same)


def test_actor_normalises_clips_and_unscales():
    policy, norm = make_policy(), make_normalizer()
    with torch.no_grad():
        policy.action_net.bias.fill_(5.0)  # mean far outside [-1, 1]
    actor = acting.make_actor(policy, norm, ACT)
    obs = np.random.default_rng(1).normal(size=(7, 3)).astype(np.float32)
    actions = actor(obs)
    assert actions.shape == (7, 1) and actions.dtype == np.float32
    np.testing.assert_array_equal(actions, 2.0)  # clipped to 1, then mapped to the env's high
    with torch.no_grad():
        policy.action_net.bias.fill_(0.0)
        want = policy.get_distribution(torch.as_tensor(norm(obs))).mode().numpy()
    # (float32 rounding differs between batch sizes: the actor pads to ACT_BLOCK rows)
    np.testing.assert_allclose(actor(obs), 2.0 * np.clip(want, -1, 1), rtol=1e-5, atol=1e-7)
    sampled = acting.make_actor(policy, norm, ACT, deterministic=False)(obs)
    assert sampled.shape == (7, 1) and np.all(np.abs(sampled) <= 2.0)


def test_actions_do_not_depend_on_how_many_envs_act_together():
    """The number of envs stepped together is a speed setting: every split of the same
    observations into batches gives bitwise the same actions (torch alone does not)."""
    torch.set_num_threads(1)
    policy, norm = make_policy(), make_normalizer()
    actor = acting.make_actor(policy, norm, ACT)
    obs = np.random.default_rng(2).normal(size=(150, 3)).astype(np.float32)
    whole = actor(obs)
    for batch in (1, 3, 4, 7, 16, acting.ACT_BLOCK + 1):
        split = np.concatenate([actor(obs[i : i + batch]) for i in range(0, len(obs), batch)])
        np.testing.assert_array_equal(split, whole, err_msg=f"batches of {batch}")


def test_checkpoint_round_trip_is_plain_data(tmp_path):
    policy, norm = make_policy(seed=3), make_normalizer()
    path = tmp_path / "ckpt" / "bc.pt"
    meta = {"dataset_hash": "abc", "bc": {"lr": np.float64(1e-3)}, "arr": np.arange(3)}
    checkpoints.save_checkpoint(
        path, policy, norm, policy_cfg=CFG, observation_space=OBS, action_space=ACT, meta=meta
    )
    raw = torch.load(path, weights_only=True)
    assert raw["observation_space"] == describe_space(OBS)
    assert raw["meta"]["dataset_hash"] == "abc" and raw["meta"]["arr"] == [0, 1, 2]
    assert {"versions", "code_revision"} <= set(raw["meta"])
    assert raw["policy_cfg"]["net_arch"] == {"pi": [32, 32], "vf": [16]}
    loaded, norm2, ckpt = checkpoints.load_checkpoint(path, OBS, ACT, CFG)
    for key, value in policy.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value)
    obs = np.random.default_rng(2).normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_array_equal(
        acting.make_actor(loaded, norm2, ACT)(obs), acting.make_actor(policy, norm, ACT)(obs)
    )
    assert ckpt["format_version"] == checkpoints.CHECKPOINT_VERSION


def test_load_checkpoint_without_a_config_builds_the_recorded_network(tmp_path):
    """A stage that only acts with a checkpoint (evaluate) takes the network from it."""
    policy, norm = make_policy(seed=4), make_normalizer()
    path = tmp_path / "rl.pt"
    checkpoints.save_checkpoint(
        path, policy, norm, policy_cfg=CFG, observation_space=OBS, action_space=ACT, meta={}
    )
    loaded, _, ckpt = checkpoints.load_checkpoint(path, OBS, ACT)
    assert ckpt["policy_cfg"]["net_arch"] == {"pi": [32, 32], "vf": [16]}
    assert isinstance(loaded.mlp_extractor.policy_net[1], nn.ReLU)  # the recorded activation
    assert loaded.state_dict().keys() == policy.state_dict().keys()
    for key, value in policy.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    # the task's spaces are still checked
    other_obs = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    with pytest.raises(
        checkpoints.CheckpointError, match=r"rl.pt: observation_space shape \(3,\) vs"
    ):
        checkpoints.load_checkpoint(path, other_obs, ACT)


def test_load_checkpoint_refuses_mismatches(tmp_path):
    path = tmp_path / "bc.pt"
    checkpoints.save_checkpoint(
        path,
        make_policy(),
        make_normalizer(),
        policy_cfg=CFG,
        observation_space=OBS,
        action_space=ACT,
        meta={},
    )
    with pytest.raises(
        checkpoints.CheckpointError, match=r"policy.net_arch.pi is \[32, 32\] .* \[64\]"
    ):
        checkpoints.load_checkpoint(
            path, OBS, ACT, dataclasses.replace(CFG, net_arch={"pi": [64], "vf": [16]})
        )
    with pytest.raises(checkpoints.CheckpointError, match="policy.activation is 'relu' .* 'tanh'"):
        checkpoints.load_checkpoint(path, OBS, ACT, dataclasses.replace(CFG, activation="tanh"))
    other_obs = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    with pytest.raises(
        checkpoints.CheckpointError, match=r"bc.pt: observation_space shape \(3,\) vs \(2,\)"
    ):
        checkpoints.load_checkpoint(path, other_obs, ACT, CFG)
    with pytest.raises(checkpoints.CheckpointError, match="action_space low"):
        checkpoints.load_checkpoint(path, OBS, gym.spaces.Box(-1.0, 1.0, (1,), np.float32), CFG)
    # init-only keys do not matter once the weights are loaded
    checkpoints.load_checkpoint(
        path, OBS, ACT, dataclasses.replace(CFG, log_std_init=0.0, ortho_init=False)
    )
    with pytest.raises(checkpoints.CheckpointError, match="no such checkpoint"):
        checkpoints.load_checkpoint(tmp_path / "missing.pt", OBS, ACT, CFG)
    (tmp_path / "bad.pt").write_bytes(path.read_bytes()[:100])
    with pytest.raises(checkpoints.CheckpointError, match="bad.pt: unreadable"):
        checkpoints.load_checkpoint(tmp_path / "bad.pt", OBS, ACT, CFG)


def test_build_policy_init_does_not_depend_on_threads():
    previous = torch.get_num_threads()
    try:
        states = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            states.append(make_policy(configs.policy(), seed=5).state_dict())
    finally:
        torch.set_num_threads(previous)
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


def test_resolve_device():
    assert P.resolve_device("cpu") == torch.device("cpu")
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert P.resolve_device("auto").type == want
    with pytest.raises(ValueError, match="device"):
        P.resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            P.resolve_device("cuda:0")


class _BoxEnv(gym.Env):
    """Just an action space, for wrapping in RescaleAction."""

    def __init__(self, space: gym.spaces.Box) -> None:
        self.action_space = space
        self.observation_space = gym.spaces.Box(-1, 1, (1,))
