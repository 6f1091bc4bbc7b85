#!/bin/bash
# $1 = entries per index hash (30 ~ 1M far jobs a shard, 300 ~ 10M)
PER=$1; PORT=7391
redis-server --port $PORT --save '' --appendonly no --daemonize yes --pidfile ./r.pid --logfile ./r.log
sleep 0.5
C="redis-cli -p $PORT"
F=$($C SCRIPT LOAD "$(cat fill.lua)"); S=$($C SCRIPT LOAD "$(cat setbits.lua)")
for h in $(seq 0 32767); do echo "EVALSHA $F 0 $PER $h $h"; echo "EVALSHA $S 0 $PER $h $h"; done | $C > /dev/null
echo "filled: $($C INFO memory | grep used_memory_human)"
H=$($C SCRIPT LOAD "$(cat look_hexists.lua)"); B=$($C SCRIPT LOAD "$(cat look_filter.lua)"); N=$($C SCRIPT LOAD "$(cat look_none.lua)")
for round in 1 2 3; do
  for sha in $N $H $B; do
    $C CONFIG RESETSTAT > /dev/null
    for c in $(seq 1 200); do echo "EVALSHA $sha 0 500 n${round}x${c}-"; done | $C > ./out.txt
    echo "round $round $( [ $sha = $H ] && echo hexists || ([ $sha = $B ] && echo filter || echo none)) found=$(sort -u ./out.txt | tr '\n' ' ') $($C INFO commandstats | grep cmdstat_evalsha | sed 's/.*usec_per_call=\([0-9.]*\).*/usec_per_call=\1/')"
  done
done
kill $(cat ./r.pid)
