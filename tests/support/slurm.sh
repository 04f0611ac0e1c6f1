#!/usr/bin/env bash
# A private single-node SLURM (munged + slurmctld + slurmd) for tests/cluster_slurm.rs, as root,
# without systemd. Everything (config, munge key, state, logs, pid files) lives in DIR; nothing
# under /etc is touched, and `stop` ends only the daemons whose pid files it wrote.
#
#   bash tests/support/slurm.sh start DIR PORT [GRES]   # prints nothing; SLURM_CONF=DIR/etc/slurm.conf
#   bash tests/support/slurm.sh stop DIR
#   bash tests/support/slurm.sh stop-controller DIR
#
# GRES default "gpu:2,hailo:1": a gpu gets fake device files (gres/gpu drops a GPU without
# File=), other names are count-only. Derived from ../shared/docs/slurm-single-node.sh, minus
# slurmrestd/JWT (Debian's package ships no auth/jwt plugin without recommends) and slurmdbd.
set -euo pipefail

cmd=${1:?start|stop}
DIR=${2:?DIR}
PORT=${3:-16900}
GRES=${4:-gpu:2,hailo:1}
NODE=localhost
CONF=$DIR/etc/slurm.conf
export SLURM_CONF=$CONF

wait_for() {  # wait_for SECONDS CMD...: poll CMD every 0.1 s until it succeeds
  local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || return 1
    sleep 0.1
  done
}

node_idle() { [ "$(sinfo -h -n $NODE -o %T)" = idle ]; }

write_config() {
  rm -rf "$DIR/state" "$DIR/spool"
  mkdir -p "$DIR"/{etc,state,spool,log,run,munge,dev}
  chmod 755 "$DIR/munge"
  [ -s "$DIR/munge/munge.key" ] || {
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1 count=1024 status=none
    chmod 600 "$DIR/munge/munge.key"
  }
  : > "$DIR/etc/gres.conf"
  local g name count i types=""
  for g in ${GRES//,/ }; do
    name=${g%%:*} count=${g##*:} types=${types:+$types,}$name
    if [ "$name" = gpu ]; then
      for i in $(seq 0 $((count - 1))); do
        [ -e "$DIR/dev/gpu$i" ] || mknod "$DIR/dev/gpu$i" c 1 3
      done
      echo "NodeName=$NODE Name=gpu File=$DIR/dev/gpu[0-$((count - 1))]" >> "$DIR/etc/gres.conf"
    else
      echo "NodeName=$NODE Name=$name Count=$count" >> "$DIR/etc/gres.conf"
    fi
  done
  # After every job, cancelled ones too: a container a job started is not in its process
  # tree, so SLURM's SIGKILL never reaches it. heddle's worker labels its containers
  # heddle.placed-on=slurm-job-ID.
  cat > "$DIR/etc/epilog.sh" <<'EOF'
#!/bin/sh
command -v docker >/dev/null || exit 0
ids=$(docker ps -aq --filter "label=heddle.placed-on=slurm-job-$SLURM_JOB_ID" 2>/dev/null)
[ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1
exit 0
EOF
  chmod 755 "$DIR/etc/epilog.sh"
  cat > "$CONF" <<EOF
ClusterName=heddle
SlurmctldHost=$NODE
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
DependencyParameters=kill_invalid_depend
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
Epilog=$DIR/etc/epilog.sh
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
MinJobAge=600
MaxArraySize=10001
MaxJobCount=100000
GresTypes=$types
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=${HEDDLE_SLURM_CPUS:-8} Gres=$GRES State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

stop_pid() {  # stop_pid NAME: TERM the pid in its pid file, wait up to 10 s, then KILL
  local f="$DIR/run/$1.pid" pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null && grep -q "^$1" "/proc/$pid/comm" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  rm -f "$f"
}

case "$cmd" in
  start)
    write_config
    munged --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
      --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
      --seed-file="$DIR/munge/munged.seed" --force
    wait_for 10 munge -S "$DIR/munge/munge.socket" -n || { echo "munged failed: $DIR/log/munged.log" >&2; exit 1; }
    slurmctld -c -f "$CONF"
    wait_for 20 scontrol ping || { echo "slurmctld failed: $(tail -5 "$DIR/log/slurmctld.log")" >&2; exit 1; }
    slurmd -f "$CONF" -N $NODE
    wait_for 30 node_idle || { echo "node not idle: $(tail -5 "$DIR/log/slurmd.log")" >&2; exit 1; }
    ;;
  stop)
    if [ -f "$CONF" ] && scontrol ping >/dev/null 2>&1; then
      squeue -h -o %A | xargs -r scancel 2>/dev/null || true
      wait_for 15 sh -c '[ -z "$(squeue -h)" ]' || true
    fi
    stop_pid slurmd
    stop_pid slurmctld
    stop_pid munged
    ;;
  stop-controller)  # slurmctld only, as if it crashed: jobs stay where they were
    stop_pid slurmctld
    ;;
  *) echo "usage: $0 start|stop|stop-controller DIR [PORT] [GRES]" >&2; exit 2 ;;
esac
