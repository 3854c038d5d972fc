#!/usr/bin/env bash
# Creates .venv with the real peers the tests and benchmarks compare against (pinned in requirements.txt).
# Fails loudly if they cannot be installed: tests that need a peer never skip.
set -euo pipefail
cd "$(dirname "$0")/.."
req=scripts/requirements.txt
stamp=.venv/.installed
if [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then exit 0; fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -r "$req"
cp "$req" "$stamp"
