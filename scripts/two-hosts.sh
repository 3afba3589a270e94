#!/usr/bin/env bash
# Two "hosts" on this machine, for testing data parallelism across machines (docs/distributed.md,
# "Two hosts on one machine"): each host is a network namespace with its own host name (UTS
# namespace) and its own /dev/shm (mount namespace, a private tmpfs), the two joined by a veth
# pair with 198.18.0.1/30 and 198.18.0.2/30 (RFC 2544 benchmark addresses, which exist only inside
# the namespaces). OpenMPI reaches the second host through an rsh agent that enters its
# namespaces instead of ssh (mpirun --mca plm_rsh_agent, printed by `status`).
#
#   scripts/two-hosts.sh up        set up (idempotent: an existing set-up is kept)
#   scripts/two-hosts.sh down      tear down (idempotent: nothing left behind)
#   scripts/two-hosts.sh exec a|b CMD...   run CMD on host a or b
#   scripts/two-hosts.sh status    say whether it is up, and the mpirun options to use
#   scripts/two-hosts.sh mpirun-options   only the options (for scripts and tests)
#
# MIXP_TWO_HOSTS_ID names one set-up (default "default"), so that several can exist at once (the
# tests use their process id). Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN). The namespaces are held
# by one sleeping process per host, recorded with the veth names under $MIXP_TWO_HOSTS_DIR
# (default /run/mixp-two-hosts/ID); `down` ends those processes (their mount namespaces and
# tmpfs go with them) and deletes the network namespaces (the veth pair goes with them).
set -euo pipefail

ID=${MIXP_TWO_HOSTS_ID:-default}
[[ $ID =~ ^[A-Za-z0-9_-]{1,40}$ ]] || { echo "two-hosts.sh: error: MIXP_TWO_HOSTS_ID must be 1-40 of [A-Za-z0-9_-]" >&2; exit 2; }
DIR=${MIXP_TWO_HOSTS_DIR:-/run/mixp-two-hosts/$ID}
HASH=$(printf '%s' "$ID" | md5sum | cut -c1-8)
NS_A="mixp-$ID-a" NS_B="mixp-$ID-b"
VETH_A="mx${HASH}a" VETH_B="mx${HASH}b"  # interface names: at most 15 characters
ADDR_A=198.18.0.1 ADDR_B=198.18.0.2 SUBNET=198.18.0.0/30
HOST_A="mixp-$ID-a" HOST_B="mixp-$ID-b"

