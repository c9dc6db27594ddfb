#!/usr/bin/env bash
# A real Slurm on this machine for one job step: munged, slurmctld and slurmd (Debian's),
# configured here under a temporary directory with one node, "localhost", then
# `srun -n TASKS BIN_DIR/PROGRAM ARGS...`, each task's output in its own log. Every daemon
# it started is ended by pid and the directory removed, whatever happens.
# Usage: local_slurm.sh BIN_DIR TASKS PROGRAM [ARGS...]
# Last line: {"ok", "srun_exit", "chief": <rank 0's last JSON line>}, or {"skipped": why}.
set -uo pipefail
bin="$1" tasks="$2" program="$3"
shift 3

skip() { echo "{\"ok\":true,\"skipped\":\"$1\"}"; exit 0; }
[ "$(id -u)" = 0 ] || skip "a private Slurm needs root"
for tool in munged slurmctld slurmd srun sinfo; do
  command -v "$tool" >/dev/null || skip "no $tool (Debian: slurmctld slurmd slurm-client munge)"
done

dir=$(mktemp -d /tmp/troupe-slurm-XXXXXX)
chmod 755 "$dir"
declare -a pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    timeout 10 tail --pid="$pid" -s 0.05 -f /dev/null
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# munge, on a socket and key of our own.
head -c 1024 /dev/urandom > "$dir/munge.key"
chmod 400 "$dir/munge.key"
munged -F --force --key-file="$dir/munge.key" --socket="$dir/munge.sock" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge.seed" \
  > "$dir/munged.out" 2>&1 &
pids+=($!)

mkdir -p "$dir/state" "$dir/spool"
cpus=$(( tasks > 2 ? tasks : 2 ))
cat > "$dir/slurm.conf" <<CONF
ClusterName=troupe
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
PlugStackConfig=/dev/null
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=troupe Nodes=localhost Default=YES MaxTime=10 State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF="$dir/slurm.conf"
# munged must answer before the Slurm daemons start (bounded).
for ((i = 0; i < 100; i++)); do [ -S "$dir/munge.sock" ] && break; sleep 0.05; done
slurmctld -D -i -f "$SLURM_CONF" > "$dir/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" > "$dir/slurmd.out" 2>&1 &
pids+=($!)
ready=no
for ((i = 0; i < 300; i++)); do  # up to 30 s for the node to come up idle
  state=$(sinfo -h -n localhost -o %T 2>/dev/null | head -1)
  [ "$state" = idle ] && { ready=yes; break; }
  sleep 0.1
done
if [ "$ready" != yes ]; then
  tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2
  echo "{\"ok\":false,\"error\":\"the local Slurm node did not come up (state: ${state:-none})\"}"
  exit 1
fi

# One secret for the job (what troupe launch would make), a free port base for its tasks.
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/cluster-secret"
chmod 600 "$dir/cluster-secret"
base=$(python3 -c 'import socket,random
while True:
    b = random.randint(20000, 30000); ok = True
    for p in range(b, b + '"$tasks"'):
        s = socket.socket()
        try: s.bind(("127.0.0.1", p))
        except OSError: ok = False
        s.close()
    if ok: print(b); break')
TROUPE_CLUSTER_SECRET_FILE="$dir/cluster-secret" TROUPE_SLURM_PORT_BASE="$base" \
  timeout 300 srun -n "$tasks" --time=5 --kill-on-bad-exit=1 --output="$dir/task-%t.log" \
  "$bin/$program" "$@"
rc=$?
chief=$(grep '^{' "$dir/task-0.log" 2>/dev/null | tail -1)
[ -n "$chief" ] || { chief=null; tail -20 "$dir"/task-*.log "$dir/slurmd.log" >&2; }
echo "{\"ok\":$([ $rc = 0 ] && echo true || echo false),\"srun_exit\":$rc,\"tasks\":$tasks,\"port_base\":$base,\"chief\":$chief}"
