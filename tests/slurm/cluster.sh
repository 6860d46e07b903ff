#!/usr/bin/env bash
# A real one-machine Slurm cluster with accounting, for the `slurm` integration tests.
#
#   bash tests/slurm/cluster.sh start   # install if missing, start munged, mariadbd, slurmdbd,
#                                       # slurmctld, slurmd; wait until `sinfo` shows the node idle
#   bash tests/slurm/cluster.sh stop    # stop the daemons by the pids they wrote
#   bash tests/slurm/cluster.sh status
#
# Why accounting: without slurmdbd, `sacct` fails, submitit's job.state stays UNKNOWN and a job
# killed without a result makes job.result() wait forever. There is no systemd here, so every
# daemon is started by hand, in order. Idempotent: `start` on a running cluster is a no-op.
# State lives under $ABLATE_SLURM_DIR (default /tmp/ablate-slurm). Needs root (apt-get, munge).
set -euo pipefail

STATE=${ABLATE_SLURM_DIR:-/tmp/ablate-slurm}
CLUSTER=ablate
CONF_DIR=/etc/slurm
PIDS="$STATE/pids"
LOGS="$STATE/logs"

log() { echo "[cluster.sh] $*" >&2; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
  local need=()
  for b in munged slurmctld slurmd slurmdbd sinfo mariadbd; do
    command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] || need+=("$b")
  done
  [ ${#need[@]} -eq 0 ] && return 0
  log "installing slurm, munge, mariadb (missing: ${need[*]})"
  export DEBIAN_FRONTEND=noninteractive
  # Wait (up to 10 min) for another apt-get/dpkg (a CI image's unattended upgrade, another
  # set-up step) to release its lock, instead of failing at once.
  local apt=(apt-get -o DPkg::Lock::Timeout=600)
  "${apt[@]}" update -qq >/dev/null
  # policy-rc.d stops Debian's postinst from trying to start services (there is no init system).
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  "${apt[@]}" install -y -qq --no-install-recommends munge slurmctld slurmd slurm-client slurmdbd \
    mariadb-server >/dev/null
  rm -f /usr/sbin/policy-rc.d
}

write_configs() {
  local cpus mem
  # Not plain `nproc`: it honours OMP_NUM_THREADS (tests/run.sh sets 1), and the node would
  # then declare 1 CPU and refuse every 2-task job (squeue: PartitionConfig).
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
  mkdir -p "$CONF_DIR" "$STATE"/{ctld,spool,mysql,run} "$PIDS" "$LOGS"
  cat >"$CONF_DIR/slurm.conf" <<EOF
# written by tests/slurm/cluster.sh: one node, accounting through slurmdbd
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$PIDS/slurmctld.pid
SlurmdPidFile=$PIDS/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SchedulerType=sched/backfill
# Short scheduling intervals: tests should not wait a minute for the next pass.
SchedulerParameters=sched_interval=5,bf_interval=5
SlurmctldParameters=preempt_send_user_signal
# Small on purpose: the tests check that bigger studies are split into several arrays.
MaxArraySize=3
MinJobAge=300
KillWait=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$CONF_DIR/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
PidFile=$PIDS/slurmdbd.pid
LogFile=$LOGS/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$CONF_DIR/slurmdbd.conf"
}

start_munge() {
  alive "$PIDS/munged.pid" && return 0
  mkdir -p /etc/munge /var/log/munge /run/munge /var/lib/munge
  [ -s /etc/munge/munge.key ] || mungekey -c -k /etc/munge/munge.key
  chown -R munge:munge /etc/munge /var/log/munge /run/munge /var/lib/munge
  chmod 700 /etc/munge && chmod 400 /etc/munge/munge.key
  rm -f /run/munge/munged.pid
  su -s /bin/sh munge -c "/usr/sbin/munged --force"
  for _ in $(seq 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
  cp /run/munge/munged.pid "$PIDS/munged.pid"
}

start_mariadb() {
  alive "$PIDS/mariadbd.pid" && return 0
  local datadir="$STATE/mysql"
  if [ ! -d "$datadir/mysql" ]; then
    mariadb-install-db --user=root --datadir="$datadir" >"$LOGS/mariadb-install.log" 2>&1
  fi
  (setsid mariadbd --user=root --datadir="$datadir" --bind-address=127.0.0.1 \
    --socket="$STATE/run/mysqld.sock" --pid-file="$PIDS/mariadbd.pid" \
    --log-error="$LOGS/mariadbd.log" </dev/null >/dev/null 2>&1 &)
  for _ in $(seq 100); do
    mariadb --socket="$STATE/run/mysqld.sock" -e 'select 1' >/dev/null 2>&1 && break
    sleep 0.2
  done
  mariadb --socket="$STATE/run/mysqld.sock" <<'EOF'
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;
EOF
}

start_slurmdbd() {
  alive "$PIDS/slurmdbd.pid" && return 0
  /usr/sbin/slurmdbd
  for _ in $(seq 100); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2; done
  sacctmgr -n list cluster format=cluster 2>/dev/null | grep -qw "$CLUSTER" \
    || sacctmgr -i add cluster "$CLUSTER" >/dev/null
}

start_slurmctld() {
  # Already up: apply a possibly changed slurm.conf instead of restarting, and cancel the jobs
  # an earlier run left (a job whose test was killed holds the node: every job after it pends
  # on "Resources" until the tests time out).
  if alive "$PIDS/slurmctld.pid"; then
    scontrol reconfigure >/dev/null 2>&1 || true
    local left
    left=$(squeue -h -o %i 2>/dev/null | wc -l)
    [ "$left" -gt 0 ] && { log "cancelling $left job(s) left from an earlier run"; scancel --full --user "$(id -un)" || true; }
    return 0
  fi
  # -c: start with no jobs; a job saved in StateSaveLocation by an earlier cluster is not run.
  /usr/sbin/slurmctld -c
  for _ in $(seq 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.2; done
}

start_slurmd() {
  alive "$PIDS/slurmd.pid" && return 0
  /usr/sbin/slurmd -N localhost
}

wait_idle() {
  for _ in $(seq 150); do
    state=$(sinfo -h -N -o '%T' 2>/dev/null | head -1 || true)
    case "$state" in
      idle|mixed|allocated) log "cluster up (node $state)"; return 0 ;;
      down*|drain*) scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 0.2
  done
  log "node never became idle (last state: ${state:-none}); see $LOGS"
  return 1
}

stop_one() {
  local f="$PIDS/$1.pid" pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

case "${1:-}" in
  start)
    [ "$(id -u)" = 0 ] || { log "needs root (apt-get, munge user)"; exit 1; }
    install_packages
    write_configs
    start_munge
    start_mariadb
    start_slurmdbd
    start_slurmctld
    start_slurmd
    wait_idle
    ;;
  stop)
    for d in slurmd slurmctld slurmdbd mariadbd munged; do stop_one "$d"; done
    log "stopped"
    ;;
  status)
    for d in munged mariadbd slurmdbd slurmctld slurmd; do
      if alive "$PIDS/$d.pid"; then echo "$d running"; else echo "$d stopped"; fi
    done
    sinfo 2>/dev/null || true
    ;;
  *)
    echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
