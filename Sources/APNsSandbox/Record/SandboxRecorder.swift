import Foundation
import HeraldCore
import Synchronization

/// Keeps the record of requests, the counters and the audit; shared by all connections.
final class SandboxRecorder: Sendable {
    private struct State {
        var records: [SandboxRecordedRequest] = []
        var counters = SandboxCounters()
        var audit = SandboxAudit()
    }

    private let state = Mutex(State())
    private let sequence = Atomic<Int>(0)
    private let keepInMemory: Bool
    private let maximumKept: Int
    private let file: JSONLinesWriter?

    init(keepInMemory: Bool, maximumKept: Int, file: URL?) throws {
        self.keepInMemory = keepInMemory
        self.maximumKept = maximumKept
        self.file = try file.map { try JSONLinesWriter(url: $0) }
    }

    /// True when a record is kept anywhere (so hashing the payload is worth it).
    var isRecording: Bool { keepInMemory || file != nil }

    func nextSequence() -> Int { sequence.wrappingAdd(1, ordering: .relaxed).newValue }

    /// Counts one request; builds and keeps its record only when something records.
    func record(
        processed: Bool, status: Int?, reason: APNsReason?, _ makeRecord: () -> SandboxRecordedRequest
    ) {
        let request: SandboxRecordedRequest? = isRecording ? makeRecord() : nil
        state.withLock { state in
            state.counters.requests += 1
            if processed {
                state.counters.answered += 1
                if let status { state.counters.byStatus[status, default: 0] += 1 }
                if let reason { state.counters.byReason[reason.wireValue, default: 0] += 1 }
            } else {
                state.counters.cutOff += 1
            }
            if keepInMemory, let request {
                if state.records.count < maximumKept {
                    // Kept in order of arrival: a record made after a later request's (its
                    // answer took longer) goes in before it, usually at the end.
                    var position = state.records.endIndex
                    while position > 0, state.records[position - 1].sequence > request.sequence { position -= 1 }
                    state.records.insert(request, at: position)
                } else {
                    state.counters.recordsNotKept += 1
                }
            }
        }
        if let request { file?.append(request) }
    }

    func connectionOpened() { state.withLock { $0.counters.connections += 1 } }
    func refusedStream() { state.withLock { $0.counters.refusedStreams += 1 } }
    func oversizedHeaders() { state.withLock { $0.counters.oversizedHeaders += 1 } }
    func goawaySent() { state.withLock { $0.counters.goawaysSent += 1 } }
    func connectionDropped() { state.withLock { $0.counters.connectionsDropped += 1 } }
    func heldForLatency() { state.withLock { $0.counters.heldForLatency += 1 } }
    func priorityFrame() { state.withLock { $0.audit.priorityFrames += 1 } }
    func headersWithPriority() { state.withLock { $0.audit.headersWithPriority += 1 } }
    func streamAboveLimit() { state.withLock { $0.audit.streamsAboveLimit += 1 } }

    func hpackViolation(_ description: String) {
        state.withLock { state in
            state.audit.hpackViolationCount += 1
            if state.audit.hpackViolations.count < SandboxAudit.violationListLimit {
                state.audit.hpackViolations.append(description)
            }
        }
    }

    /// The kept records in order of arrival.
    var requests: [SandboxRecordedRequest] {
        state.withLock { $0.records }
    }

    var counters: SandboxCounters { state.withLock { $0.counters } }
    var audit: SandboxAudit { state.withLock { $0.audit } }

    func reset() {
        state.withLock { $0 = State() }
    }

    func flush() { file?.flush() }
    func close() { file?.close() }
}

/// Appends JSON lines to a file, buffered; flushed by size, by the sandbox's timer and at shutdown.
final class JSONLinesWriter: Sendable {
    private struct State {
        var handle: FileHandle?
        var buffer: [UInt8] = []
    }

    private let state: Mutex<State>
    private static let flushThreshold = 64 * 1024

    init(url: URL) throws {
        if !FileManager.default.fileExists(atPath: url.path) {
            guard FileManager.default.createFile(atPath: url.path, contents: nil) else {
                throw SandboxError.configuration("cannot create the record file \(url.path)")
            }
        }
        let handle = try FileHandle(forWritingTo: url)
        try handle.seekToEnd()
        self.state = Mutex(State(handle: handle))
    }

    func append(_ request: SandboxRecordedRequest) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .millisecondsSince1970
        guard let line = try? encoder.encode(request) else { return }
        state.withLock { state in
            state.buffer.append(contentsOf: line)
            state.buffer.append(UInt8(ascii: "\n"))
            if state.buffer.count >= Self.flushThreshold { Self.write(&state) }
        }
    }

    func flush() { state.withLock { Self.write(&$0) } }

    func close() {
        state.withLock { state in
            Self.write(&state)
            try? state.handle?.close()
            state.handle = nil
        }
    }

    private static func write(_ state: inout State) {
        guard !state.buffer.isEmpty, let handle = state.handle else { return }
        try? handle.write(contentsOf: state.buffer)
        state.buffer.removeAll(keepingCapacity: true)
    }
}
