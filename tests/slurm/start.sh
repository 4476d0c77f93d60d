#!/usr/bin/env bash
# Start a real single-node SLURM cluster on this machine for the tests (and for trying the
# workflow's SLURM profile by hand): munged, MariaDB, slurmdbd, slurmctld and slurmd, one node
# with all of this machine's CPUs and memory and one fake GPU, partition "debug" (the default),
# account "demo2rl".
#
#   sudo tests/slurm/start.sh          # installs the Debian packages with apt when missing
#   sinfo; sbatch -A demo2rl ...; snakemake --profile profiles/slurm ...
#   sudo tests/slurm/stop.sh
#
# Idempotent: daemons that already run are left alone; the script returns once the node takes
# jobs. Everything lives in $DEMO2RL_SLURM_DIR (default /var/tmp/demo2rl-slurm) except one link,
# /etc/slurm/slurm.conf, to its slurm.conf (refused when this machine has a SLURM config of its
# own). It runs as root without systemd. Jobs get the memory (--mem) and time (-t) they ask for
# and no more: memory through cgroup v1 where root can create memory cgroups here
# (a step over its memory ends OUT_OF_MEMORY), else through jobacct_gather's OverMemoryKill
# (the step is cancelled); the choice is logged and `scontrol show config` shows it (TaskPlugin).
#
# Exit status: 0 the cluster is up; 77 this machine cannot run it (not root, no apt-get, the
# packages cannot be installed: no network); anything else is a real failure (see the logs it
# prints).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"
TIMEOUT=${DEMO2RL_SLURM_TIMEOUT:-120}
PACKAGES=(slurm-wlm slurmdbd munge mariadb-server)
START=$SECONDS

cannot() {
  log "cannot start the test cluster: $*"
  exit 77
}

