"""The test cluster's clean-up of job processes that escaped it (tests/slurm/common.sh's
kill_escaped_jobs, which tests/slurm/stop.sh runs after the daemons stop): a process with the
cluster's SLURM_CONF and a job id dies; a client of the cluster (no job id) and another
cluster's job live on. Needs no cluster: the processes are sleeps with those environments."""

from __future__ import annotations

import os
import subprocess

from conftest import REPO


def test_stop_kills_the_clusters_escaped_job_processes_only(tmp_path):
    conf = tmp_path / "etc" / "slurm.conf"
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}

    def sleeper(**env: str) -> subprocess.Popen:
        return subprocess.Popen(["sleep", "300"], env=base | env)

    escaped = sleeper(SLURM_CONF=str(conf), SLURM_JOB_ID="612")
    client = sleeper(SLURM_CONF=str(conf))
    other = sleeper(SLURM_CONF="/etc/other-cluster/slurm.conf", SLURM_JOB_ID="7")
    try:
        proc = subprocess.run(
            ["bash", "-c", f"source {REPO / 'tests' / 'slurm' / 'common.sh'} && kill_escaped_jobs"],
            env=base | {"DEMO2RL_SLURM_DIR": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert escaped.wait(timeout=30) == -9, "the escaped job process lives on"
        assert f"killing pid {escaped.pid}" in proc.stderr, proc.stderr
        assert client.poll() is None and other.poll() is None, "it killed what is not its job"
    finally:
        for p in (escaped, client, other):
            p.kill()
            p.wait()
