#!/usr/bin/env bash
# Stop the test cluster that tests/slurm/start.sh started: first its jobs (so that no job process
# outlives slurmd), then exactly the daemons whose PIDs start.sh recorded, newest first. Safe to
# run when nothing runs. It removes the link /etc/slurm/slurm.conf that start.sh made. The state
# directory stays (a later start is quicker and keeps the
# accounting history); `stop.sh --purge` deletes it too.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"
PURGE=0
[[ ${1:-} == --purge ]] && PURGE=1

if [[ -d $DIR/run ]]; then
  if daemon_pid slurmctld >/dev/null && command -v squeue >/dev/null; then
    jobs=$(squeue -h -o %A 2>/dev/null || true)
    if [[ -n $jobs ]]; then
      log "cancelling the cluster's jobs: ${jobs//$'\n'/ }"
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      # SIGTERM now, SIGKILL after KillWait (30 s)
      for ((i = 0; i < 160; i++)); do
        [[ -z $(squeue -h -o %A 2>/dev/null) ]] && break
        sleep 0.25
      done
    fi
  fi
  for ((d = ${#DAEMONS[@]} - 1; d >= 0; d--)); do
    name=${DAEMONS[d]}
    if pid=$(daemon_pid "$name"); then
      kill -TERM "$pid" 2>/dev/null || true
      for ((i = 0; i < 120; i++)); do
        daemon_pid "$name" >/dev/null || break
        sleep 0.25
      done
      if daemon_pid "$name" >/dev/null; then
        log "$name (pid $pid) ignored SIGTERM for 30 s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
      fi
      log "stopped $name (pid $pid)"
    fi
    rm -f "$DIR/run/$name.started"
  done
else
  log "nothing to stop ($DIR/run does not exist)"
fi
kill_escaped_jobs # then any job process that escaped the cluster (common.sh)
if [[ -L $SYSTEM_CONF && $(readlink "$SYSTEM_CONF") == "$SLURM_CONF" ]]; then
  rm -f "$SYSTEM_CONF"
fi
if ((PURGE)) && [[ -d $DIR ]]; then
  rm -rf "$DIR"
  log "removed $DIR"
fi