fail() {
  log "FAILED: $*"
  for f in "$DIR"/log/*; do
    [[ -s $f ]] && { log "--- last lines of $f"; tail -n 15 "$f" >&2; }
  done
  exit 1
}

# wait_for SECONDS WHAT COMMAND...: until the command succeeds
wait_for() {
  local limit=$1 what=$2
  shift 2
  for ((i = 0; i < limit * 4; i++)); do
    if declare -F "$1" >/dev/null; then
      "$@" >/dev/null 2>&1 && return 0
    else # a SLURM client can hang a while on a daemon that is still starting
      timeout 10 "$@" >/dev/null 2>&1 && return 0
    fi
    sleep 0.25
  done
  fail "timed out after ${limit}s waiting for $what"
}

install_packages() {
  local missing=0 cmd
  for cmd in slurmctld slurmd slurmdbd sbatch sacct sacctmgr munged mariadbd mariadb-install-db \
    mariadb-admin; do
    command -v "$cmd" >/dev/null || missing=1
  done
  ((missing)) || return 0
  command -v apt-get >/dev/null || cannot "SLURM is not installed and there is no apt-get"
  log "installing ${PACKAGES[*]} with apt-get (about a minute)"
  # Debian's packages start their services on install; a policy-rc.d that exits 101 stops that
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
  fi
  local ok=1 apt_log
  apt_log=$(mktemp)
  export DEBIAN_FRONTEND=noninteractive
  apt-get -q update >"$apt_log" 2>&1 || ok=0
  if ((ok)); then
    apt-get -q install -y --no-install-recommends -o DPkg::Lock::Timeout=120 "${PACKAGES[@]}" \
      >>"$apt_log" 2>&1 || ok=0
  fi
  ((own_policy)) && rm -f "$policy"
  if ((!ok)); then
    tail -n 20 "$apt_log" >&2
    rm -f "$apt_log"
    cannot "apt-get could not install ${PACKAGES[*]} (no network or no package mirror?)"
  fi
  rm -f "$apt_log"
}

# a cgroup v1 memory hierarchy in which root can create groups (SLURM 22.05's cgroup/v1 plugin;
# cgroup v2 would need systemd or SLURM's own cgroup setup)
cgroups_usable() {
  [[ $(stat -f -c %T /sys/fs/cgroup 2>/dev/null) != cgroup2fs ]] || return 1
  local probe=/sys/fs/cgroup/memory/demo2rl-slurm-probe.$$
  mkdir "$probe" 2>/dev/null || return 1
  rmdir "$probe"
}

# how jobs' memory is limited: TASK_PLUGIN and ACCT_GATHER_PARAMS for slurm.conf. Processes are
# tracked through /proc either way (proctrack/linuxproc): with proctrack/cgroup, verified here,
# SIGTERM at a time limit reaches only a step's first process (the Snakemake inside the job),
# not the RL trainer it runs, which then cannot checkpoint before SIGKILL.
memory_limits() {
  if cgroups_usable; then
    TASK_PLUGIN=task/cgroup ACCT_GATHER_PARAMS=""
    MEMORY_LIMITS="cgroups (task/cgroup, ConstrainRAMSpace)"
  else
    TASK_PLUGIN=task/none ACCT_GATHER_PARAMS=JobAcctGatherParams=OverMemoryKill
    MEMORY_LIMITS="jobacct_gather OverMemoryKill (no usable cgroup v1 memory hierarchy here)"
  fi
}

# render TEMPLATE OUT: fill in the @NAMES@ of a config template
render() {
  sed -e "s|@DIR@|$DIR|g" -e "s|@HOST@|$HOST|g" -e "s|@NODE_HW@|$NODE_HW|g" \
    -e "s|@PARTITION@|$PARTITION|g" -e "s|@CTLD_PORT@|$CTLD_PORT|g" \
    -e "s|@SLURMD_PORT@|$SLURMD_PORT|g" -e "s|@DBD_PORT@|$DBD_PORT|g" \
    -e "s|@TASK_PLUGIN@|$TASK_PLUGIN|g" \
    -e "s|@ACCT_GATHER_PARAMS@|$ACCT_GATHER_PARAMS|g" "$1" >"$2.tmp"
  mv "$2.tmp" "$2"
}

write_configs() {
  mkdir -p "$DIR"/{etc,run,log,state,spool,munge}
  chmod 755 "$DIR" "$DIR/run" # munged wants its socket's directories searchable by all
  chmod 700 "$DIR/munge"
  # this machine as it is: CPUs, sockets, cores, threads and memory as slurmd itself sees them
  NODE_HW=$(slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]* //')
  [[ $NODE_HW == *CPUs=* ]] || fail "slurmd -C gave no hardware description"
  local running=0
  if daemon_pid slurmctld >/dev/null; then running=1; fi
  memory_limits
  render "$HERE/slurm.conf.in" "$DIR/etc/slurm.conf.new"
  render "$HERE/slurmdbd.conf.in" "$DIR/etc/slurmdbd.conf.new"
  cp "$HERE/gres.conf" "$DIR/etc/gres.conf.new"
  cp "$HERE/cgroup.conf" "$DIR/etc/cgroup.conf.new"
  for f in slurm.conf slurmdbd.conf gres.conf cgroup.conf; do
    if ((running)) && ! cmp -s "$DIR/etc/$f" "$DIR/etc/$f.new"; then
      log "note: $f changed but the cluster is running; run stop.sh then start.sh to apply it"
      rm -f "$DIR/etc/$f.new"
    else
      mv "$DIR/etc/$f.new" "$DIR/etc/$f"
    fi
  done
  chmod 600 "$DIR/etc/slurmdbd.conf" # slurmdbd refuses a readable config (it could hold a password)
  if [[ ! -s $DIR/munge/munge.key ]]; then
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$DIR/munge/munge.key"
  fi
}

# /etc/slurm/slurm.conf -> ours, unless another SLURM is configured on this machine
link_system_conf() {
  if [[ -L $SYSTEM_CONF && $(readlink "$SYSTEM_CONF") == "$SLURM_CONF" ]]; then
    return 0
  fi
  if [[ -e $SYSTEM_CONF || -L $SYSTEM_CONF ]]; then
    cannot "$SYSTEM_CONF exists and is not the test cluster's: this machine has a SLURM of its own"
  fi
  mkdir -p "$(dirname "$SYSTEM_CONF")"
  ln -s "$SLURM_CONF" "$SYSTEM_CONF"
}

# launch NAME COMMAND...: start a daemon in the foreground of its own session, record its PID
launch() {
  local name=$1 pid
  shift
  if pid=$(daemon_pid "$name"); then
    log "$name already running (pid $pid)"
    return 0
  fi
  local exe
  exe=$(readlink -f "$(command -v "$1")")
  setsid "$@" </dev/null >"$DIR/log/$name.out" 2>&1 &
  echo "$! $exe" >"$DIR/run/$name.started"
  log "started $name (pid $!)"
}

# the daemon runs (a just-launched one may still be on its way through setsid's exec)
alive() {
  for ((i = 0; i < 20; i++)); do
    daemon_pid "$1" >/dev/null && return 0
    sleep 0.25
  done
  fail "$1 is not running (it exited right after starting?)"
}

sql() { timeout 10 mariadb --no-defaults --socket="$MYSQL_UNIX_PORT" -u root -e "$1"; }

[[ $(id -u) == 0 ]] || cannot "it needs root (daemons run as root), and this is uid $(id -u)"
install_packages
HOST=$(hostname -s)
link_system_conf
write_configs

launch munged munged --foreground --force --key-file="$DIR/munge/munge.key" \
  --socket="$DIR/run/munge.socket" --pid-file="$DIR/run/munged.pid" \
  --seed-file="$DIR/munge/munged.seed" --log-file="$DIR/log/munged.log"
wait_for 20 "munged" munge --socket="$DIR/run/munge.socket" --no-input
alive munged

if [[ ! -d $DIR/mysql/mysql ]]; then
  rm -rf "$DIR/mysql"
  mariadb-install-db --no-defaults --datadir="$DIR/mysql" --user=root --skip-test-db \
    --auth-root-authentication-method=socket >"$DIR/log/mariadb-install.log" 2>&1 ||
    fail "mariadb-install-db failed"
fi
launch mariadbd mariadbd --no-defaults --datadir="$DIR/mysql" --socket="$MYSQL_UNIX_PORT" \
  --pid-file="$DIR/run/mariadbd.pid" --skip-networking --user=root \
  --log-error="$DIR/log/mariadb.log" --innodb-buffer-pool-size=64M
wait_for 60 "MariaDB" sql "SELECT 1"
alive mariadbd

launch slurmdbd slurmdbd -D
wait_for 60 "slurmdbd" sacctmgr -n show cluster
alive slurmdbd
# the cluster, the account and root's association in it (AccountingStorageEnforce=associations)
if [[ -z $(sacctmgr -n -P show cluster "$CLUSTER" format=cluster) ]]; then
  sacctmgr -i add cluster "$CLUSTER" >/dev/null
fi
if [[ -z $(sacctmgr -n -P show account "$ACCOUNT" format=account) ]]; then
  sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" Description=tests Organization=demo2rl \
    >/dev/null
fi
if [[ -z $(sacctmgr -n -P show association where user=root account="$ACCOUNT" format=user) ]]; then
  sacctmgr -i add user root Account="$ACCOUNT" DefaultAccount="$ACCOUNT" Cluster="$CLUSTER" \
    >/dev/null
fi

launch slurmctld slurmctld -D
wait_for 60 "slurmctld" scontrol ping
alive slurmctld
launch slurmd slurmd -D
alive slurmd

# until the node takes jobs; a node left DOWN or DRAINED by an earlier run is resumed once
node_ready() {
  local state
  state=$(timeout 10 sinfo -h -N -n "$HOST" -o %T 2>/dev/null) || return 1
  case $state in
  idle | mixed | allocated | completing) return 0 ;;
  down | drained | draining | "down*" | "drained*")
    if [[ ! -e $DIR/run/.resumed ]]; then
      touch "$DIR/run/.resumed"
      scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true
    fi
    return 1
    ;;
  *) return 1 ;;
  esac
}
rm -f "$DIR/run/.resumed"
wait_for "$TIMEOUT" "node $HOST to become idle" node_ready
alive slurmd
log "cluster up in $((SECONDS - START))s: node $HOST, partition $PARTITION, account $ACCOUNT"
log "memory limits: $MEMORY_LIMITS"
log "$(sinfo -h -N -n "$HOST" -o '%N %T cpus=%c mem=%mMB gres=%G')"
