import Foundation
import HeraldCore
import HeraldStore
import Hummingbird

/// Usage per tenant (`GET /admin/usage`, a tenant's own `GET /v1/usage`): the counts the store
/// keeps per hour (``HeraldStore/UsageLedger``), summed by hour or by day (UTC), as JSON or CSV.
/// Periods without any count are left out.
struct UsageHandlers: Sendable {
    let ledger: any UsageLedger
    let now: @Sendable () -> Date

    enum Granularity: String, Sendable {
        case hour, day

        var seconds: Double { self == .hour ? 3600 : 86_400 }
        /// The longest range one request may span.
        var maxSpan: Double { self == .hour ? 31 * 86_400 : 400 * 86_400 }
    }

    /// The failure classes, as the answer names them.
    static let failureClasses: [(UsageKind, String)] = [
        (.failedRejected, "rejected"), (.failedUnregistered, "unregistered"), (.failedUnavailable, "unavailable"),
        (.failedRefused, "refused"), (.failedUnknown, "unknown"),
    ]

    struct Counts: Encodable, Sendable {
        var accepted: Int64 = 0
        var delivered: Int64 = 0
        var failed: Int64 = 0
        var failedByClass: [String: Int64] = Dictionary(uniqueKeysWithValues: UsageHandlers.failureClasses.map { ($0.1, 0) })
        var batchItems: Int64 = 0

        mutating func add(_ kind: UsageKind, _ count: Int64) {
            switch kind {
            case .accepted: accepted &+= count
            case .delivered: delivered &+= count
            case .batchItems: batchItems &+= count
            default:
                failed &+= count
                if let name = UsageHandlers.failureClasses.first(where: { $0.0 == kind })?.1 {
                    failedByClass[name, default: 0] &+= count
                }
            }
        }
    }

    struct Bucket: Encodable, Sendable {
        var start: Date
        var tenant: String
        var counts: Counts