die() { echo "two-hosts.sh: error: $*" >&2; exit 1; }
usage() { sed -n '9,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

holder_alive() {  # $1 = a or b: its namespace holder still runs
  local pid
  pid=$(cat "$DIR/$1.pid" 2>/dev/null) || return 1
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null &&
    [[ $(readlink "/proc/$pid/ns/net") == "$(ip netns exec "$(ns_of "$1")" readlink /proc/self/ns/net 2>/dev/null)" ]]
}
ns_of() { [[ $1 == a ]] && echo "$NS_A" || echo "$NS_B"; }
is_up() { [[ -f $DIR/agent ]] && holder_alive a && holder_alive b; }

down() {
  local h pid ns
  # Whatever still runs on the hosts (ranks, OpenMPI's daemons) ends first, by process id.
  for ns in "$NS_A" "$NS_B"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      [[ $pid == $(cat "$DIR/a.pid" 2>/dev/null) || $pid == $(cat "$DIR/b.pid" 2>/dev/null) ]] ||
        kill -KILL "$pid" 2>/dev/null || true
    done
  done
  for h in a b; do
    pid=$(cat "$DIR/$h.pid" 2>/dev/null || true)
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
      # Only our own holder: it runs in that namespace (a recycled pid would not).
      if [[ $(readlink "/proc/$pid/ns/net" 2>/dev/null) == "$(ip netns exec "$(ns_of $h)" readlink /proc/self/ns/net 2>/dev/null)" ]]; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      fi
    fi
  done
  ip netns del "$NS_A" 2>/dev/null || true
  ip netns del "$NS_B" 2>/dev/null || true
  ip link del "$VETH_A" 2>/dev/null || true  # only if the namespaces were never made
  rm -rf "$DIR"
  rmdir "$(dirname "$DIR")" 2>/dev/null || true
}

up() {
  if is_up; then return 0; fi
  down  # a half-made set-up (an interrupted `up`) is made again from nothing
  trap 'down' ERR INT TERM
  mkdir -p "$DIR"
  ip netns add "$NS_A"
  ip netns add "$NS_B"
  # Made inside host a, so that the interface never exists outside the namespaces.
  ip -n "$NS_A" link add "$VETH_A" type veth peer name "$VETH_B" netns "$NS_B"
  ip -n "$NS_A" addr add "$ADDR_A/30" dev "$VETH_A"
  ip -n "$NS_B" addr add "$ADDR_B/30" dev "$VETH_B"
  for ns in "$NS_A" "$NS_B"; do
    ip -n "$ns" link set lo up
  done
  ip -n "$NS_A" link set "$VETH_A" up
  ip -n "$NS_B" link set "$VETH_B" up
  local h name
  for h in a b; do
    [[ $h == a ]] && name=$HOST_A || name=$HOST_B
    # The holder: its own host name and a private /dev/shm, then it sleeps until `down`.
    ip netns exec "$(ns_of $h)" unshare --uts --mount --propagation private \
      sh -c 'hostname "$1" && mount -t tmpfs -o mode=1777,size=256m "mixp-shm" /dev/shm &&
             echo ready && exec sleep infinity' sh "$name" >"$DIR/$h.out" 2>&1 </dev/null &
    echo $! >"$DIR/$h.pid"
  done
  for _ in $(seq 100); do
    grep -q ready "$DIR/a.out" 2>/dev/null && grep -q ready "$DIR/b.out" 2>/dev/null && break
    sleep 0.05
  done
  grep -q ready "$DIR/a.out" && grep -q ready "$DIR/b.out" ||
    die "the namespace holders did not start: $(cat "$DIR"/*.out)"
  # The rsh agent: OpenMPI runs `agent [options] HOST COMMAND...` as it would run ssh; this one
  # enters that host's namespaces and runs COMMAND with sh, as sshd would.
  cat >"$DIR/agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case "\$host" in
  $ADDR_A|$HOST_A) pid=\$(cat "$DIR/a.pid") ;;
  $ADDR_B|$HOST_B) pid=\$(cat "$DIR/b.pid") ;;
  *) echo "two-hosts agent: unknown host \$host" >&2; exit 255 ;;
esac
exec nsenter -t "\$pid" --net --uts --mount -- sh -c "\$*"
EOF
  chmod 755 "$DIR/agent"
  trap - ERR INT TERM
}

# --bind-to none: each host would bind its first rank to core 0, and both hosts' ranks would
# share one core of this machine. TCP only on the veth subnet (as btl_tcp_if_include on real
# machines); vader (shared memory) between the ranks of one host. TCP keepalive on the daemons'
# channel (probes after 2 s idle, 1 s apart, 2 lost = gone): a cut link then ends the run in
# seconds ("ORTE has lost communication with a remote daemon ... on node 198.18.0.2"); with
# OpenMPI's default (300 s) mpirun hung after the surviving rank's --comm-timeout fired.
mpirun_options() {
  echo "--mca plm_rsh_agent $DIR/agent --mca btl self,vader,tcp --mca btl_tcp_if_include $SUBNET --mca oob_tcp_if_include $SUBNET --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 2 --bind-to none"
}

cmd=${1:-}
[[ -n $cmd ]] || usage
shift
case $cmd in
  up | down | exec)
    [[ $(id -u) == 0 ]] || die "needs root (network, UTS and mount namespaces)"
    ;;
esac
case $cmd in
  up) up ;;
  down) down ;;
  exec)
    [[ $# -ge 2 && ($1 == a || $1 == b) ]] || usage
    is_up || die "not up (scripts/two-hosts.sh up)"
    h=$1
    shift
    exec nsenter -t "$(cat "$DIR/$h.pid")" --net --uts --mount --wd="$PWD" -- "$@"
    ;;
  status)
    if is_up; then
      echo "up: host a = $HOST_A ($ADDR_A, namespace $NS_A), host b = $HOST_B ($ADDR_B, namespace $NS_B)"
      echo "mpirun options: $(mpirun_options) -H $ADDR_A:N,$ADDR_B:N"
    else
      echo "down"
      exit 1
    fi
    ;;
  mpirun-options) mpirun_options ;;
  *) usage ;;
esac
