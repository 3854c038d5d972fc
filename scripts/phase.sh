#!/usr/bin/env bash
# scripts/phase.sh NAME COMMAND...: runs COMMAND and prints its wall time and the CPU time it and its children
# used, so `make test` says which of its phases dominate (`make test: phase NAME: W s wall, C s CPU`).
set -uo pipefail
name=$1; shift
start=$(date +%s.%N)
read -r u0 s0 < <(awk '{ print $14 + $16, $15 + $17 }' /proc/$$/stat)
"$@"
status=$?
end=$(date +%s.%N)
# The children's CPU (cutime, cstime) of this shell, in clock ticks, once the command has been waited for.
read -r u1 s1 < <(awk '{ print $14 + $16, $15 + $17 }' /proc/$$/stat)
ticks=$(getconf CLK_TCK)
awk -v n="$name" -v a="$start" -v b="$end" -v c="$(( (u1 - u0) + (s1 - s0) ))" -v t="$ticks" -v st="$status" \
  'BEGIN { printf "make test: phase %s: %.0f s wall, %.0f s CPU%s\n", n, b - a, c / t, (st == 0 ? "" : " (failed)") }'
exit $status
