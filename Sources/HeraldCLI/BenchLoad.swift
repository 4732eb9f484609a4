import Foundation
import HeraldAPNs
import HeraldCore
import Histogram
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The notifications of one benchmark run, made before the clock starts.
struct BenchWorkload: Sendable {
    let notes: [HeraldCore.Notification]

    /// `count` notifications for `topic`, each with a `payloadBytes`-byte alert payload, spread
    /// over `devices` device tokens (in turn: notification `i` goes to device `i % devices`).
    init(count: Int, topic: String, pushType: PushType = .alert, payloadBytes: Int, devices deviceCount: Int = Self.defaultDevices) {
        let devices = Self.devices(deviceCount)
        let payload = Self.payload(bytes: payloadBytes)
        notes = (0..<count).map { index in
            HeraldCore.Notification(deviceToken: devices[index % devices.count], topic: topic, pushType: pushType, payload: payload)
        }
    }

    /// `count` broadcasts on `channel` of `bundleID`, each with a `payloadBytes`-byte Live
    /// Activity update (priority 10, expiration 0).
    init(count: Int, broadcastsOn channel: ChannelID, bundleID: String, payloadBytes: Int) {
        let payload = Self.broadcastPayload(bytes: payloadBytes)
        notes = (0..<count).map { _ in HeraldCore.Notification(channel: channel, topic: bundleID, payload: payload) }
    }

    static let defaultDevices = 1024

    /// The notes admitted by `tenant`, each with an apns-id of its own, for sends straight to a
    /// transport (which takes only admitted notifications). Admitted before the run, so that
    /// the transport's figures are the transport's alone; a tenant runtime admits each send.
    func admitted(by tenant: TenantConfiguration, environment: APNsEnvironment?) throws -> [AdmittedNotification] {
        var ids = NotificationIDGenerator()
        return try notes.map { try tenant.admit($0, id: ids.nextID(), environment: environment) }
    }

    /// The workload's device tokens: always the same ones for the same count (a fixed seed), so
    /// that a yardstick can be given the very same `:path`s (`herald bench --print-paths`).
    static func devices(_ count: Int) -> [DeviceToken] {
        var generator = SplitMix64(seed: 0x4845_5241_4c44)
        return (0..<max(1, count)).map { _ in DeviceToken(bytes: (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }) }
    }

    /// `{"aps":{"event":"update","timestamp":1764460800,"content-state":{"s":"xxxx…"}}}`, exactly
    /// `bytes` long (at least the shortest such payload): a broadcast the size of a device send.
    static func broadcastPayload(bytes: Int) -> [UInt8] {
        let head = #"{"aps":{"event":"update","timestamp":1764460800,"content-state":{"s":""#
        let tail = #""}}}"#
        let fill = max(1, bytes - head.utf8.count - tail.utf8.count)
        return Array(head.utf8) + Array(repeating: UInt8(ascii: "x"), count: fill) + Array(tail.utf8)
    }

    /// `{"aps":{"alert":"xxxx…"}}`, exactly `bytes` long (at least the shortest such payload).
    static func payload(bytes: Int) -> [UInt8] {
        let skeleton = #"{"aps":{"alert":""}}"#
        let fill = max(1, bytes - skeleton.utf8.count)
        return Array(#"{"aps":{"alert":""#.utf8) + Array(repeating: UInt8(ascii: "x"), count: fill) + Array(#""}}"#.utf8)
    }
}

/// What one run measured.
struct BenchFigures: Sendable {
    var sent = 0
    var succeeded = 0
    /// Failures by label: `400 BadDeviceToken`, `queueFull`, …
    var failed: [String: Int] = [:]
    var wallSeconds = 0.0
    var cpuSeconds = 0.0
    /// Latencies in microseconds.
    var latency = Histogram<UInt64>(highestTrackableValue: 600_000_000, numberOfSignificantValueDigits: .three)

    var failedCount: Int { failed.values.reduce(0, +) }

    /// Adds another run's figures (a chunk of an alternated run): counts, times and latencies.
    mutating func merge(_ other: BenchFigures) {
        sent += other.sent
        succeeded += other.succeeded
        for (label, count) in other.failed { failed[label, default: 0] += count }
        wallSeconds += other.wallSeconds
        cpuSeconds += other.cpuSeconds
        latency.add(other.latency)
    }
    var rate: Double { wallSeconds > 0 ? Double(sent) / wallSeconds : 0 }
    var cpuMicrosPerNotification: Double { sent > 0 ? cpuSeconds * 1_000_000 / Double(sent) : 0 }

