#!/usr/bin/env bash
# What `make test` runs, in two lanes at once:
#   the suites lane:  the debug build with the tests (`make build-tests`), then every suite (scripts/test.sh);
#   the release lane: the short fuzz run (scripts/fuzz.sh, which builds its own targets with swiftc), the release
#                     build (`make release`) and the release smoke (scripts/release-smoke.sh), at `nice` 10.
# Why: run one after the other on a 2-core machine they took 1,238 s, and the suites used about one core of two
# (800 s of CPU in 696 s in a serial run with phase times): their tests spend much of their time waiting on child
# processes, servers, tmux and fsyncs. The release lane (about 630 s of CPU, nothing shared with the suites but the
# machine) fills those idle cycles: 1,080 s for the whole `make test` on the same machine. The release lane runs
# in a session of its own (setsid: one process group, stopped whole on an interrupt), which Linux's scheduler
# autogroups treat as a group of its own, so while both lanes are busy each gets about half of the cores; `nice` 10
# ranks the lane's processes below the suites' only within one autogroup, and SwiftPM starts the release build's
# compilers at the default priority.
# The suites' waits are bounded by conditions, never by fixed sleeps, and pass on a machine loaded like this.
# The release build waits for the debug build's SwiftPM lock if it gets there first.
# The release lane's output goes to .build/release-lane.log and is printed when both lanes have ended; the script
# fails when either lane failed. Each step prints its wall and CPU time (scripts/phase.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p .build
lane_log=.build/release-lane.log
release_lane() {
    scripts/phase.sh fuzz scripts/fuzz.sh short \
        && scripts/phase.sh release-build make --no-print-directory release \
        && scripts/phase.sh release-smoke scripts/release-smoke.sh .build/release/rollout
}
setsid nice -n 10 bash -c "$(declare -f release_lane); release_lane" > "$lane_log" 2>&1 &
lane=$!
# Stops the release lane (and its children) when this script is interrupted.
trap 'kill -- -$lane 2>/dev/null; kill $lane 2>/dev/null' INT TERM

suites=0
scripts/phase.sh debug-build make --no-print-directory build-tests || suites=1
[ $suites -eq 0 ] && { scripts/phase.sh suites scripts/test.sh || suites=1; }

released=0
wait $lane || released=1
echo "make test: the release lane (fuzz, release build, release smoke), from $lane_log:"
# Its summary lines; the whole log when it failed.
if [ $released -eq 0 ]; then
    pattern='^(make test: phase|fuzz: |  release smoke: all|stat::number_of_executed_units)'
    grep -a -E "$pattern" "$lane_log" | sed 's/^/  /'
else
    sed 's/^/  | /' "$lane_log"
fi
[ $suites -eq 0 ] || { echo "make test: FAILED in the suites lane" >&2; exit 1; }
[ $released -eq 0 ] || { echo "make test: FAILED in the release lane (log above, $lane_log)" >&2; exit 1; }
