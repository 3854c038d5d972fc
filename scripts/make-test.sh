#!/usr/bin/env bash
# What `make test` runs, in two lanes at once:
#   the suites lane:  the debug build with the tests (`make build-tests`), then every suite (scripts/test.sh);
#   the release lane: the short fuzz run (scripts/fuzz.sh, which builds its own targets with swiftc), the release
#                     build (`make release`) and the release smoke (scripts/release-smoke.sh).
# Why: run one after the other on a 2-core machine they took 1,238 s, and the suites used about one core of two
# (800 s of CPU in 696 s in a serial run with phase times): their tests spend much of their time waiting on child
# processes, servers, tmux and fsyncs. The release lane (about 730 s of CPU, nothing shared with the suites but the
# machine) fills those idle cycles.
# The fuzz run is a session of its own (setsid), which Linux's scheduler autogroups treat as a group of its own: it
# gets about half of the cores beside the debug build, whose SwiftPM lock the release build waits for anyway. The
# release build runs in this session, in the idle scheduling class (`chrt -i 0`, inherited by every compiler
# SwiftPM starts): it gets only the cycles the suites leave, so that the suites, the longer lane, run as on an idle
# machine (710 s against 849 s beside a release build with its own autogroup's half of the cores). SwiftPM starts
# its compilers at nice 0 whatever its own, so `nice` alone did not rank them; and with the fuzz run in the idle
# class too its single-threaded builds starved behind the suites (1,242 s), or in this session at the normal class
# they slowed the suites (829 s): the lane ended last either way. The lane is a process group of its own (job
# control) and the fuzz run's session a group of its own, both stopped on an interrupt.
# The suites' waits are bounded by conditions, never by fixed sleeps, and pass on a machine loaded like this.
# The release build waits for the debug build's SwiftPM lock if it gets there first.
# The release lane's output goes to .build/release-lane.log and is printed when both lanes have ended; the script
# fails when either lane failed. Each step prints its wall and CPU time (scripts/phase.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p .build
lane_log=.build/release-lane.log
# The idle class where `chrt` can set it (util-linux); otherwise the lane runs at the normal one.
idle=()
if command -v chrt > /dev/null && chrt -i 0 true 2> /dev/null; then idle=(chrt -i 0); fi
fuzz_session=.build/fuzz-session
rm -f "$fuzz_session"
release_lane() {
    scripts/phase.sh fuzz setsid -w bash -c "echo \$\$ > $fuzz_session; exec nice -n 10 scripts/fuzz.sh short" \
        && scripts/phase.sh release-build "${idle[@]}" make --no-print-directory release \
        && scripts/phase.sh release-smoke scripts/release-smoke.sh .build/release/rollout
}
set -m
release_lane > "$lane_log" 2>&1 &
lane=$!
set +m
# Stops the release lane (and its children) when this script is interrupted.
trap 'kill -- -"$(cat "$fuzz_session" 2>/dev/null)" 2>/dev/null; kill -- -$lane 2>/dev/null; kill $lane 2>/dev/null' INT TERM

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
