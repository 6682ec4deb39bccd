# Hosts on this machine for tests and benches that are about several machines (docs/SWARM.md,
# "NAT"): network namespaces on one bridge, each with an address of its own, so that processes
# talk over real interfaces, not one loopback. Source it from bash (needs root):
#
#   . scripts/lib/netns.sh
#   netns_hosts PREFIX SUBNET COUNT  # bridge PREFIXbr, hosts 0..COUNT-1 (namespace PREFIXhI) at
#                                    # SUBNET.(I+1)/24; returns 1 (nothing made) where no bridge
#                                    # can be made (not root, or no namespaces here), 2 when a
#                                    # later step failed
#   netns_link I                     # host I's interface, in its namespace (for tc)
#   in_host I CMD...                 # runs CMD in host I
#   start_in_host I CMD...           # starts CMD in host I in the background; $! is its pid
#   netns_cleanup                    # kills whatever runs in the hosts and removes them

NETNS_PREFIX=
NETNS_SPACES=()

netns_hosts() {
    NETNS_PREFIX=$1
    local subnet=$2 count=$3 i space
    ip link add "${NETNS_PREFIX}br" type bridge 2>/dev/null || return 1
    # Each step checked: set -e does not reach into a function called as a condition.
    ip link set "${NETNS_PREFIX}br" up || return 2
    for i in $(seq 0 $((count - 1))); do
        space="${NETNS_PREFIX}h$i"
        ip netns add "$space" || return 2
        NETNS_SPACES+=("$space")
        ip link add "${NETNS_PREFIX}a$i" type veth peer name "${NETNS_PREFIX}b$i" || return 2
        ip link set "${NETNS_PREFIX}b$i" netns "$space" || return 2
        ip link set "${NETNS_PREFIX}a$i" master "${NETNS_PREFIX}br" up || return 2
        ip -n "$space" addr add "$subnet.$((i + 1))/24" dev "${NETNS_PREFIX}b$i" || return 2
        ip -n "$space" link set "${NETNS_PREFIX}b$i" up || return 2
        ip -n "$space" link set lo up || return 2
    done
}

netns_link() { echo "${NETNS_PREFIX}b$1"; }
in_host() { local i=$1; shift; ip netns exec "${NETNS_PREFIX}h$i" "$@"; }
# As the program itself: $! is its pid, which signals reach.
start_in_host() { local i=$1; shift; (exec ip netns exec "${NETNS_PREFIX}h$i" "$@") & }

netns_cleanup() {
    local space
    for space in "${NETNS_SPACES[@]}"; do
        ip netns pids "$space" 2>/dev/null | xargs -r kill -9 2>/dev/null || true # nothing outlives its host
        ip netns del "$space" 2>/dev/null || true
    done
    NETNS_SPACES=()
    [ -z "$NETNS_PREFIX" ] || ip link del "${NETNS_PREFIX}br" 2>/dev/null || true
}
