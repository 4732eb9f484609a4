#!/usr/bin/env python3
"""Waits for a Herald job to end, for the batch benchmarks.

    scripts/wait-job.py URL API_KEY OUT.json [INTERVAL_S] [TIMEOUT_S]

Polls URL (`…/v1/jobs/<id>?limit=1`) every INTERVAL_S seconds (default 0.05) from this one
process until the job's state is `finished` or `cancelled`, writes the last answer to OUT.json
and prints the wall-clock time (seconds since the epoch) of the poll that saw the final state.
Exits 1 on a timeout (default 900 s), with the last state on stderr.

Why a process of its own: running `python3 -c` once a poll to read the state would start
Python every time, and a Python start costs about 0.13 s of CPU on the benchmark machine. Every
0.2–0.5 s that is a quarter to a third of one of its two cores taken from the processes being
measured.
"""
import json
import sys
import time
import urllib.error
import urllib.request


def main() -> int:
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    url, key, out = sys.argv[1], sys.argv[2], sys.argv[3]
    interval = float(sys.argv[4]) if len(sys.argv) > 4 else 0.05
    timeout = float(sys.argv[5]) if len(sys.argv) > 5 else 900.0
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    deadline = time.monotonic() + timeout
    state = "?"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                body = reply.read()
            job = json.loads(body)
            state = job.get("state", "?")
        except (urllib.error.URLError, OSError, ValueError) as error:
            state = f"? ({error})"
            body = None
        if state in ("finished", "cancelled"):
            seen = time.time()
            with open(out, "wb") as file:
                file.write(body)
            print(f"{seen:.6f}")
            return 0
        time.sleep(interval)
    print(f"the job did not end within {timeout:.0f} s (last state {state})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
