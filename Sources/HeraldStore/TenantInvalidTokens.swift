import HeraldCore

/// One tenant's invalid tokens, as the feedback plugin sees them.
///
/// With `refuse` (the plugin's default) every send of the tenant waits for a lookup before it
/// goes, so a batch with 100 items on the wire would make 100 reads at a time, each a round trip
/// to PostgreSQL. The lookups that arrive while a read runs go together into the next one
/// (``GroupCommit``; ``PushStore/invalidTokens(tenant:lookups:)``). Each still reads the store as
/// it is when its read runs: a token another instance recorded a moment ago is found.
public struct TenantInvalidTokens: InvalidTokenRecorder {
    /// Runs one grouped read of the given number of lookups: the send path's bound and skip on a
    /// shared store (`SendPathLookups`), or nil to read as it is.
    public typealias Bound =
        @Sendable (Int, @escaping @Sendable () async throws -> [InvalidTokenRecord?]) async throws -> [InvalidTokenRecord?]

    /// The most lookups in one read.
    public static let lookupsPerRead = 1_000

    public let tenant: TenantID
    private let store: any PushStore
    private let reads: GroupCommit<InvalidTokenLookup, InvalidTokenRecord?>

    public init(tenant: TenantID, store: any PushStore, bound: Bound? = nil) {
        self.tenant = tenant
        self.store = store
        // Every lookup is answered by callback, so each read runs in a task of the group's own:
        // no waiting send that gives up (its cancellation) takes anybody else's answer with it.
        self.reads = GroupCommit(maxBatch: Self.lookupsPerRead) { lookups in
            let read: @Sendable () async throws -> [InvalidTokenRecord?] = {
                try await store.invalidTokens(tenant: tenant, lookups: lookups)
            }
            let result: Result<[InvalidTokenRecord?], any Error>
            do {
                if let bound {
                    result = .success(try await bound(lookups.count, read))
                } else {
                    result = .success(try await read())
                }
            } catch {
                result = .failure(error)
            }
            switch result {
            case .success(let records) where records.count == lookups.count:
                return records.map { .success($0) }
            case .success:
                return lookups.map { _ in .failure(StoreError.corrupt("the store answered a different number of lookups")) }
            case .failure(let error):
                return lookups.map { _ in .failure(error) }
            }
        }
    }

    /// Lookups waiting for the next read (for tests).
    public var waitingLookups: Int { reads.waitingCount }

    public func record(_ record: InvalidTokenRecord) async throws {
        try await store.recordInvalidToken(record, tenant: tenant)
    }

    public func invalidToken(_ token: DeviceToken, topic: String, environment: APNsEnvironment) async throws
        -> InvalidTokenRecord?
    {
        try await withCheckedThrowingContinuation { continuation in
            lookUp(token, topic: topic, environment: environment) { continuation.resume(with: $0) }
        }
    }

    /// A lookup without a task of its own: it waits in the group for the next read.
    public func lookUp(
        _ token: DeviceToken, topic: String, environment: APNsEnvironment,
        answer: @escaping @Sendable (Result<InvalidTokenRecord?, any Error>) -> Void
    ) {
        reads.submit(InvalidTokenLookup(token: token, topic: topic, environment: environment), answer: answer)
    }
}
