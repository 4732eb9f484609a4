#!/usr/bin/env bash
# The HTTP/2 engine's C interop (libnghttp2) and what runs on it, under AddressSanitizer and
# LeakSanitizer: the engine's tests, the transport's (cancellation, end to end, PING health) and
# the sandbox's. Its own build folder (.build-asan; the first build compiles everything once).
# LeakSanitizer ignores only XCTest's own objects (scripts/lsan-suppressions.txt); any other leak
# or memory error fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan-suppressions.txt:print_suppressions=1"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
swift test --sanitize=address --scratch-path .build-asan \
    --filter 'HTTP2EngineTests|TransportCancellationTests|TransportEndToEndTests|PingHealthTests|APNsSandboxTests' "$@"
