#!/usr/bin/env bash
# A Troupe job across hosts of its own: one network namespace per task, each with its own
# address on a private bridge (inside a namespace of its own too: nothing outside the
# test's namespaces is touched or reached) and the tasks' host names in an /etc/hosts of
# its own. Runs PROGRAM in every task with TF_CONFIG naming the tasks by host name and a
# cluster secret, optionally cuts tasks' links for a while, and ends every process it
# started (by pid) and every namespace it made, whatever happens.
#
# Usage: netns_cluster.sh BIN_DIR PROGRAM PS WORKERS [--cut TASK AT_S FOR_S]...
#        [--cut-between TASK OTHER AT_S FOR_S]... [--qdisc SPEC] [--tfjob NAME.NAMESPACE]
#        [-- PROGRAM_ARGS...]
#   --cut: TASK's whole link goes down AT_S seconds into training, for FOR_S seconds.
#   --cut-between: only TASK and OTHER stop reaching each other (a blackhole route to the
#   other's address in each one's namespace); both keep reaching everyone else.
#   Either may be given several times: the cuts run in turn, each AT_S counted from the
#   start of training (a cut due while the one before lasts starts when it ends).
#   PS = 0: a workers-only job (MultiWorkerMirroredStrategy), worker 0 the chief.
#   --tfjob: host names and TF_CONFIG as Kubeflow's training operator writes them for a
#   TFJob NAME in NAMESPACE ("NAME-worker-0.NAMESPACE.svc:2222", "environment": "cloud").
# Prints the chief's JSON line wrapped as {"ok", "chief": {...}, "cut": the first cut,
# "cuts": [every cut]} as its last line; {"skipped": why} when this machine cannot make namespaces (not root, no iproute2).
set -uo pipefail