        enum CodingKeys: String, CodingKey { case start, tenant, accepted, delivered, failed, failedByClass, batchItems }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(start, forKey: .start)
            try container.encode(tenant, forKey: .tenant)
            try container.encode(counts.accepted, forKey: .accepted)
            try container.encode(counts.delivered, forKey: .delivered)
            try container.encode(counts.failed, forKey: .failed)
            try container.encode(counts.failedByClass, forKey: .failedByClass)
            try container.encode(counts.batchItems, forKey: .batchItems)
        }
    }

    struct UsageAnswer: Encodable, Sendable {
        @Nullable var tenant: String?
        var granularity: String
        var from: Date
        var to: Date
        var buckets: [Bucket]
        var totals: Counts
    }

    struct Query: Sendable {
        var from: Date
        var to: Date
        var granularity: Granularity
        var csv: Bool
    }

    // MARK: Routes

    func adminUsage(_ request: Request, context: some RequestContext) async throws -> Response {
        let parameters = request.uri.queryParameters
        let tenant = try parameters["tenant"].map { raw throws(APIError) -> String in
            guard let id = try? TenantID(String(raw)) else {
                throw APIError.invalidQuery("tenant", "must be a tenant ID ([a-z0-9][a-z0-9-]{0,63})")
            }
            return id.rawValue
        }
        return try await answer(request, context: context, tenant: tenant, allowed: ["tenant", "from", "to", "granularity", "format"])
    }

    func tenantUsage(_ request: Request, context: TenantRequestContext) async throws -> Response {
        try await answer(request, context: context, tenant: context.tenant.id.rawValue, allowed: ["from", "to", "granularity", "format"])
    }

    private func answer(_ request: Request, context: some RequestContext, tenant: String?, allowed: [String]) async throws -> Response {
        let query = try Self.query(request, allowed: allowed, now: now())
        let counts = try await ledger.usage(tenant: tenant, from: query.from, to: query.to)
        let (buckets, totals) = Self.buckets(counts, granularity: query.granularity)
        if query.csv {
            var headers = HTTPFields()
            headers[.contentType] = "text/csv; charset=utf-8"
            return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: Self.csv(buckets))))
        }
        let answer = UsageAnswer(
            tenant: tenant, granularity: query.granularity.rawValue, from: query.from, to: query.to, buckets: buckets,
            totals: totals)
        return try APIResponseEncoder().encode(answer, from: request, context: context)
    }

    // MARK: Reading and summing

    static func query(_ request: Request, allowed: [String], now: Date) throws(APIError) -> Query {
        let parameters = request.uri.queryParameters
        for (key, _) in parameters where !allowed.contains(String(key)) {
            throw APIError.invalidQuery(String(key), "is not a parameter of this route (\(allowed.joined(separator: ", ")))")
        }
        func date(_ name: String) throws(APIError) -> Date? {
            guard let text = parameters[name[...]].map(String.init) else { return nil }
            guard let date = Timestamps.parseQuery(text) else {
                throw APIError.invalidQuery(name, "must be an RFC 3339 time (2026-11-29T12:00:00Z) or decimal UNIX seconds")
            }
            return date
        }
        let granularity: Granularity
        switch parameters["granularity"].map(String.init) {
        case nil, "hour": granularity = .hour
        case "day": granularity = .day
        default: throw APIError.invalidQuery("granularity", "must be hour or day")
        }
        var csv = request.headers[.accept]?.lowercased().hasPrefix("text/csv") ?? false
        switch parameters["format"].map(String.init) {
        case nil: break
        case "json": csv = false
        case "csv": csv = true
        default: throw APIError.invalidQuery("format", "must be json or csv")
        }
        // Whole periods: `to` (default: the end of the current period) and `from` (default: 7
        // days before) are rounded down to their period's start.
        let step = granularity.seconds
        func floor(_ date: Date) -> Date { Date(timeIntervalSince1970: (date.timeIntervalSince1970 / step).rounded(.down) * step) }
        let to = floor(try date("to") ?? now.addingTimeInterval(step))
        let from = floor(try date("from") ?? to.addingTimeInterval(-7 * 86_400))
        // Well formed but not a range this route answers: 422.
        guard from < to else {
            throw APIError.invalidRange("from", "must be before to (after rounding down to whole \(granularity.rawValue)s)")
        }
        guard to.timeIntervalSince(from) <= granularity.maxSpan else {
            throw APIError.invalidRange(
                "from", "the range may span at most \(Int(granularity.maxSpan / 86_400)) days by \(granularity.rawValue)")
        }
        return Query(from: from, to: to, granularity: granularity, csv: csv)
    }

    /// The counts summed per period and tenant (in time order, then by tenant), and in all.
    static func buckets(_ counts: [UsageCount], granularity: Granularity) -> ([Bucket], Counts) {
        struct Key: Hashable {
            var start: Double
            var tenant: String
        }
        var sums: [Key: Counts] = [:]
        var totals = Counts()
        for count in counts {
            let start = (count.hour.timeIntervalSince1970 / granularity.seconds).rounded(.down) * granularity.seconds
            sums[Key(start: start, tenant: count.tenant), default: Counts()].add(count.kind, count.count)
            totals.add(count.kind, count.count)
        }
        let buckets = sums.sorted { ($0.key.start, $0.key.tenant) < ($1.key.start, $1.key.tenant) }.map {
            Bucket(start: Date(timeIntervalSince1970: $0.key.start), tenant: $0.key.tenant, counts: $0.value)
        }
        return (buckets, totals)
    }

    static func csv(_ buckets: [Bucket]) -> String {
        var lines = [
            (["start", "tenant", "accepted", "delivered", "failed"] + failureClasses.map { "failed_\($0.1)" } + ["batch_items"])
                .joined(separator: ",")
        ]
        for bucket in buckets {
            let counts = bucket.counts
            let fields =
                [Timestamps.iso8601(bucket.start), bucket.tenant, String(counts.accepted), String(counts.delivered), String(counts.failed)]
                + failureClasses.map { String(counts.failedByClass[$0.1] ?? 0) } + [String(counts.batchItems)]
            lines.append(fields.joined(separator: ","))
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
