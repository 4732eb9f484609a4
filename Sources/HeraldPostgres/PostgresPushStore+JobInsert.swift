import Foundation
import HeraldCore
import HeraldStore
import Logging
import PostgresNIO

// A new job's items as chunk rows (migration v9.1-pg): the transaction that creates the job
// writes its items as `job_chunk` rows of up to `chunkItems` items each (one array per field).
// While the job runs, its items are claimed in ranges and their outcomes kept apart (see
// `PostgresPushStore+ClaimRanges.swift`); an item gets a `job_item` row of its own only when it
// has more to keep than its chunk and a plain success record.
//
// Why: inserting a row per item costs the server close to a second of CPU for a 100,000-item
// job (the heap, the primary key and the pending index about equally), and the 202 would wait
// for all of it. A hundred chunk rows of arrays cost a few milliseconds of the server's time.

extension PostgresPushStore {
    /// Items per `job_chunk` row: a claim of 500 reads one or two rows.
    static let chunkItems = 1_000

    /// Chunk rows per `INSERT` (one statement of about 1.5 MB for a template batch).
    static let chunksPerInsert = 10

    /// Payloads per `INSERT` (one array per column): bounds one statement's message.
    static let payloadsPerInsert = 10_000

    /// A job's payloads, one per run of equal payloads (v8): a template batch has one.
    struct PayloadRuns {
        /// The payload id of each item, in order.
        private(set) var refs: [Int32] = []
        /// The distinct runs' payloads, ids 1, 2, ….
        private(set) var payloads: [ByteBuffer] = []

        init(_ notifications: [HeraldCore.Notification]) {
            refs.reserveCapacity(notifications.count)
            var last: [UInt8]? = nil
            for notification in notifications {
                // Equal to the previous one: a template batch's shared array compares by identity.
                if last != notification.payload {
                    payloads.append(ByteBuffer(bytes: notification.payload))
                    last = notification.payload
                }
                refs.append(Int32(clamping: payloads.count))
            }
        }
    }

    /// Writes the job's payloads and chunk rows on the transaction's connection. Items without
    /// an apns-id get one here, so every resend of an item uses the same.
    static func insertItems(
        _ connection: PostgresConnection, tenant: TenantID, job: JobID, notifications: [HeraldCore.Notification],
        logger: Logger
    ) async throws {
        let runs = PayloadRuns(notifications)
        var start = 0
        while start < runs.payloads.count {
            let end = min(start + payloadsPerInsert, runs.payloads.count)
            var binds = PostgresBindings(capacity: 4)
            binds.append(tenant.rawValue)
            binds.append(job.rawValue)
            binds.append((start..<end).map { Int32(clamping: $0 + 1) })
            binds.append(Array(runs.payloads[start..<end]))
            try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        INSERT INTO job_payload (tenant, job_id, id, payload)
                        SELECT $1, $2, t.id, t.payload FROM unnest($3::int[], $4::bytea[]) AS t(id, payload)
                        """, binds: binds), logger: logger)
            start = end
        }
        // A batch item is admitted here: an item without an apns-id gets its one for every
        // attempt, stored with it.
        var ids = NotificationIDGenerator()
        start = 0
        let perStatement = chunkItems * chunksPerInsert
        while start < notifications.count {
            let end = min(start + perStatement, notifications.count)
            try await connection.query(
                try insertChunks(
                    tenant: tenant, job: job, notifications: notifications[start..<end], refs: runs.refs[start..<end],
                    ids: &ids),
                logger: logger)
            start = end
        }
    }

    /// Bits of `job_chunk.nulls`: which optional fields an item lacks (arrays hold no NULL
    /// element as postgres-nio encodes them).
    enum MissingField: Int16 {
        case topic = 1
        case priority = 2
        case expiration = 4
        case collapseID = 8
    }

    /// One `INSERT` of up to ``chunksPerInsert`` chunk rows, each field an array bind.
    private static func insertChunks(
        tenant: TenantID, job: JobID, notifications: ArraySlice<HeraldCore.Notification>, refs: ArraySlice<Int32>,
        ids: inout NotificationIDGenerator
    ) throws -> PostgresQuery {
        var binds = PostgresBindings(capacity: 2 + 11 * chunksPerInsert)
        binds.append(tenant.rawValue)
        binds.append(job.rawValue)
        var values: [String] = []
        var start = notifications.startIndex
        while start < notifications.endIndex {
            let end = min(start + chunkItems, notifications.endIndex)
            let count = end - start
            var tokens = PostgresArray<TokenBytes>(capacity: count)
            var topics = PostgresArray<String>(capacity: count)
            var pushTypes = PostgresArray<String>(capacity: count)
            var priorities = PostgresArray<Int32>(capacity: count)
            var expirations = PostgresArray<Int64>(capacity: count)
            var collapseIDs = PostgresArray<String>(capacity: count)
            var apnsIDs = PostgresArray<UUID>(capacity: count)
            var nulls = PostgresArray<Int16>(capacity: count)
            for notification in notifications[start..<end] {
                var missing: Int16 = 0
                guard let device = notification.deviceToken else {
                    throw StoreError.invalidArgument("a batch item needs a device token; a broadcast is not a batch item")
                }
                tokens.append(TokenBytes(device))
                if let topic = notification.topic { topics.append(topic) } else {
                    topics.append("")
                    missing |= MissingField.topic.rawValue
                }
                pushTypes.append(notification.pushType.rawValue)
                if let priority = notification.priority { priorities.append(Int32(priority.rawValue)) } else {
                    priorities.append(0)
                    missing |= MissingField.priority.rawValue
                }
                switch notification.expiration {
                case nil:
                    expirations.append(0)
                    missing |= MissingField.expiration.rawValue
                case .immediately?: expirations.append(0)
                case .at(let seconds)?: expirations.append(Int64(seconds))
                }
                if let collapseID = notification.collapseID { collapseIDs.append(collapseID) } else {
                    collapseIDs.append("")
                    missing |= MissingField.collapseID.rawValue
                }
                if let id = notification.id {
                    apnsIDs.append(UUID(id.words))
                } else {
                    apnsIDs.append(UUID(ids.nextWords()))
                }
                nulls.append(missing)
            }
            let first = binds.count + 1
            values.append(
                "($1, $2, " + (first..<first + 11).map { "$\($0)" }.joined(separator: ", ") + ")")
            binds.append(Int32(clamping: start))
            binds.append(Int32(clamping: count))
            binds.append(tokens)
            binds.append(topics)
            binds.append(pushTypes)
            binds.append(priorities)
            binds.append(expirations)
            binds.append(collapseIDs)
            binds.append(apnsIDs)
            binds.append(PostgresArray(Array(refs[start..<end])))
            binds.append(nulls)
            start = end
        }
        return PostgresQuery(
            unsafeSQL: """
                INSERT INTO job_chunk (tenant, job_id, first_idx, count, token_bytes, topics, push_types, priorities,
                                       expirations, collapse_ids, apns_uuids, payload_refs, nulls)
                VALUES \(values.joined(separator: ", "))
                """, binds: binds)
    }
}
