#!/usr/bin/env bash
# A CLIP network in namespaces (docs/clip.md, "Running a switch and its servers"): two clients
# (10.0.0.1 and 10.0.0.2, on a bridge) and an external host (198.51.100.2), each in a network
# namespace using the kernel's TCP and UDP; the switch's ports are veth ends left here; two
# servers, each in a namespace of its own with a data link to the switch and a management link
# (10.254.0.10+S) for heartbeats and replicas. Root only.
#
#   examples/switch/netns.sh up      # build it, write /tmp/tern-netns/serve.toml, print how to start
#   examples/switch/netns.sh down    # remove it
#
# Then, e.g.:  ip netns exec tern-c1 python3 -c 'import socket; s=socket.socket(2,2);
#   s.sendto(b"hi", ("198.51.100.2", 7777)); print(s.recvfrom(99))'  with an echo on tern-ext.
set -euo pipefail
cmd=${1:-}
dir=/tmp/tern-netns
here=$(cd "$(dirname "$0")" && pwd)

down() {
  for ns in tern-c1 tern-c2 tern-ext tern-s0 tern-s1; do ip netns del "$ns" 2>/dev/null || true; done
  for l in ternbr ternmg ternib ternp1 ternp2 ternd0 ternd1 ternv1 ternv2 ternm0 ternm1; do
    ip link del "$l" 2>/dev/null || true
  done
  rm -rf "$dir"
}

up() {
  [ "$(id -u)" = 0 ] || { echo "netns.sh: needs root (network namespaces)" >&2; exit 1; }
  down
  mkdir -p "$dir"
  ip link add ternbr type bridge && ip link set ternbr up
  n=1
  for c in tern-c1 tern-c2; do
    ip netns add "$c"
    ip link add "ternv$n" type veth peer name eth0 netns "$c"
    ip link set "ternv$n" master ternbr up
    ip -n "$c" link set eth0 address "02:00:00:00:01:0$n" up
    # One wire-sized frame a segment (veth would hand AF_PACKET GSO frames of many segments).
    ip -n "$c" link set eth0 gso_max_segs 1 gso_max_size 1500
    ip -n "$c" link set lo up
    ip -n "$c" addr add "10.0.0.$n/24" dev eth0
    ip -n "$c" route add default via 10.0.0.254
    n=$((n + 1))
  done
  # Switch port 1 (inside): one end on the bridge.
  ip link add ternp1 type veth peer name ternib
  ip link set ternib master ternbr up
  ip link set ternp1 up
  # Switch port 2 (outside): the external host.
  ip netns add tern-ext
  ip link add ternp2 type veth peer name eth0 netns tern-ext
  ip link set ternp2 up
  ip -n tern-ext link set eth0 address 02:00:00:00:02:01 up
  ip -n tern-ext link set eth0 gso_max_segs 1 gso_max_size 1500
  ip -n tern-ext link set lo up
  ip -n tern-ext addr add 198.51.100.2/24 dev eth0
  ip -n tern-ext route add 192.0.2.0/24 dev eth0
  for a in 192.0.2.1 192.0.2.2; do ip -n tern-ext neigh replace "$a" lladdr 02:00:00:00:00:fe dev eth0; done
  # Servers: data (switch ports 3, 4) and management.
  ip link add ternmg type bridge
  ip addr add 10.254.0.1/24 dev ternmg
  ip link set ternmg up
  for s in 0 1; do
    ip netns add "tern-s$s"
    ip -n "tern-s$s" link set lo up
    ip link add "ternd$s" type veth peer name eth0 netns "tern-s$s"
    # A request is a whole frame behind CLIP's header: more than the hosts' 1500-byte MTU.
    ip link set "ternd$s" mtu 9000 up
    ip -n "tern-s$s" link set eth0 mtu 9000 up
    ip link add "ternm$s" type veth peer name mgmt netns "tern-s$s"
    ip link set "ternm$s" master ternmg up
    ip -n "tern-s$s" addr add "10.254.0.1$s/24" dev mgmt
    ip -n "tern-s$s" link set mgmt up
  done
  for l in ternp1 ternp2 ternd0 ternd1 ternib; do echo 1 > "/proc/sys/net/ipv6/conf/$l/disable_ipv6"; done
  # Each host's flows on one core where its frames first arrive (RPS over all cores), as a
  # NIC's RSS does: a veth queues a frame on the core that sent it, and a connection sending
  # from two cores could reach the switch out of order (which TCP retransmission detection
  # counts as retransmissions).
  cores=$(nproc); [ "$cores" -gt 32 ] && cores=32
  all=$(printf '%x' $(( (1 << cores) - 1 )))
  for l in ternv1 ternv2 ternp2; do echo "$all" > "/sys/class/net/$l/queues/rx-0/rps_cpus"; done
  cat > "$dir/serve.toml" <<EOF
program = "$here/snat.toml"
ports = ["afpacket:ternp1", "afpacket:ternp2", "afpacket:ternd0", "afpacket:ternd1"]
servers = [3, 4]
control = ["10.254.0.10:9601", "10.254.0.11:9602"]
buddies = [1, 0]
ip = "10.0.0.254"
mac = "02:00:00:00:00:fe"
[group]
members = [0, 1]
[[route]]
prefix = "198.51.100.0/24"
port = 2
mac = "02:00:00:00:02:01"
[[route]]
prefix = "10.0.0.1/32"
port = 1
mac = "02:00:00:00:01:01"
[[route]]
prefix = "10.0.0.2/32"
port = 1
mac = "02:00:00:00:01:02"
EOF
  cat <<EOF
Built. Start the servers, then the switch (each in its own terminal):
  ip netns exec tern-s0 tern switch server $here/snat.toml --index 0 --port afpacket:eth0 --control 10.254.0.10:9601 --buddy 10.254.0.11:9602
  ip netns exec tern-s1 tern switch server $here/snat.toml --index 1 --port afpacket:eth0 --control 10.254.0.11:9602 --buddy 10.254.0.10:9601
  tern switch serve $dir/serve.toml --metrics 127.0.0.1:9600
Hosts: tern-c1 (10.0.0.1), tern-c2 (10.0.0.2), tern-ext (198.51.100.2). Remove it all: $0 down
EOF
}

case "$cmd" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