    func percentileMillis(_ percentile: Double) -> Double {
        Double(latency.valueAtPercentile(percentile)) / 1000
    }

    var maxMillis: Double { Double(latency.max) / 1000 }

    func jsonMembers() -> [(String, JSONValue)] {
        [
            ("sent", .int(Int64(sent))),
            ("succeeded", .int(Int64(succeeded))),
            ("failed", .int(Int64(failedCount))),
            ("failed_by_reason", .object(failed.keys.sorted().map { ($0, .int(Int64(failed[$0]!))) })),
            ("wall_seconds", .double(wallSeconds)),
            ("notifications_per_second", .double(rate.rounded())),
            (
                "latency_ms",
                .object([
                    ("p50", .double(percentileMillis(50))), ("p90", .double(percentileMillis(90))),
                    ("p99", .double(percentileMillis(99))), ("max", .double(maxMillis)),
                ])
            ),
            ("cpu_seconds", .double(cpuSeconds)),
            ("cpu_us_per_notification", .double((cpuMicrosPerNotification * 10).rounded() / 10)),
        ]
    }

    func textLines() -> [String] {
        var lines = [
            "sent:          \(sent)",
            "succeeded:     \(succeeded)",
            "failed:        \(failedCount)",
        ]
        for label in failed.keys.sorted() {
            lines.append("  \(label): \(failed[label]!)")
        }
        lines.append(String(format: "wall time:     %.3f s", wallSeconds))
        lines.append(String(format: "rate:          %.0f notifications/s", rate))
        lines.append(
            String(
                format: "latency (ms):  p50 %.2f  p90 %.2f  p99 %.2f  max %.2f", percentileMillis(50), percentileMillis(90),
                percentileMillis(99), maxMillis))
        lines.append(String(format: "cpu:           %.2f s (%.1f µs per notification)", cpuSeconds, cpuMicrosPerNotification))
        return lines
    }
}

/// Runs a workload with `concurrency` async sends in flight (through the router, or straight to
/// a tenant's transport).
enum BenchLoad {
    private final class Cursor: Sendable {
        let next = Atomic<Int>(0)
    }

    private struct WorkerResult: Sendable {
        var latencies: [UInt32] = []
        var succeeded = 0
        var failed: [String: Int] = [:]
    }

    /// Sends `notes` from `concurrency` tasks, each awaiting one send at a time.
    /// - Parameters:
    ///   - send: one send (through the router, or straight to a transport).
    ///   - executors: where the sending tasks run, spread over them (the transport's
    ///     ``HeraldCore/PushTransport/sendingExecutors``: no thread switch between a send and its
    ///     connection); empty: Swift's global executor.
    static func run<Note: Sendable>(
        _ notes: [Note], concurrency: Int, executors: [any TaskExecutor],
        send: nonisolated(nonsending) @escaping @Sendable (consuming Note) async throws -> APNsResponse
    ) async -> BenchFigures {
        let shelf = NoteShelf(notes)
        let cursor = Cursor()
        let cpuBefore = ProcessUsage.now()
        let start = ContinuousClock.now
        let results = await withTaskGroup(of: WorkerResult.self) { group in
            for worker in 0..<max(1, min(concurrency, notes.count)) {
                let executor: (any TaskExecutor)? = executors.isEmpty ? nil : executors[worker % executors.count]
                group.addTask(executorPreference: executor) {
                    var result = WorkerResult()
                    result.latencies.reserveCapacity(notes.count / max(1, concurrency) + 16)
                    while true {
                        let index = cursor.next.add(1, ordering: .relaxed).oldValue
                        guard let note = shelf.take(index) else { break }
                        let began = ContinuousClock.now
                        do {
                            // Moved into the send, as the API moves the notification it decoded.
                            let response = try await send(consume note)
                            if response.status == 200 {
                                result.succeeded += 1
                            } else {
                                result.failed["\(response.status) \(response.reason?.wireValue ?? "-")", default: 0] += 1
                            }
                        } catch let error as PushError {
                            result.failed[error.code.description, default: 0] += 1
                        } catch {
                            result.failed["error", default: 0] += 1
                        }
                        let elapsed = began.duration(to: .now)
                        let micros = elapsed.components.seconds * 1_000_000 + elapsed.components.attoseconds / 1_000_000_000_000
                        result.latencies.append(UInt32(clamping: max(1, micros)))
                    }
                    return result
                }
            }
            var all: [WorkerResult] = []
            for await result in group { all.append(result) }
            return all
        }
        let wall = start.duration(to: .now)
        let cpuAfter = ProcessUsage.now()

        var figures = BenchFigures()
        figures.wallSeconds = Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18
        figures.cpuSeconds = cpuAfter.cpuSeconds - cpuBefore.cpuSeconds
        for result in results {
            figures.succeeded += result.succeeded
            for (label, count) in result.failed { figures.failed[label, default: 0] += count }
            for latency in result.latencies { _ = figures.latency.record(UInt64(latency)) }
            figures.sent += result.latencies.count
        }
        return figures
    }
}

/// The notes of one run, each moved out once into its send, as the API moves the
/// notification it decoded into the router: the bench's own copies of its notes (each of a
/// notification's strings and its payload retained and released again) do not count against
/// the path it measures. Made before the clock starts.
final class NoteShelf<Note: Sendable>: @unchecked Sendable {
    let count: Int
    /// Slot `i` holds note `i` until ``take(_:)`` moves it out. Each index is taken by one
    /// caller only (the runs hand out indices by an atomic counter, each index once), so no
    /// two threads touch one slot.
    private let slots: UnsafeMutablePointer<Note?>

