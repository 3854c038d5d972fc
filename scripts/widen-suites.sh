#!/usr/bin/env bash
# Lets the suites of `make test` run one more process at once, once: when the release lane beside them has ended,
# the machine has the cores it was using. scripts/test.sh runs its suites through GNU xargs and writes that xargs's
# pid to .build/test-logs/xargs.pid; SIGUSR1 makes xargs run one command more at once. Called by the release lane
# when it ends (after it leaves .build/release-lane-ended) and by test.sh once its xargs runs (when the lane had
# already ended), so whichever comes second finds the pid or the marker; the `mkdir` makes it happen once.
set -u
cd "$(dirname "$0")/.."
pidfile=.build/test-logs/xargs.pid
[[ -s $pidfile ]] || exit 0
pid=$(cat "$pidfile")
# Only that xargs, still running (a pid is reused once its process has ended).
[[ $(cat "/proc/$pid/comm" 2>/dev/null) == xargs ]] || exit 0
mkdir .build/test-logs/widened 2>/dev/null || exit 0
kill -USR1 "$pid" 2>/dev/null && echo "test.sh: the release lane has ended: one suite process more at once" >&2
exit 0
