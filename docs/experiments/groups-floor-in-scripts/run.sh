#!/usr/bin/env bash
# Builds dq-bench from HEAD as it is and with each patch of this folder applied (in a git
# worktree of HEAD, removed at the end), then runs the bench's burst without groups on the four
# builds, interleaved, ROUNDS rounds (5 unless set): drain and push in jobs/s, and each patched
# build's ratio to the unpatched one of the same round. With DQ_BENCH_PROFILE=1 each line also
# gives Redis' time per job of the ack, promote, fetch and push scripts (us). Needs git, cargo,
# redis-server and python3; each bench run starts and kills its own redis-server.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$here" rev-parse --show-toplevel)
rounds=${ROUNDS:-5}
out=$(mktemp -d)
tree=$out/tree
git -C "$root" worktree add -q --detach "$tree" HEAD
trap 'git -C "$root" worktree remove --force "$tree"; rm -rf "$out"' EXIT
builds=(base a-park-at-promotion b-lines-at-push c-links-at-push)
for v in "${builds[@]}"; do
  git -C "$tree" checkout -q -- .
  if [ "$v" != base ]; then git -C "$tree" apply "$here/$v.patch"; fi
  (cd "$tree" && CARGO_TARGET_DIR="$root/target/floor" cargo build --release -p dq-bench --locked -q)
  cp "$root/target/floor/release/dq-bench" "$out/$v"
done
for r in $(seq "$rounds"); do
  for v in "${builds[@]}"; do
    "$out/$v" --workload burst --push-mode bulk --n 100000 --reps 1 --pin-redis 1 2>/dev/null | tail -1 \
      | python3 -c '
import json, sys
d = json.loads(sys.stdin.read())
s = (d.get("redis_us_per_job") or {}).get("by_script") or {}
per = "us_per_job"
us = " ".join(k + " " + str(s[k][per]) for k in ("ack", "promote", "fetch", "push") if k in s)
print(sys.argv[1], sys.argv[2], d["drain_jobs_per_s"], d["push_jobs_per_s"], "lost", d["lost"], "dup", d["dup"], us)
' "$r" "$v"
  done
done | tee "$out/rounds.txt"
python3 - "$out/rounds.txt" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
base = {r[0]: (float(r[2]), float(r[3])) for r in rows if r[1] == "base"}
for r in rows:
    if r[1] != "base":
        b = base[r[0]]
        print(f"round {r[0]} {r[1]}: drain {float(r[2]) / b[0]:.3f} of base, push {float(r[3]) / b[1]:.3f}")
PY