    init(_ notes: [Note]) {
        count = notes.count
        slots = .allocate(capacity: max(1, notes.count))
        notes.withUnsafeBufferPointer { notes in
            for index in notes.indices { (slots + index).initialize(to: notes[index]) }
        }
    }

    /// Note `index`, moved out; nil when out of range or taken before.
    func take(_ index: Int) -> Note? {
        guard index >= 0, index < count else { return nil }
        return slots[index].take()
    }

    deinit {
        slots.deinitialize(count: count)
        slots.deallocate()
    }
}

/// Runs a workload with the callback API: `concurrency` notifications in flight, each
/// completion (on a connection's event loop) records its latency and sends the next one.
enum BenchCallbackLoad {
    private final class Driver<Note: Sendable>: Sendable {
        struct Tally: Sendable {
            var latency = Histogram<UInt64>(highestTrackableValue: 600_000_000, numberOfSignificantValueDigits: .three)
            var succeeded = 0
            var failed: [String: Int] = [:]
            var finished: CheckedContinuation<Void, Never>?
        }

        /// One tally per sending thread (the connections' event loops), so that the loops do not
        /// contend for one lock on every answer: the bench's own accounting stays out of the way
        /// of the client it measures. A thread picks its tally by a hash of its identity.
        final class Shard: Sendable {
            let tally = Mutex(Tally())
        }

        /// Starts one send; the completion gets APNs' answer or the failure.
        typealias Start = @Sendable (consuming Note, @escaping @Sendable (consuming Result<APNsResponse, any Error>) -> Void) -> Void

        let notes: NoteShelf<Note>
        let start: Start
        let next = Atomic<Int>(0)
        let done = Atomic<Int>(0)
        let tally = Mutex(Tally())
        let shards = (0..<8).map { _ in Shard() }

        private var shard: Shard {
            #if canImport(Darwin)
                let thread = UInt64(UInt(bitPattern: pthread_self()))
            #else
                let thread = UInt64(truncatingIfNeeded: pthread_self())
            #endif
            return shards[Int(truncatingIfNeeded: (thread &* 0x9E37_79B9_7F4A_7C15) >> 61)]
        }

        /// Open loop: notifications go out on a schedule, completions send nothing.
        let paced: Bool

        init(notes: [Note], paced: Bool = false, start: @escaping Start) {
            self.notes = NoteShelf(notes)
            self.paced = paced
            self.start = start
        }

        func sendNext() {
            let index = next.add(1, ordering: .relaxed).oldValue
            guard index < notes.count else { return }
            send(index)
        }

        func send(_ index: Int) {
            // Each index is sent once (`next`, or the pacer's own count).
            guard let note = notes.take(index) else { return }
            let began = ContinuousClock.now
            // Moved into the send: the bench holds no copy of it.
            start(consume note) { result in
                let elapsed = began.duration(to: .now)
                let micros = elapsed.components.seconds * 1_000_000 + elapsed.components.attoseconds / 1_000_000_000_000
                self.shard.tally.withLock { tally in
                    _ = tally.latency.record(UInt64(max(1, micros)))
                    switch result {
                    case .success(let response) where response.status == 200:
                        tally.succeeded += 1
                    case .success(let response):
                        tally.failed["\(response.status) \(response.reason?.wireValue ?? "-")", default: 0] += 1
                    case .failure(let error as APNsTransportError):
                        tally.failed[error.metricLabel, default: 0] += 1
                    case .failure(let error as PushError):
                        tally.failed[error.code.description, default: 0] += 1
                    case .failure:
                        tally.failed["error", default: 0] += 1
                    }
                }
                if self.paced {
                    // The pacer sends the next ones.
                } else if case .failure = result {
                    // A failure may come back synchronously: do not recurse.
                    Task { self.sendNext() }
                } else {
                    self.sendNext()
                }
                if self.done.add(1, ordering: .acquiringAndReleasing).newValue == self.notes.count {
                    let finished = self.tally.withLock { tally in
                        defer { tally.finished = nil }
                        return tally.finished
                    }
                    finished?.resume()
                }
            }
        }
    }

