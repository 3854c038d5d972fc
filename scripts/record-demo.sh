#!/usr/bin/env bash
# The 30-minute demo of issue 35, recorded with tmux pipe-pane (not part of `make test`: it takes 31 minutes).
#
#   scripts/record-demo.sh [ROLLOUT_BINARY] [RUN_SECONDS] [SPEED] [IDLE_SECONDS]
#
# Runs `rollout demo --speed 600` in a private tmux server (120x40), copies everything it writes to the terminal
# with `pipe-pane`, presses no key for RUN_SECONDS (default 1800), then `p` (pause) and IDLE_SECONDS (default 60) idle seconds, then `q`.
# Prints the level changes (rises, falls, quick returns), the bells against the rises, and the bytes per second
# while running and per idle second.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
rollout="${1:-$here/../.build/debug/rollout}"
seconds="${2:-1800}"
speed="${3:-600}"
idle="${4:-60}"
python="${ROLLOUT_PYTHON:-$here/../.venv/bin/python}"
[ -x "$python" ] || python=python3
"$python" -c 'import pyte' || { echo "record-demo: pyte is needed (scripts/pyenv.sh)" >&2; exit 2; }
[ -x "$rollout" ] || { echo "record-demo: no rollout binary at $rollout" >&2; exit 2; }
work="$(mktemp -d /tmp/rollout-record-demo.XXXXXX)"
sock="record-demo-$$"
width=120
height=40
cleanup() { tmux -L "$sock" kill-server 2>/dev/null || true; }
trap cleanup EXIT
tmux -L "$sock" -f /dev/null new-session -d -s main -x "$width" -y "$height" \
    "$rollout" demo --speed "$speed" --store "$work/demo.db"
tmux -L "$sock" pipe-pane -o -t main "exec '$python' '$here/demo_record.py' record '$work/raw'"
echo "record-demo: recording to $work/raw for $seconds s at ${speed}x"
end=$((SECONDS + seconds))
while [ $SECONDS -lt $end ]; do
    tmux -L "$sock" has-session -t main 2>/dev/null || { echo "record-demo: the demo exited early" >&2; break; }
    sleep 5
done
"$python" -c 'import time; print(time.time())' > "$work/paused-at"
tmux -L "$sock" send-keys -t main p
sleep $((idle + 2))
tmux -L "$sock" capture-pane -p -t main > "$work/last-screen.txt" || true
tmux -L "$sock" send-keys -t main q
sleep 2
"$python" "$here/demo_record.py" analyse "$work/raw" "$width" "$height" "$work/paused-at"
echo "record-demo: raw bytes and the last screen are in $work"
