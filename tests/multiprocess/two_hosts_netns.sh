#!/bin/bash
# Two "hosts" on one machine: two network namespaces joined by a veth pair, process 0 in one
# and process 1 in the other, the control plane and UCX (tcp) between their two addresses.
# The parameters after 3 steps must equal the one-process run's, bit for bit.
# Exits 77 (ctest: skipped) with the reason where namespaces can't be made.
# usage: two_hosts_netns.sh path/to/actorpipe
set -u
bin=${1:?usage: two_hosts_netns.sh path/to/actorpipe}
skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "creating network namespaces needs root"
command -v ip >/dev/null || skip "iproute2 (the ip command) is not installed"

tag=ap$$
ns0=${tag}h0 ns1=${tag}h1 dev0=${tag}v0 dev1=${tag}v1
net=10.$((200 + RANDOM % 50)).$((RANDOM % 250))
dir=$(mktemp -d)
cleanup() {
  ip netns pids "$ns0" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns pids "$ns1" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$ns0" 2>/dev/null
  ip netns del "$ns1" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
ip netns add "$ns0" 2>"$dir/err" || skip "cannot create a network namespace: $(cat "$dir/err")"
ip netns add "$ns1" 2>"$dir/err" || skip "cannot create a network namespace: $(cat "$dir/err")"
ip link add "$dev0" type veth peer name "$dev1" 2>"$dir/err" || skip "cannot create a veth pair: $(cat "$dir/err")"
set -e
ip link set "$dev0" netns "$ns0"
ip link set "$dev1" netns "$ns1"
ip -n "$ns0" addr add "$net.1/24" dev "$dev0"
ip -n "$ns1" addr add "$net.2/24" dev "$dev1"
for ns in "$ns0" "$ns1"; do ip -n "$ns" link set lo up; done
ip -n "$ns0" link set "$dev0" up
ip -n "$ns1" link set "$dev1" up
set +e

job=(train --stages 2 --layers 4 --hidden 32 --heads 2 --seq-len 16 --steps 3 --microbatches 4 --microbatch-size 2
     --schedule 1f1b --step-timeout 60)
"$bin" "${job[@]}" --save-final "$dir/one.safetensors" >"$dir/one.log" 2>&1 || { cat "$dir/one.log"; exit 1; }

token=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
common=(WORLD_SIZE=2 MASTER_ADDR="$net.1" MASTER_PORT=29555 ACTORPIPE_JOB_TOKEN="$token" UCX_TLS=tcp,self)
ip netns exec "$ns0" env "${common[@]}" RANK=0 UCX_NET_DEVICES="$dev0" timeout 120 \
  "$bin" "${job[@]}" --save-final "$dir/two.safetensors" >"$dir/h0.log" 2>&1 &
p0=$!
ip netns exec "$ns1" env "${common[@]}" RANK=1 UCX_NET_DEVICES="$dev1" timeout 120 \
  "$bin" "${job[@]}" >"$dir/h1.log" 2>&1 &
p1=$!
wait $p0; rc0=$?
wait $p1; rc1=$?
echo "--- host 0 ($net.1, process 0) exit $rc0"; cat "$dir/h0.log"
echo "--- host 1 ($net.2, process 1) exit $rc1"; cat "$dir/h1.log"
[ $rc0 = 0 ] && [ $rc1 = 0 ] || { echo "FAILED: a process failed"; exit 1; }
grep -q "control port $net.1:29555" "$dir/h0.log" || { echo "FAILED: process 0 did not listen on $net.1"; exit 1; }
cmp "$dir/one.safetensors" "$dir/two.safetensors" || { echo "FAILED: parameters differ from the one-process run"; exit 1; }
echo "two hosts ($net.1, $net.2): parameters bit-identical to the one-process run"
