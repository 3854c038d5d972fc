#!/usr/bin/env bash
# Runs the built test bundle as several processes at once, one suite each, longest first, and prints one line per
# suite as it ends.
#
# Why: Swift Testing runs a process's tests on Swift's cooperative thread pool, which is as wide as the machine has
# cores. Most of this project's tests are synchronous and wait on something outside the process (a child `rollout`,
# tmux, PostgreSQL, a fake of Google, an fsync), and a synchronous test that waits still holds its pool thread. On a
# 2-core machine one process therefore ran two tests at a time and kept the cores about 60% busy. Several processes
# keep more waits in flight on the same cores; a unit's tests still run as its suites say (`.serialized`).
#
# Usage: scripts/test.sh [WIDTH]   (WIDTH processes at once; default: cores + 1, or $ROLLOUT_TEST_WIDTH)
# Logs: .build/test-logs/SUITE.log; seconds per suite: .build/test-unit-seconds (read back to order the next run).
set -euo pipefail
cd "$(dirname "$0")/.."

bundle=.build/debug/rolloutPackageTests.xctest
[[ -x $bundle ]] || { echo "test.sh: no test bundle at $bundle (run make build-tests first)" >&2; exit 2; }
width=${1:-${ROLLOUT_TEST_WIDTH:-$(( $(nproc) + 1 ))}}
[[ $width =~ ^[1-9][0-9]*$ ]] || { echo "test.sh: WIDTH must be a positive whole number, not '$width'" >&2; exit 2; }

logs=.build/test-logs
rm -rf "$logs"
mkdir -p "$logs"
# The tests' temporary files (stores, key files, witnesses, sockets: each test makes a directory of its own and
# most leave it behind) go to one directory per run, removed when every test passed and kept for a look when one
# failed. Before this, every run left about 3,000 directories in /tmp, team store key files among them.
# (Mode 755, not mktemp's 700: as root, the tests run PostgreSQL's tools as `nobody`, which inherit TMPDIR.)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/rollout-test.XXXXXX")
chmod 755 "$scratch"
export TMPDIR=$scratch
listing=$logs/list
"$bundle" --testing-library swift-testing --list-tests > "$listing" 2>/dev/null
[[ -s $listing ]] || { echo "test.sh: the test bundle listed no tests" >&2; exit 2; }

# Units: every suite (the test IDs' part before the first '/'), longest first: by the seconds of the last run here,
# else those recorded in scripts/test-seconds.tsv, else by the number of tests.
previous=.build/test-unit-seconds
hints=scripts/test-seconds.tsv
units=$(awk -F'/' '{ n[$1]++ } END { for (u in n) print n[u] "\t" u }' "$listing" | while IFS=$'\t' read -r tests unit; do
    seconds=""
    for file in "$previous" "$hints"; do
        [[ -z $seconds && -f $file ]] && seconds=$(awk -F'\t' -v u="$unit" '$2 == u { print $1 }' "$file")
    done
    echo -e "${seconds:-$tests}\t$unit"
done | sort -t$'\t' -k1,1gr | cut -f2)
count=$(wc -l <<< "$units")
echo "test.sh: $(wc -l < "$listing") tests in $count units, $width processes at once"

run_unit() {
    local unit=$1 log="$logs/$1.log" start end status
    start=$(date +%s.%N)
    set +e
    "$bundle" --testing-library swift-testing --filter "^${unit//./\\.}[./]" > "$log" 2>&1
    status=$?
    set -e
    end=$(date +%s.%N)
    local seconds summary
    seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    summary=$(grep -a -E "Test run with [0-9]+ tests?" "$log" | tail -1 | sed -E 's/^[^T]*Test run with ([0-9]+) tests?.*/\1/')
    printf '%s\t%s\n' "$seconds" "$unit" >> "$logs/seconds"
    if [[ $status -eq 0 ]]; then
        echo "  passed  $unit: ${summary:-?} tests in $seconds s"
    else
        echo "  FAILED  $unit (exit $status) after $seconds s; its log follows"
        sed 's/^/    | /' "$log"
        echo "$unit" >> "$logs/failed"
    fi
}
export -f run_unit
export bundle logs

started=$(date +%s)
printf '%s\n' $units | xargs -P "$width" -I{} bash -c 'run_unit "$@"' _ {}
elapsed=$(( $(date +%s) - started ))
cp "$logs/seconds" "$previous"
total=$(cat "$logs"/*.log | grep -a -E "Test run with [0-9]+ tests?" | sed -E 's/^[^T]*Test run with ([0-9]+) tests?.*/\1/' | awk '{ s += $1 } END { print s + 0 }')
if [[ -e $logs/failed ]]; then
    echo "test.sh: FAILED after $elapsed s: $(sort "$logs/failed" | tr '\n' ' ')(logs in $logs, the tests' files in $scratch)"
    exit 1
fi
rm -rf "$scratch"
listed=$(wc -l < "$listing")
if [[ $total -ne $listed ]]; then
    echo "test.sh: FAILED: the units ran $total tests, the bundle lists $listed" >&2
    exit 1
fi
echo "test.sh: all $total tests in $count units passed in $elapsed s"
