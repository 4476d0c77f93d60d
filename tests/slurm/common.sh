# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by start.sh and stop.sh
# Shared by start.sh and stop.sh (sourced, not run): where the test cluster lives and how its
# daemons are recognised. Every daemon started by start.sh has its PID in $DIR/run/<name>.started;
# stop.sh stops exactly those processes (checked against the executable, so a reused PID is safe).

# the cluster's state: configs, munge key, MariaDB data, SLURM state and spool, logs, PIDs
DIR=${DEMO2RL_SLURM_DIR:-/var/tmp/demo2rl-slurm}
# partition and account the tests (and you) submit to
PARTITION=${DEMO2RL_SLURM_PARTITION:-debug}
ACCOUNT=${DEMO2RL_SLURM_ACCOUNT:-demo2rl}
CLUSTER=demo2rl
# not SLURM's default ports (6817-6819), so a real SLURM on this machine is left alone
CTLD_PORT=6917
SLURMD_PORT=6918
DBD_PORT=6919

# The daemons read $DIR/etc (SLURM_CONF); client commands find the same slurm.conf through a
# link at SLURM's standard path, because the plugin's job step drops SLURM_CONF from the
# environment of the srun it runs inside each job.
export SLURM_CONF=$DIR/etc/slurm.conf
SYSTEM_CONF=/etc/slurm/slurm.conf
export MYSQL_UNIX_PORT=$DIR/run/mysqld.sock # slurmdbd's MariaDB client connects through it
export PATH=$PATH:/usr/sbin:/sbin

# daemons in start order: name, then the executable that must be running under its PID
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)

log() { echo "[slurm-test] $*" >&2; }

# the PID start.sh recorded for daemon $1, if that process is still running the executable
# recorded with it (a line "PID EXECUTABLE" in $DIR/run/$1.started)
daemon_pid() {
  local file=$DIR/run/$1.started pid exe
  [[ -f $file ]] || return 1
  read -r pid exe <"$file" || true
  [[ $pid =~ ^[0-9]+$ && -n $exe ]] || return 1
  [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$exe" ]] || return 1
  echo "$pid"
}

# Kill the job processes that escaped the cluster. proctrack/linuxproc tracks a step's processes
# by parentage, so one reparented to init is never killed: a Snakemake job step deadlocked in its
# own SIGTERM handler (snakemake/scheduling/job_scheduler.py's exit_gracefully takes a lock that
# its error handling holds) outlived the cluster so. Each carries this cluster's SLURM_CONF and a
# job id in its environment; nothing else does.
kill_escaped_jobs() {
  local environ pid vars
  for environ in /proc/[0-9]*/environ; do
    pid=${environ#/proc/}
    pid=${pid%/environ}
    vars=$({ tr '\0' '\n' <"$environ"; } 2>/dev/null) || continue
    if grep -qx "SLURM_CONF=$SLURM_CONF" <<<"$vars" && grep -q '^SLURM_JOB_ID=' <<<"$vars"; then
      log "killing pid $pid, a job process left by the cluster:" \
        "$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | cut -c1-120)"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}
