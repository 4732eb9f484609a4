import Foundation
import HeraldCore
import Logging
import Synchronization

/// One broadcast channel the sandbox made.
public struct SandboxChannel: Sendable, Hashable, Codable {
    /// The base64 ID given in `apns-channel-id`.
    public var id: String
    public var bundleID: String
    /// `message-storage-policy`: 0 (no message stored) or 1 (most recent message stored).
    public var storagePolicy: Int
    public var createdAt: Date

    public init(id: String, bundleID: String, storagePolicy: Int, createdAt: Date) {
        self.id = id
        self.bundleID = bundleID
        self.storagePolicy = storagePolicy
        self.createdAt = createdAt
    }
}

/// The sandbox's channel management service state: every app's channels, at most
/// ``limit`` per app (APNs allows 10,000 per app and environment), kept in a file when the
/// sandbox has a state directory (written after every change, read at start).
final class SandboxChannels: Sendable {
    let limit: Int
    private let file: URL?
    /// Channels by bundle ID, then by ID.
    private let channels: Mutex<[String: [String: SandboxChannel]]>

    /// - Throws: `SandboxError.configuration` when the state file exists but cannot be read.
    private let logger: Logger

    init(limit: Int, file: URL?, logger: Logger) throws {
        self.limit = max(0, limit)
        self.file = file
        self.logger = logger
        var loaded: [String: [String: SandboxChannel]] = [:]
        if let file, FileManager.default.fileExists(atPath: file.path) {
            do {
                let decoder = JSONDecoder()
                decoder.dateDecodingStrategy = .millisecondsSince1970
                let list = try decoder.decode([SandboxChannel].self, from: Data(contentsOf: file))
                for channel in list { loaded[channel.bundleID, default: [:]][channel.id] = channel }
            } catch {
                throw SandboxError.configuration("\(file.path): the sandbox's channel state cannot be read: \(error)")
            }
        }
        channels = Mutex(loaded)
    }

    /// Makes a channel: a new random ID (16 bytes, base64), or nil when the app is at its limit.
    func create(bundleID: String, storagePolicy: Int, now: Date) -> SandboxChannel? {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let channel = SandboxChannel(
            id: Data(bytes).base64EncodedString(), bundleID: bundleID, storagePolicy: storagePolicy, createdAt: now)
        let made = channels.withLock { channels -> Bool in
            guard channels[bundleID, default: [:]].count < limit else { return false }
            channels[bundleID, default: [:]][channel.id] = channel
            return true
        }
        guard made else { return nil }
        persist()
        return channel
    }

    func read(bundleID: String, id: String) -> SandboxChannel? {
        channels.withLock { $0[bundleID]?[id] }
    }

    /// True when the channel existed.
    func delete(bundleID: String, id: String) -> Bool {
        let deleted = channels.withLock { $0[bundleID]?.removeValue(forKey: id) != nil }
        if deleted { persist() }
        return deleted
    }

    /// The app's channels, oldest first.
    func list(bundleID: String) -> [SandboxChannel] {
        channels.withLock { Array(($0[bundleID] ?? [:]).values) }.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
    }

    private func persist() {
        guard let file else { return }
        let all = channels.withLock { $0.values.flatMap(\.values) }.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
        do {
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .millisecondsSince1970
            let data = try encoder.encode(all)
            try data.write(to: file, options: .atomic)
        } catch {
            // The channels stay in memory; the next change writes them all again.
            logger.error(
                "sandbox could not write its channel state", metadata: ["herald.file": "\(file.path)", "herald.error": "\(error)"])
        }
    }
}
