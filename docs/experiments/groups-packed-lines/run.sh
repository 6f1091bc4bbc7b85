#!/usr/bin/env bash
# Starts its own redis-server on a free loopback port (pinned to CPU 1 when taskset exists),
# fills it as setup.lua says, runs bench.lua over five sets of 1,000 groups, and kills the
# server by its pid. Needs redis-server, redis-cli and python3.
set -euo pipefail
cd "$(dirname "$0")"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pin=()
command -v taskset >/dev/null && pin=(taskset -c 1)
"${pin[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$port" --eval setup.lua >/dev/null
echo "us per job: RPUSH a group, LPOP a group, packed append, packed pop, HMGET of envelopes"
for base in 0 2000 4000 6000 8000; do
  redis-cli -p "$port" --eval bench.lua , "$base" | tr '\n' ' '
  echo
done
