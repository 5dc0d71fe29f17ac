#!/bin/sh
# Two hosts in network namespaces, joined by AccelSDP's switch: what examples/flow/router.toml
# expects (root).
#
#   sudo examples/flow/netns.sh up      # namespaces tern-h1, tern-h2; veths tern-sw0, tern-sw1
#   sudo target/release/tern flow serve examples/flow/router.toml --metrics 127.0.0.1:9108
#   sudo ip netns exec tern-h1 ping -c 3 10.2.0.1     # host 1 to host 2 (or any UDP sender)
#   target/release/tern flow dump-flows --server 127.0.0.1:9108
#   sudo examples/flow/netns.sh down    # removes them again
#
# Host 1: 10.1.0.1/16 in tern-h1, MAC 02:00:00:00:00:01, behind tern-sw0 (MAC ...:a1).
# Host 2: 10.2.0.1/16 in tern-h2, MAC 02:00:00:00:00:02, behind tern-sw1 (MAC ...:a2).
# The switch answers no ARP, so each host gets a static neighbour entry for its gateway.
set -eu

up() {
    for spec in "tern-h1 tern-sw0 02:00:00:00:00:01 02:00:00:00:00:a1 10.1.0.1/16 10.1.0.254" \
                "tern-h2 tern-sw1 02:00:00:00:00:02 02:00:00:00:00:a2 10.2.0.1/16 10.2.0.254"; do
        # shellcheck disable=SC2086
        set -- $spec
        ns=$1 sw=$2 host_mac=$3 gw_mac=$4 addr=$5 gw=$6
        ip netns add "$ns"
        # No IPv6 autoconfiguration chatter through the switch.
        ip netns exec "$ns" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6'
        ip link add "$sw" type veth peer name eth0 netns "$ns"
        echo 1 > "/proc/sys/net/ipv6/conf/$sw/disable_ipv6" 2>/dev/null || true
        ip link set "$sw" address "$gw_mac" up
        ip -n "$ns" link set eth0 address "$host_mac" up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$addr" dev eth0
        ip -n "$ns" route add default via "$gw"
        ip -n "$ns" neigh replace "$gw" lladdr "$gw_mac" dev eth0
    done
    echo "up: tern-h1 (10.1.0.1) behind tern-sw0, tern-h2 (10.2.0.1) behind tern-sw1"
}

down() {
    # Deleting a namespace removes its end of the veth, and with it the pair.
    for ns in tern-h1 tern-h2; do ip netns del "$ns" 2>/dev/null || true; done
    for sw in tern-sw0 tern-sw1; do ip link del "$sw" 2>/dev/null || true; done
    echo "down: tern-h1, tern-h2, tern-sw0, tern-sw1 removed"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