    /// The transport's callback form, sent straight to it.
    private static func transportStart(_ transport: TenantTransport) -> Driver<AdmittedNotification>.Start {
        { note, completion in
            transport.send(note) { result in
                // Moved, not copied (`mapError` would copy the answer's strings).
                switch consume result {
                case .success(let response): completion(.success(response))
                case .failure(let error): completion(.failure(error))
                }
            }
        }
    }

    static func run(_ notes: [AdmittedNotification], through transport: TenantTransport, concurrency: Int) async -> BenchFigures {
        await run(notes, concurrency: concurrency, start: transportStart(transport))
    }

    /// Closed loop by callbacks: `concurrency` sends in flight, each answer starting the next.
    static func run<Note: Sendable>(
        _ notes: [Note], concurrency: Int,
        start: @escaping @Sendable (consuming Note, @escaping @Sendable (consuming Result<APNsResponse, any Error>) -> Void) -> Void
    ) async -> BenchFigures {
        let driver = Driver(notes: notes, start: start)
        return await measure(driver) {
            for _ in 0..<max(1, min(concurrency, notes.count)) { driver.sendNext() }
        }
    }

    /// Open loop at a fixed rate: notification `i` goes out at `start + i / rate` whatever the
    /// answers do (a tenant with a steady, modest flow), so the figures show whether it keeps its
    /// rate and how its latency changes, rather than how much CPU it can grab.
    static func runPaced(_ notes: [AdmittedNotification], through transport: TenantTransport, rate: Double) async -> BenchFigures {
        let driver = Driver(notes: notes, paced: true, start: transportStart(transport))
        let total = notes.count
        return await measure(driver) {
            Task {
                let start = ContinuousClock.now
                var sent = 0
                while sent < total {
                    let due = min(total, Int(Double(start.duration(to: .now).secondsValue) * rate) + 1)
                    while sent < due {
                        driver.send(sent)
                        sent += 1
                    }
                    try? await Task.sleep(for: .milliseconds(1))
                }
            }
        }
    }

    private static func measure<Note: Sendable>(_ driver: Driver<Note>, start body: () -> Void) async -> BenchFigures {
        let cpuBefore = ProcessUsage.now()
        let start = ContinuousClock.now
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            driver.tally.withLock { $0.finished = continuation }
            body()
        }
        let wall = start.duration(to: .now)
        let cpuAfter = ProcessUsage.now()
        var figures = BenchFigures()
        figures.wallSeconds = Double(wall.components.seconds) + Double(wall.components.attoseconds) / 1e18
        figures.cpuSeconds = cpuAfter.cpuSeconds - cpuBefore.cpuSeconds
        for shard in driver.shards {
            shard.tally.withLock { tally in
                figures.latency.add(tally.latency)
                figures.succeeded += tally.succeeded
                for (label, count) in tally.failed { figures.failed[label, default: 0] += count }
            }
        }
        figures.sent = driver.notes.count
        return figures
    }
}

/// CPU time and peak memory of this process (getrusage).
struct ProcessUsage {
    var cpuSeconds: Double
    /// Peak resident set size, in bytes.
    var peakRSSBytes: Int

    static func now() -> ProcessUsage {
        var usage = rusage()
        #if canImport(Glibc)
            getrusage(RUSAGE_SELF.rawValue, &usage)
        #else
            getrusage(RUSAGE_SELF, &usage)
        #endif
        let user = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1_000_000
        let system = Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1_000_000
        #if canImport(Darwin)
            let rss = Int(usage.ru_maxrss)  // bytes on Darwin
        #else
            let rss = Int(usage.ru_maxrss) * 1024  // kilobytes on Linux
        #endif
        return ProcessUsage(cpuSeconds: user + system, peakRSSBytes: rss)
    }
}
