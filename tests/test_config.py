"""Bad config fails before any job runs, with a message naming the key (real `snakemake -n`)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from conftest import TEST_CONFIG, snakemake

BASE = yaml.safe_load(TEST_CONFIG.read_text())


def with_change(path: str, value) -> dict:
    config = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = config
    for key in parents:
        node = node[key]
    node[last] = value
    return config


CASES = {
    "unknown key": (with_change("collect.n_epsiodes", 5), ["'n_epsiodes' was unexpected"]),
    "wrong type": (
        with_change("collect.n_episodes", "ten"),
        ["'ten' is not of type 'integer'", "n_episodes"],
    ),
    "zero count": (with_change("collect.n_shards", 0), ["less than the minimum of 1", "n_shards"]),
    "negative count": (with_change("collect.n_envs", -2), ["minimum of 1", "n_envs"]),
    "more shards than episodes": (with_change("collect.n_shards", 99), ["'collect.n_shards'"]),
    "unknown env id": (
        with_change("task.env_id", "NoSuchTask-v3"),
        ["'task.env_id'", "NoSuchTask"],
    ),
    "expert does not import": (
        with_change("task.expert.entry_point", "nowhere.at_all:expert"),
        ["'task.expert.entry_point'", "cannot import 'nowhere.at_all'"],
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_config_is_rejected_naming_the_key(case, tmp_path: Path):
    config, expected = CASES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = snakemake(tmp_path, "-n", "--configfile", str(path), check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    for text in expected:
        assert text in output, output
    assert not (tmp_path / "results").exists(), "nothing may run on a bad config"


def test_schema_fills_defaults(tmp_path: Path):
    minimal = {"experiment": "defaults", "collect": {"n_episodes": 4, "n_shards": 2}}
    path = tmp_path / "minimal.yaml"
    path.write_text(yaml.safe_dump(minimal))
    proc = snakemake(tmp_path, "-n", "--configfile", str(path))
    assert "collect_shard" in proc.stdout + proc.stderr