bin="$1" program="$2" n_ps="$3" n_workers="$4"
shift 4
declare -a cut_tasks=() cut_others=() cut_ats=() cut_fors=()
qdisc="" tfjob=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cut) cut_tasks+=("$2") cut_others+=("") cut_ats+=("$3") cut_fors+=("$4"); shift 4 ;;
    --cut-between)
      cut_tasks+=("$2") cut_others+=("$3") cut_ats+=("$4") cut_fors+=("$5"); shift 5 ;;
    --qdisc) qdisc="$2"; shift 2 ;;
    --tfjob) tfjob="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "{\"ok\":false,\"error\":\"unknown argument $1\"}"; exit 2 ;;
  esac
done

skip() { echo "{\"ok\":true,\"skipped\":\"$1\"}"; exit 0; }
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "no iproute2 (ip)"

tag="tr$$"
sw="${tag}-sw"
run_dir=$(mktemp -d /tmp/troupe-netns-XXXXXX)
declare -a namespaces=() pids=()

cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  for ns in "${namespaces[@]}"; do
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  rm -rf "$run_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$sw" || skip "cannot create a network namespace"
namespaces+=("$sw")
ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up || skip "no bridge support"

# The tasks: chief (with PS jobs), ps-N, worker-N; one namespace, address and name each.
tasks=()
[ "$n_ps" -gt 0 ] && tasks+=("chief-0")
for ((i = 0; i < n_ps; i++)); do tasks+=("ps-$i"); done
for ((i = 0; i < n_workers; i++)); do tasks+=("worker-$i"); done
# A task's host name: "worker-0.troupe.test", or a TFJob's "NAME-worker-0.NAMESPACE.svc".
host_of() {
  if [ -n "$tfjob" ]; then echo "${tfjob%%.*}-$1.${tfjob#*.}.svc"; else echo "$1.troupe.test"; fi
}
hosts="127.0.0.1 localhost"$'\n'
i=0
for t in "${tasks[@]}"; do
  i=$((i + 1))
  hosts+="10.231.0.$((10 + i)) $(host_of "$t")"$'\n'
done
i=0
for t in "${tasks[@]}"; do
  i=$((i + 1))
  ns="${tag}-$t"
  ip netns add "$ns" || exit 1
  namespaces+=("$ns")
  mkdir -p "/etc/netns/$ns" && printf '%s' "$hosts" > "/etc/netns/$ns/hosts"
  ip link add "v$i" netns "$ns" type veth peer name "s$i" netns "$sw" || exit 1
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "10.231.0.$((10 + i))/24" dev "v$i"
  ip -n "$ns" link set "v$i" up
  ip -n "$sw" link set "s$i" master br0 up
  if [ -n "$qdisc" ]; then  # a shaped link: "tbf rate 1gbit burst 64kb latency 20ms", "netem delay 1ms"
    # shellcheck disable=SC2086
    tc -n "$ns" qdisc add dev "v$i" root $qdisc 2>/dev/null || skip "this kernel has no qdisc '$qdisc'"
  fi
done

# TF_CONFIG's cluster by host name; one secret for the job.
cluster=$(python3 - "$n_ps" "$n_workers" "$(host_of TASK)" <<'PY'
import json, sys
ps, workers, pattern = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
host = lambda t: pattern.replace("TASK", t) + ":2222"
c = {}
if ps > 0:
    c["chief"] = [host("chief-0")]
    c["ps"] = [host(f"ps-{i}") for i in range(ps)]
c["worker"] = [host(f"worker-{i}") for i in range(workers)]
print(json.dumps(c))
PY
)
environment=""
[ -n "$tfjob" ] && environment=',"environment":"cloud"'

secret="$run_dir/cluster-secret"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$secret"
chmod 600 "$secret"

chief_task="chief-0"
[ "$n_ps" -eq 0 ] && chief_task="worker-0"
chief_pid=0
for t in "${tasks[@]}"; do
  type="${t%-*}" index="${t##*-}"
  tf="{\"cluster\":$cluster,\"task\":{\"type\":\"$type\",\"index\":$index}$environment}"
  ip netns exec "${tag}-$t" env TF_CONFIG="$tf" TROUPE_CLUSTER_SECRET_FILE="$secret" \
    "$bin/$program" "$@" > "$run_dir/$t.log" 2>&1 &
  pids+=($!)
  [ "$t" = "$chief_task" ] && chief_pid=$!
done

cut_json=null cuts_json="[]"
# A task's place in "${tasks[@]}", from 1: its switch port s<N>, its address 10.231.0.<10+N>.
place() {
  local i=0 t
  for t in "${tasks[@]}"; do i=$((i + 1)); [ "$t" = "$1" ] && break; done
  echo "$i"
}
if [ ${#cut_tasks[@]} -gt 0 ]; then
  # The faults' schedule: AT_S into training a task's link goes down, FOR_S later it
  # comes back. Training has begun once the first cut task's link has carried 4 MiB (a
  # few steps' tensors, far past start-up's handshakes): under a sanitizer start-up alone
  # can take seconds, and a cut before the first step finds nothing in flight. Waited for
  # (at most 120 s, or until the chief ends); the cuts count from then.
  first=$(place "${cut_tasks[0]}")
  link_bytes() {
    local rx tx
    rx=$(ip netns exec "$sw" cat "/sys/class/net/s$first/statistics/rx_bytes" 2>/dev/null || echo 0)
    tx=$(ip netns exec "$sw" cat "/sys/class/net/s$first/statistics/tx_bytes" 2>/dev/null || echo 0)
    echo $((rx + tx))
  }
  for _ in $(seq 2400); do
    [ "$(link_bytes)" -ge $((4 << 20)) ] && break
    kill -0 "$chief_pid" 2>/dev/null || break
    sleep 0.05
  done
  started_ms=$(date +%s%3N)
  cuts_json=""
  for k in "${!cut_tasks[@]}"; do
    task="${cut_tasks[$k]}" other="${cut_others[$k]}" at="${cut_ats[$k]}" for_s="${cut_fors[$k]}"
    wait_ms=$((started_ms + $(awk -v s="$at" 'BEGIN { printf "%d", s * 1000 }') - $(date +%s%3N)))
    [ "$wait_ms" -gt 0 ] && sleep "$(awk -v m="$wait_ms" 'BEGIN { printf "%.3f", m / 1000 }')"
    kill -0 "$chief_pid" 2>/dev/null || break  # the job ended first
    idx=$(place "$task")
    if [ -n "$other" ]; then
      o=$(place "$other")
      ip -n "${tag}-$task" route add blackhole "10.231.0.$((10 + o))/32"
      ip -n "${tag}-$other" route add blackhole "10.231.0.$((10 + idx))/32"
      sleep "$for_s"
      ip -n "${tag}-$task" route del blackhole "10.231.0.$((10 + o))/32"
      ip -n "${tag}-$other" route del blackhole "10.231.0.$((10 + idx))/32"
    else
      ip -n "$sw" link set "s$idx" down
      sleep "$for_s"
      ip -n "$sw" link set "s$idx" up
    fi
    one="{\"task\":\"$task\",\"other\":\"$other\",\"at_s\":$at,\"for_s\":$for_s}"
    [ "$cut_json" = null ] && cut_json=$one
    cuts_json="${cuts_json:+$cuts_json,}$one"
  done
  cuts_json="[$cuts_json]"
fi

# The chief ends the job, within 300 s; past that it is ended.
timeout 300 tail --pid="$chief_pid" -s 0.05 -f /dev/null
kill -KILL "$chief_pid" 2>/dev/null
wait "$chief_pid" 2>/dev/null
chief_rc=$?
chief_json=$(grep '^{' "$run_dir/$chief_task.log" | tail -1)
[ -n "$chief_json" ] || chief_json=null
if [ "$chief_json" = null ]; then
  tail -20 "$run_dir/$chief_task.log" >&2
fi
for t in "${tasks[@]}"; do
  [ "$t" = "$chief_task" ] && continue
  grep -h "refused\|troupe:" "$run_dir/$t.log" | head -5 >&2
done
echo "{\"ok\":$([ "$chief_rc" = 0 ] && echo true || echo false),\"chief_exit\":$chief_rc,\"tasks\":${#tasks[@]},\"cut\":$cut_json,\"cuts\":$cuts_json,\"chief\":$chief_json}"
