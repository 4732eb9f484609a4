#!/usr/bin/env python3
"""Where a `herald serve` or `herald bench` recording's CPU goes, by part of Herald.

Each sample of a `perf record -g` recording (frame-pointer call graphs) is counted to the
innermost of its frames that belongs to a part below; samples with no such frame (nghttp2's own
code, the kernel's network and memory work, the allocator called from the runtime) are counted
as "no part named". With the CPU a notification (`--us`), each part's share is printed in µs a
notification as well.

    MODE=sqlite BATCH=100000 PERF=1 FREQ=1999 PERF_ARGS=-g PERF_OUT=/tmp/batch.data \\
        SKIP_BUILD=1 scripts/profile-batch.sh
    scripts/perf-parts.py /tmp/batch.data --us 20
"""
import argparse
import collections
import re
import subprocess
import sys

# In order: a frame is given to the first part whose pattern it matches. Swift symbols are
# matched mangled (`$s<length><module>…`), as `perf script --no-demangle` prints them.
PARTS = [
    ("the store (SQLite or PostgreSQL, Herald's and the driver's code)",
     r"\$s11HeraldStore|\$s14HeraldPostgres|\$s4GRDB|sqlite3|\$s11PostgresNIO"),
    ("the transport, HTTP/2 and TLS in Herald's frames",
     r"\$s10HeraldAPNs|\$s11HTTP2Engine|nghttp2_session|\$s6NIOSSL"),
    ("the router, the pipeline and the plugins",
     r"\$s6Herald6Router|\$s6Herald13TenantRuntime|\$s10HeraldCore12SendPipeline|"
     r"\$s13MetricsPlugin|\$s14FeedbackPlugin|\$s15RateLimitPlugin"),
    ("the job's own steps (feed, senders, outcome groups, delivery policy)",
     r"\$s6Herald(17JobCallbackSender|7JobFeed|9JobFeeder|13OutcomeGroups|17BatchItemDelivery|"
     r"6JobRun|10PermitPool|17LoopTickGathering|9JobRunner|10JobSenders|12JobSendTasks|"
     r"17LeaseCheckedItems|13SendsUnderWay|14JobRunnerState)"),
    ("the HTTP API (requests, JSON)",
     r"\$s11Hummingbird|\$s12HeraldServer|StrictJSON|\$s8NIOHTTP1"),
    ("waking and parking threads (futex, dispatch)",
     r"futex|_dispatch_|sem_post|sem_wait"),
    ("NIO's event loops", r"\$s8NIOPosix|epoll"),
    ("the benchmark's own callers", r"\$s9HeraldCLI"),
]
COMPILED = [(name, re.compile(pattern)) for name, pattern in PARTS]
UNNAMED = "no part named (nghttp2, the kernel, the allocator)"


def stacks(recording):
    """The stacks of the recording, each innermost frame first."""
    text = subprocess.run(
        ["perf", "script", "-i", recording, "-F", "comm,tid,ip,sym", "--no-demangle"],
        check=True, capture_output=True, text=True, errors="replace").stdout
    for block in text.split("\n\n"):
        lines = [line.strip() for line in block.strip().splitlines() if line.strip()]
        if lines:
            # The first line names the thread; each further one is "address symbol".
            yield [line.split(" ", 1)[-1] for line in lines[1:]]


def part_of(frames):
    for frame in frames:
        for name, pattern in COMPILED:
            if pattern.search(frame):
                return name
    return UNNAMED


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recording", help="a perf.data file recorded with -g")
    parser.add_argument("--us", type=float, help="the CPU a notification, in µs, to print each part's share of")
    arguments = parser.parse_args()
    counts = collections.Counter()
    total = 0
    for frames in stacks(arguments.recording):
        total += 1
        counts[part_of(frames)] += 1
    if total == 0:
        sys.exit("no samples in " + arguments.recording)
    print("%d samples" % total)
    for name, count in counts.most_common():
        share = count / total
        figure = " %6.2f µs" % (share * arguments.us) if arguments.us else ""
        print("%5.1f%%%s  %s" % (100 * share, figure, name))


if __name__ == "__main__":
    main()
