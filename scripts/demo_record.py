"""The 30-minute demo recording of issue 35: a recorder for tmux `pipe-pane` and its analysis.

    demo_record.py record OUT          # pipe-pane's command: stdin to OUT as (time, length, bytes) records
    demo_record.py analyse OUT W H PAUSED_AT_FILE

The analysis replays the recorded bytes into a pyte screen of the pane's size, chunk by chunk as they were
written, and reads the verdict word from the Crash panel after each chunk: every change of level is counted
(rises and falls), every bell (BEL outside an OSC string) is counted, and the bytes written per second are
summed, separately for the running simulation and for the paused tail (the console idle: no key, no new data).
"""
import re
import statistics
import struct
import sys
import time

import pyte

HEADER = struct.Struct("<dI")
LEVELS = {"OK": 0, "WATCH": 1, "HOLD": 2, "HALT": 3}
VERDICT = re.compile(r"^│ (✓ OK|◆ WATCH|‖ HOLD|✗ HALT)\b")


def record(path):
    src = sys.stdin.buffer.raw
    with open(path, "ab", buffering=0) as out:
        while True:
            data = src.read(65536)
            if not data:
                return
            out.write(HEADER.pack(time.time(), len(data)) + data)


def chunks(path):
    with open(path, "rb") as f:
        blob = f.read()
    i = 0
    while i + HEADER.size <= len(blob):
        t, n = HEADER.unpack_from(blob, i)
        i += HEADER.size
        yield t, blob[i:i + n]
        i += n


class CountingScreen(pyte.Screen):
    def __init__(self, w, h):
        super().__init__(w, h)
        self.bells = 0

    def bell(self, *args):
        self.bells += 1


def level_of(screen, width):
    for row in screen.display[1:20]:
        m = VERDICT.match(row[width // 2:])
        if m:
            return m.group(1).split(" ")[1]
    return None


def analyse(path, width, height, paused_file):
    paused_at = float(open(paused_file).read().strip())
    screen = CountingScreen(width, height)
    stream = pyte.ByteStream(screen)
    level = None
    changes = rises = falls = quick_returns = 0
    history = []  # (time, level) of each change
    bells_at = []
    per_second_run = {}
    per_second_idle = {}
    t0 = None
    for t, data in chunks(path):
        if t0 is None:
            t0 = t
        bins = per_second_idle if t >= paused_at + 2 else per_second_run
        if t < paused_at or t >= paused_at + 2:
            bins[int(t)] = bins.get(int(t), 0) + len(data)
        before = screen.bells
        stream.feed(data)
        if screen.bells > before:
            bells_at.extend([t] * (screen.bells - before))
        now = level_of(screen, width)
        if now is None or now == level:
            continue
        if level is not None:
            changes += 1
            if LEVELS[now] > LEVELS[level]:
                rises += 1
            else:
                falls += 1
            # A return to the level before last within 60 s of wall time is a flap.
            if len(history) >= 2 and history[-2][1] == now and t - history[-1][0] < 60:
                quick_returns += 1
        history.append((t, now))
        level = now
    run_seconds = max(1, int(paused_at - t0))
    run_bytes = sum(per_second_run.values())
    idle_seconds = sorted(per_second_idle)
    idle_span = (idle_seconds[-1] - idle_seconds[0] + 1) if idle_seconds else 0
    idle_bytes = sum(per_second_idle.values())
    run_values = [per_second_run.get(s, 0) for s in range(int(t0), int(paused_at))]
    print(f"demo recording: {run_seconds} s running at 600x, pane {width}x{height}")
    print(f"levels seen: {' -> '.join(l for _, l in history) if len(history) <= 12 else str(len(history)) + ' (first ' + ' -> '.join(l for _, l in history[:12]) + ')'}")
    print(f"level changes: {changes} (rises {rises}, falls {falls}, returns to the previous level within 60 s: {quick_returns})")
    print("changes at: " + (", ".join(f"{t - t0:.0f} s {l}" for t, l in history[1:][:20]) or "none"))
    print(f"bells: {len(bells_at)} for {rises} rises" + (" (at " + ", ".join(f"{t - t0:.0f} s" for t in bells_at[:20]) + ")" if bells_at else ""))
    print(f"bytes while running: {run_bytes} in {run_seconds} s = {run_bytes / run_seconds:.0f} bytes/s "
          f"(median second {statistics.median(run_values) if run_values else 0:.0f}, max {max(run_values) if run_values else 0})")
    if idle_span:
        print(f"bytes per idle second (simulation paused, no key): {idle_bytes / idle_span:.1f} ({idle_bytes} bytes in {idle_span} s)")
    else:
        print("bytes per idle second (simulation paused, no key): 0.0 (nothing written while paused)")


if __name__ == "__main__":
    if sys.argv[1] == "record":
        record(sys.argv[2])
    else:
        analyse(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
