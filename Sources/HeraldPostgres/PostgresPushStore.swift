import Foundation
import HeraldCore
import HeraldStore
import Logging
import PostgresNIO
import Synchronization

/// The shared ``PushStore``: PostgreSQL through postgres-nio's connection pool, for several
/// `herald serve` instances on one database.
///
/// ```swift
/// let store = try await PostgresPushStore.open(configuration, logger: logger)  // migrates
/// try await store.recordInvalidToken(record, tenant: tenant)
/// await store.close()
/// ```
///
/// Every statement takes its values as bind parameters (`PostgresQuery` interpolation); the only
/// text put into SQL is this file's constants and the schema name, which ``Configuration``
/// checks is a plain identifier. Times are stored as Unix milliseconds like the SQLite store's,
/// so both backends answer the contract tests alike.
public final class PostgresPushStore: PushStore, JobReports, UnansweredCallCounting {
    /// Where and how to connect.
    public struct Configuration: Sendable {
        public var host: String
        public var port: Int
        public var username: String
        /// From the configuration's `env:`/`file:` reference; never logged.
        public var password: String?
        public var database: String
        /// The schema Herald's tables live in (created if missing); nil: the role's default
        /// search path (usually `public`).
        public var schema: String?
        /// The connections the pool opens at start and keeps open (one replaced when it closes).
        public var poolSize: Int
        /// TLS to the server: required, or off (a server on loopback or a private network).
        public var requireTLS: Bool
        /// The longest one call waits for the server — a query, or a transaction with all its
        /// queries — before it fails with ``StoreError/timedOut(_:)`` (``BoundedPostgresClient``).
        public var callTimeout: Duration
        /// The clock ``callTimeout`` is measured on: the system's; a test steps its own.
        public var clock: any PushClock = SystemPushClock()
        /// How often every connection gets a `SELECT 1` (``PoolKeepAlive``).
        var keepAlive = PoolKeepAlive.Configuration()

        /// What PostgreSQL shows as the connections' `application_name` (`pg_stat_activity`):
        /// `herald`, or `herald/<schema>` for a store in a schema of its own.
        public var applicationName: String { schema.map { "herald/\($0)" } ?? "herald" }

        public init(
            host: String, port: Int = 5432, username: String, password: String?, database: String,
            schema: String? = nil, poolSize: Int = 10, requireTLS: Bool = false, callTimeout: Duration = .seconds(30)
        ) {
            self.host = host
            self.port = port
            self.username = username
            self.password = password
            self.database = database
            self.schema = schema
            self.poolSize = poolSize
            self.requireTLS = requireTLS
            self.callTimeout = callTimeout
        }

        /// A `postgres://user:password@host:port/database` URL, as `scripts/postgres.sh` prints
        /// (for tests and tools; `config/herald.yaml` takes the password separately).
        public init(url: String, schema: String? = nil, poolSize: Int = 10) throws(StoreError) {
            guard let components = URLComponents(string: url),
                components.scheme == "postgres" || components.scheme == "postgresql",
                let host = components.host, !host.isEmpty, let user = components.user, !user.isEmpty
            else {
                throw StoreError.invalidArgument(
                    "a PostgreSQL URL must read postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
            }
            let database = String(components.path.drop(while: { $0 == "/" }))
            guard !database.isEmpty, !database.contains("/") else {
                throw StoreError.invalidArgument("a PostgreSQL URL must name the database: postgres://USER@HOST/DATABASE")
            }
            self.init(
                host: host, port: components.port ?? 5432, username: user, password: components.password,
                database: database, schema: schema, poolSize: poolSize)
        }

        /// True for a schema name Herald puts in SQL as an identifier: 1 to 63 of `a-z 0-9 _`,
        /// not starting with a digit.
        public static func isValidSchema(_ name: String) -> Bool {
            guard let first = name.utf8.first, name.utf8.count <= 63, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first)
            else { return false }
            return name.utf8.allSatisfy { byte in
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
            }
        }

        /// `host:port/database` (no user, no password), for logs and errors.
        public var displayName: String { "\(host):\(port)/\(database)" }
    }

    public let configuration: Configuration
    /// Every call bounded by ``Configuration/callTimeout``.
    let client: BoundedPostgresClient

    /// Calls that timed out (`call_timeout`) or found PostgreSQL unreachable since the store opened.
    public var unansweredCalls: UnansweredStoreCalls { client.unanswered.counts }
    let logger: Logger
    private let runner: Task<Void, Never>
    private let keepAlive = Mutex<Task<Void, Never>?>(nil)
    /// Outcomes recorded together (``recordOutcome(tenant:job:index:result:)``).
    let resultCommits: GroupCommit<ResultWrite, Bool>

    private init(configuration: Configuration, pools: [BoundedPostgresClient.LoopPool], logger: Logger, runner: Task<Void, Never>) {
        self.configuration = configuration
        let client = BoundedPostgresClient(pools: pools, limit: configuration.callTimeout, deadlines: StoreDeadline(clock: configuration.clock))
        self.client = client
        self.logger = logger
        self.runner = runner
        self.resultCommits = GroupCommit(maxBatch: Self.resultsPerWrite) { batch in
            await Self.writeResults(batch, client: client, logger: logger)
        }
    }

    /// Connects the pool and brings the schema up to date (under an advisory lock, so instances
    /// starting together migrate once).
    public static func open(_ configuration: Configuration, logger: Logger) async throws -> PostgresPushStore {
        try await open(configuration, logger: logger, migratingUpTo: nil)
    }

    /// Opens the store with the migrations up to and including `lastMigration` (every one when nil).
    static func open(_ configuration: Configuration, logger: Logger, migratingUpTo lastMigration: String?)
        async throws -> PostgresPushStore
    {
        if let schema = configuration.schema, !Configuration.isValidSchema(schema) {
            throw StoreError.invalidArgument("schema must be 1 to 63 of a-z 0-9 _, not starting with a digit")
        }
        guard configuration.poolSize >= 1, configuration.poolSize <= 1_000 else {
            throw StoreError.invalidArgument("pool size must be 1 to 1000 (got \(configuration.poolSize))")
        }
        guard configuration.callTimeout >= .seconds(1), configuration.callTimeout <= .seconds(3600) else {
            throw StoreError.invalidArgument("the call timeout must be 1 s to 1 h")
        }
        var clientConfiguration = PostgresClient.Configuration(
            host: configuration.host, port: configuration.port, username: configuration.username,
            password: configuration.password, database: configuration.database,
            tls: configuration.requireTLS ? .require(.makeClientConfiguration()) : .disable)
        // Every connection opened at start and kept (none armed with an idle timer), touched by
        // ``PoolKeepAlive`` instead of postgres-nio's keep-alive.
        clientConfiguration.options.keepAliveBehavior = nil
        clientConfiguration.options.connectTimeout = .seconds(10)
        clientConfiguration.options.additionalStartupParameters = startupParameters(configuration)
        // The connections shared out over the event loops, a client a loop
        // (``BoundedPostgresClient``): a call made on a loop is served by a connection of its own.
        let loops = Array(PostgresClient.defaultEventLoopGroup.makeIterator())
        let shares = BoundedPostgresClient.shares(of: configuration.poolSize, over: loops.count)
        let pools = zip(loops, shares).map { loop, connections in
            var options = clientConfiguration
            options.options.maximumConnections = connections
            options.options.minimumConnections = connections
            return BoundedPostgresClient.LoopPool(
                client: PostgresClient(configuration: options, eventLoopGroup: loop, backgroundLogger: logger),
                loop: loop, connections: connections)
        }
        let runner = Task {
            await withDiscardingTaskGroup { group in
                for pool in pools { group.addTask { await pool.client.run() } }
            }
        }
        let store = PostgresPushStore(configuration: configuration, pools: pools, logger: logger, runner: runner)
        do {
            try await store.migrate(upTo: lastMigration)
            store.startKeepAlive()
        } catch {
            await store.close()
            throw StoreError.cannotOpen(
                "cannot open the PostgreSQL store at \(configuration.displayName): \(Self.describe(error))")
        }
        return store
    }

    /// Closes the pool's connections; the store must not be used afterwards.
    public func close() async {
        let keepAlive = keepAlive.withLock { task in
            defer { task = nil }
            return task
        }
        keepAlive?.cancel()
        await keepAlive?.value
        runner.cancel()
        await runner.value
    }

    /// Starts ``PoolKeepAlive``'s rounds (once the schema is up to date), ended by ``close()``.
    private func startKeepAlive() {
        let keepAlive = PoolKeepAlive(client: client, configuration: configuration.keepAlive, logger: logger)
        // On the system's clock, not the call timeout's: what idles a connection out is the network.
        let task = Task { await keepAlive.run(on: SystemPushClock()) }
        self.keepAlive.withLock { $0 = task }
    }

    /// Drops the store's schema and everything in it: the contract tests' throwaway schemas.
    func dropSchemaForTests() async throws { try await dropSchema() }

    /// Drops the store's schema and everything in it: `herald bench-store --postgres`'s throwaway
    /// schema (a store opened without a schema of its own refuses).
    public func dropSchema() async throws {
        guard let schema = configuration.schema, Configuration.isValidSchema(schema) else {
            throw StoreError.invalidArgument("only a store with a schema of its own can drop it")
        }
        try await client.query(PostgresQuery(unsafeSQL: "DROP SCHEMA \"\(schema)\" CASCADE"), logger: logger)
    }

    /// A PostgreSQL error without the query's text or binds: the server's message and SQLSTATE.
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] {
                return "\(message) (SQLSTATE \(error.serverInfo?[.sqlState] ?? "?"))"
            }
            if let underlying = error.underlying { return "\(error.code): \(underlying)" }
            return "\(error.code)"
        }
        if let error = error as? StoreError { return error.message }
        return String(describing: type(of: error))
    }

    // MARK: Invalid device tokens

    public func recordInvalidToken(_ record: InvalidTokenRecord, tenant: TenantID) async throws {
        let apnsTimestamp = record.apnsTimestamp.map(Self.millis)
        let registered = record.registeredAt.map(Self.millis)
        try await client.query(
            """
            INSERT INTO invalid_token
                (tenant, environment, token, topic, reason, apns_timestamp_ms, recorded_at_ms, registered_at_ms)
            VALUES (\(tenant.rawValue), \(record.environment.rawValue), \(record.token.hex), \(record.topic),
                    \(record.reason.wireValue), \(apnsTimestamp), \(Self.millis(record.recordedAt)), \(registered))
            ON CONFLICT (tenant, environment, token, topic) DO UPDATE SET
                reason = excluded.reason,
                apns_timestamp_ms = CASE
                    WHEN excluded.apns_timestamp_ms IS NULL THEN invalid_token.apns_timestamp_ms
                    WHEN invalid_token.apns_timestamp_ms IS NULL THEN excluded.apns_timestamp_ms
                    ELSE greatest(invalid_token.apns_timestamp_ms, excluded.apns_timestamp_ms) END,
                recorded_at_ms = greatest(invalid_token.recorded_at_ms, excluded.recorded_at_ms),
                registered_at_ms = coalesce(invalid_token.registered_at_ms, excluded.registered_at_ms)
            """, logger: logger)
    }

    public func invalidTokens(tenant: TenantID, limit: Int) async throws -> [InvalidTokenRecord] {
        try await client.query(
            """
            SELECT \(unescaped: Self.invalidTokenColumns) FROM invalid_token WHERE tenant = \(tenant.rawValue)
            ORDER BY recorded_at_ms DESC, token, topic LIMIT \(max(0, limit))
            """, logger: logger
        ).collect().map(Self.invalidTokenRecord)
    }

    @discardableResult
    public func registerToken(tenant: TenantID, token: DeviceToken, topic: String?, registeredAt: Date) async throws
        -> Int
    {
        let at = Self.millis(registeredAt)
        // `topic IS NULL` selects every topic of the token: one statement for both cases.
        return try await client.query(
            """
            UPDATE invalid_token SET registered_at_ms = greatest(coalesce(registered_at_ms, 0), \(at))
            WHERE tenant = \(tenant.rawValue) AND token = \(token.hex) AND (\(topic)::text IS NULL OR topic = \(topic))
            RETURNING 1
            """, logger: logger
        ).collect().count
    }

    @discardableResult
    public func removeInvalidToken(tenant: TenantID, token: DeviceToken, topic: String?) async throws -> Int {
        try await client.query(
            """
            DELETE FROM invalid_token
            WHERE tenant = \(tenant.rawValue) AND token = \(token.hex) AND (\(topic)::text IS NULL OR topic = \(topic))
            RETURNING 1
            """, logger: logger
        ).collect().count
    }

    // MARK: Jobs

    public func createJob(
        tenant: TenantID, id: JobID, environment: APNsEnvironment?, notifications: [HeraldCore.Notification],
        createdAt: Date, limits: JobLimits?
    ) async throws -> JobCreation {
        let created = Self.millis(createdAt)
        let logger = self.logger
        do {
            return try await createJobTransaction(
                tenant: tenant, id: id, environment: environment, notifications: notifications, created: created,
                limits: limits, logger: logger)
        } catch let error as PostgresTransactionError {
            // The caller sees the store's own error (a quota refusal, say), not the wrapper.
            if let cause = error.closureError { throw cause }
            throw error
        }
    }

    private func createJobTransaction(
        tenant: TenantID, id: JobID, environment: APNsEnvironment?, notifications: [HeraldCore.Notification],
        created: Int64, limits: JobLimits?, logger: Logger
    ) async throws -> JobCreation {
        let jobLockKey = Self.jobLockKey(schema: configuration.schema, tenant: tenant)
        // Off the connection's loop: the batch's items are encoded here, up to a million of them.
        return try await client.withTransaction(logger: logger, onConnectionLoop: false) { connection in
            // One create per tenant at a time (until commit), so two batches at once cannot both
            // slip under the tenant's limits; other tenants are not held up, nor are tenants of
            // the same name in another schema of the database (``jobLockKey(schema:tenant:)``).
            try await connection.query(
                "SELECT pg_advisory_xact_lock(\(Self.jobLockNamespace), hashtext(\(jobLockKey)))", logger: logger)
            if let existing = try await Self.fetchJob(connection, tenant: tenant, id: id, logger: logger) {
                return .existing(existing)
            }
            if let limits {
                try await Self.checkLimits(limits, connection, tenant: tenant, adding: notifications.count, logger: logger)
            }
            // A concurrent create of the same id waits here on the row lock, then sees it.
            let inserted = try await connection.query(
                """
                INSERT INTO job (tenant, id, state, environment, item_count, created_at_ms, updated_at_ms)
                VALUES (\(tenant.rawValue), \(id.rawValue), \(JobState.accepted.rawValue), \(environment?.rawValue),
                        \(notifications.count), \(created), \(created))
                ON CONFLICT (tenant, id) DO NOTHING
                RETURNING \(unescaped: Self.jobColumns)
                """, logger: logger
            ).collect()
            guard let row = inserted.first else {
                guard let existing = try await Self.fetchJob(connection, tenant: tenant, id: id, logger: logger) else {
                    throw StoreError.corrupt("job \(id) exists but cannot be read")
                }
                return .existing(existing)
            }
            try await Self.insertItems(connection, tenant: tenant, job: id, notifications: notifications, logger: logger)
            // Delivered at commit: idle instances start the job at once (polling is the fallback).
            try await connection.query(
                "SELECT pg_notify(\(StoreChannel.jobs.rawValue), \(tenant.rawValue + "/" + id.rawValue))",
                logger: logger)
            return .created(try Self.job(from: row))
        }
    }

    /// The first key of the per-tenant advisory lock of job creation ("HJob" in ASCII).
    static let jobLockNamespace: Int32 = 0x484a_6f62

    /// What the second key of that lock hashes: the tenant within its schema. Advisory locks are
    /// the database's, not a schema's: keyed on the tenant alone, deployments that share a database
    /// with schemas of their own (`storage.postgres.schema`) would hold up each other's job
    /// creation for a tenant of the same name (the test suite's stores, all with a tenant `acme`,
    /// among them). Schema names are `a-z 0-9 _`, so the slash is unambiguous.
    static func jobLockKey(schema: String?, tenant: TenantID) -> String {
        (schema ?? "") + "/" + tenant.rawValue
    }

    /// Refuses a job that would take the tenant past its limits (the SQLite store's rule and words).
    private static func checkLimits(
        _ limits: JobLimits, _ connection: PostgresConnection, tenant: TenantID, adding items: Int, logger: Logger
    ) async throws {
        let rows = try await connection.query(
            """
            SELECT count(*), coalesce(sum(item_count), 0)::bigint FROM job
            WHERE tenant = \(tenant.rawValue) AND state IN ('accepted', 'running')
            """, logger: logger
        ).collect()
        guard let row = rows.first else { throw StoreError.corrupt("counting the tenant's unfinished jobs returned no row") }
        let cells = row.makeRandomAccess()
        let jobs = try cells[0].decode(Int.self)
        let pending = try cells[1].decode(Int.self)
        if jobs >= limits.maxActiveJobs {
            throw StoreError.quotaExceeded(
                "the tenant has \(jobs) unfinished jobs; jobs.max_active_jobs_per_tenant allows \(limits.maxActiveJobs). "
                    + "Wait for one to finish")
        }
        let (total, overflow) = pending.addingReportingOverflow(items)
        if overflow || total > limits.maxPendingItems {
            throw StoreError.quotaExceeded(
                "the tenant's unfinished jobs hold \(pending) items and this batch \(items); "
                    + "jobs.max_pending_items_per_tenant allows \(limits.maxPendingItems)")
        }
    }

    public func job(tenant: TenantID, id: JobID) async throws -> Job? {
        let logger = self.logger
        return try await client.withConnection { connection in
            try await Self.fetchJob(connection, tenant: tenant, id: id, logger: logger)
        }
    }

    public func jobs(tenant: TenantID, states: Set<JobState>?, limit: Int, after: JobListPosition?) async throws -> [Job] {
        if let states, states.isEmpty { return [] }
        // Every state when nil; after `after` in the listing's order: older, or as old with a
        // greater id (PostgreSQL compares ids in the column's collation, as ORDER BY sorts them).
        let names = states.map { $0.map(\.rawValue).sorted() } ?? JobState.allCases.map(\.rawValue)
        let rows: [PostgresRow]
        if let after {
            rows = try await client.query(
                """
                SELECT \(unescaped: Self.jobColumns) FROM job WHERE tenant = \(tenant.rawValue) AND state = ANY(\(names))
                AND (created_at_ms < \(after.createdAtMillis) OR (created_at_ms = \(after.createdAtMillis) AND id > \(after.id.rawValue)))
                ORDER BY created_at_ms DESC, id LIMIT \(max(0, limit))
                """, logger: logger
            ).collect()
        } else {
            rows = try await client.query(
                """
                SELECT \(unescaped: Self.jobColumns) FROM job WHERE tenant = \(tenant.rawValue) AND state = ANY(\(names))
                ORDER BY created_at_ms DESC, id LIMIT \(max(0, limit))
                """, logger: logger
            ).collect()
        }
        return try rows.map(Self.job(from:))
    }

    public func unfinishedJobs(perTenant: Int) async throws -> [Job] {
        guard perTenant > 0 else { return [] }
        // `job_by_updated` (state first) finds the unfinished jobs without reading the rest.
        let rows = try await client.query(
            """
            SELECT \(unescaped: Self.jobColumns) FROM (
                SELECT *, ROW_NUMBER() OVER (PARTITION BY tenant ORDER BY created_at_ms, id) AS place
                FROM job WHERE state IN ('accepted', 'running')) AS unfinished
            WHERE place <= \(perTenant) ORDER BY created_at_ms, id
            """, logger: logger
        ).collect()
        return try rows.map(Self.job(from:))
    }

    @discardableResult
    public func updateJob(tenant: TenantID, id: JobID, state: JobState, at: Date) async throws -> Bool {
        try await !client.query(
            """
            UPDATE job SET state = \(state.rawValue), updated_at_ms = \(Self.millis(at))
            WHERE tenant = \(tenant.rawValue) AND id = \(id.rawValue) AND state IN ('accepted', 'running')
            RETURNING 1
            """, logger: logger
        ).collect().isEmpty
    }

    /// Leases claimable items in one statement: first the `retrying` items whose next attempt is
    /// due (earliest first, a range of `job_item_due`), then the lowest-index pending items for
    /// what is left of `limit`. `FOR UPDATE SKIP LOCKED` lets instances claim from the same job
    /// at once: each skips the rows another is leasing right now instead of waiting for them, and
    /// no row is leased twice.
    public func claimPendingItems(
        tenant: TenantID, job: JobID, limit: Int, claimant: String, now: Date, leaseUntil: Date
    ) async throws -> [JobItem] {
        try await claimPendingItems(
            tenant: tenant, job: job, limit: limit, claimant: claimant, now: now, leaseUntil: leaseUntil, fromIndex: 0)
    }

    /// Pending items are searched from the hint only (`StoreContractTests` checks it).
    public var claimsFromIndexStrictly: Bool { true }

    /// One call of ``claimFunction`` when the frontier is all the claim takes (a running batch's
    /// every claim). Otherwise one transaction, holding the job's claim lock (and its item lock):
    /// other claimants' claim ranges whose lease ran out are taken over (their open items get
    /// rows); then the picked items' indexes are
    /// selected (and locked) and updated through `idx = ANY($1)` with the list as a bound array
    /// — a primary-key lookup per item whatever the planner believes. Joined `FROM picked`, a
    /// job inserted moments ago (no statistics yet, every estimate 1 row) is planned as a nested
    /// loop over all the job's items for each picked one; with `ANY(ARRAY(SELECT …))` in one
    /// statement the array stays a filter over the job's primary-key range. What is left of
    /// `limit` is leased from the frontier as one claim range (v12.1-pg), without a row an item.
    ///
    /// With `fromIndex` the search of pending rows starts there in `job_item_pending`: every
    /// outcome on a row leaves a dead index entry of its `pending` version behind it until a
    /// vacuum, and a search from the job's first item would walk them all.
    public func claimPendingItems(
        tenant: TenantID, job: JobID, limit: Int, claimant: String, now: Date, leaseUntil: Date, fromIndex: Int
    ) async throws -> [JobItem] {
        guard limit > 0 else { return [] }
        let from = Int32(clamping: max(0, fromIndex))
        let nowMillis = Self.millis(now)
        let untilMillis = Self.millis(leaseUntil)
        let logger = self.logger
        // A running batch's claim is the frontier's alone: one call claims it, committed on its
        // own (``claimFunction``). Anything else (rows picked, own ranges, a takeover) is
        // claimed again in a transaction.
        let rows = try await client.execute(
            Prepared<ClaimText>(
                tenant.rawValue, job.rawValue, claimant, nowMillis, from, Int64(limit), untilMillis, true),
            logger: logger)
        guard let first = rows.first else { throw StoreError.corrupt("herald_claim answered no row") }
        guard let opening = try Self.claimOpening(first) else { return [] }
        if opening.rangeClaimed {
            let until = Self.date(untilMillis)
            // In descending index order: taken off the end, each moved, in ascending order.
            var notes = try Self.sliceItems(rows, from: Self.claimSliceColumn, job: job)
            var items: [JobItem] = []
            items.reserveCapacity(notes.count)
            while let (index, note) = notes.popLast() {
                items.append(
                    JobItem(
                        job: job, index: index, notification: note, state: .pending, result: nil, claimant: claimant,
                        leaseUntil: until))
            }
            return items
        }
        var items = try await client.withTransaction(logger: logger) { connection -> [JobItem] in
            // One claim of the job at a time; the item lock exclusive only when another
            // claimant's range is to be taken over (writers of outcomes go on meanwhile). A
            // finished or cancelled job's items are not claimed (a cancel stops every instance's
            // claims, whether or not it heard of the cancel).
            guard
                var open = try await Self.openClaim(
                    connection, tenant: tenant, job: job, claimant: claimant, now: nowMillis, from: from, limit: limit,
                    leaseUntil: untilMillis, logger: logger)
            else { return [] }
            if open.takeOver {
                try await Self.takeOverRanges(
                    connection, tenant: tenant, job: job, .expired(except: claimant, now: nowMillis), logger: logger)
                // The rows are locked by the SELECT until the transaction ends.
                open.picked = try await connection.prepared(
                    ClaimableItemsText.self, tenant.rawValue, job.rawValue, claimant, nowMillis, from, Int64(limit),
                    logger: logger
                ).map { try $0.decode(Int32.self) }
                if open.picked.count < limit {
                    open.ownRanges = try await Self.ownRanges(
                        connection, tenant: tenant, job: job, claimant: claimant, from: from, leaseUntil: untilMillis,
                        logger: logger)
                }
            }
            var items: [JobItem] = []
            if !open.picked.isEmpty {
                items = try await connection.query(
                    """
                    UPDATE job_item AS item SET claimant = \(claimant), lease_until_ms = \(untilMillis)
                    WHERE item.tenant = \(tenant.rawValue) AND item.job_id = \(job.rawValue) AND item.idx = ANY(\(open.picked))
                    RETURNING \(unescaped: Self.jobItemColumns(prefix: "item."))
                    """, logger: logger
                ).collect().map(Self.jobItem(from:))
            }
            try await Self.reclaimOwnRanges(
                connection, tenant: tenant, job: job, claimant: claimant, ranges: open.ownRanges, from: Int(from),
                limit: limit - items.count, leaseUntil: untilMillis, into: &items, logger: logger)
            if items.count < limit {
                try await Self.claimRange(
                    connection, tenant: tenant, job: job, frontier: open.frontier, itemCount: open.itemCount,
                    count: limit - items.count, from: Int(from), claimant: claimant, leaseUntil: untilMillis,
                    into: &items, logger: logger)
            }
            return items
        }
        // Due retries first, earliest first; then pending items in index order. Sorted only when
        // they are not in that order already (most claims): a sort copies every item, and a copy
        // retains every string and array an item holds.
        func precedes(_ a: JobItem, _ b: JobItem) -> Bool {
            switch (a.state == .retrying, b.state == .retrying) {
            case (true, false): return true
            case (false, true): return false
            case (true, true):
                let (left, right) = (a.nextAttemptAt ?? .distantPast, b.nextAttemptAt ?? .distantPast)
                return left != right ? left < right : a.index < b.index
            case (false, false): return a.index < b.index
            }
        }
        if items.indices.dropFirst().contains(where: { precedes(items[$0], items[$0 - 1]) }) {
            items.sort(by: precedes)
        }
        return items
    }

    /// The marked items get rows first where they have none (leased as their claim range is).
    public func markOnWire(tenant: TenantID, job: JobID, indexes: [Int], claimant: String, at: Date) async throws
        -> Set<Int>
    {
        guard !indexes.isEmpty else { return [] }
        let list = Set(indexes).map { Int32(clamping: $0) }
        let logger = self.logger
        return try await client.withTransaction(logger: logger) { connection in
            guard
                try await Self.lockJob(
                    connection, tenant: tenant, job: job, runnable: true, exclusive: false, logger: logger) != nil
            else { return [] }
            try await Self.ensureRows(connection, tenant: tenant, job: job, indexes: Array(Set(indexes)), logger: logger)
            let rows = try await connection.query(
                """
                UPDATE job_item SET wire_at_ms = \(Self.millis(at))
                WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue) AND idx = ANY(\(list))
                  AND state IN ('pending', 'retrying') AND claimant = \(claimant)
                RETURNING idx
                """, logger: logger
            ).collect()
            return try Self.indexes(rows)
        }
    }

    /// Items leased to `claimant`: its rows without an outcome, and the items of its claim
    /// ranges without a row (a plain success among them is still in its range, as a claim's
    /// items are on SQLite). One read of the job's state, the claimant's ranges over the
    /// indexes and the indexes' rows; the answer is put together here. Each part is bounded by
    /// the primary key's last column (the ranges from the last one starting at or before the
    /// lowest index, whoever's it is: ranges do not overlap; read in its order, at most one a
    /// named index), so that its cost does not grow with the job's ranges or rows.
    public func leasedItems(tenant: TenantID, job: JobID, indexes: [Int], claimant: String) async throws -> Set<Int> {
        guard let low = indexes.min(), let high = indexes.max() else { return [] }
        var runnable = false
        var ranges: [Range<Int>] = []
        var rows: [Int: Bool] = [:]
        let statement = Prepared<LeasedItemsText>(
            tenant.rawValue, job.rawValue, claimant, Int32(clamping: low), Int32(clamping: high),
            PostgresArray(Set(indexes).map { Int32(clamping: $0) }))
        for row in try await client.execute(statement, logger: logger) {
            let (part, first, end, mine) = try row.decode((Int32, Int32, Int32, Bool).self)
            switch part {
            case 0: runnable = true
            case 1: if first < end { ranges.append(Int(first)..<Int(end)) }
            default: rows[Int(first)] = mine
            }
        }
        guard runnable else { return [] }
        return Set(
            indexes.filter { index in
                if let mine = rows[index] { return mine }
                return ranges.contains { $0.contains(index) }
            })
    }

    /// The claim's pick of its job's rows (``claimPendingItems(tenant:job:limit:claimant:now:leaseUntil:fromIndex:)``):
    /// due retries first, earliest first, then pending rows from `from`, each lockable now.
    /// The rows are locked until the transaction ends. Prepared: planned once a connection.
    enum ClaimableItemsText: PreparedText {
        static let name = "herald_claimable_items"
        static let sql = claimableItems(tenant: "$1", job: "$2", claimant: "$3", now: "$4", from: "$5", limit: "$6")
        static let types: [PostgresDataType] = [.text, .text, .text, .int8, .int4, .int8]
    }

    /// The query of ``ClaimableItemsText`` over the given expressions, which
    /// ``claimFunction`` runs too.
    static func claimableItems(tenant: String, job: String, claimant: String, now: String, from: String, limit: String)
        -> String
    {
        """
        WITH due AS (
            SELECT idx FROM job_item
            WHERE tenant = \(tenant) AND job_id = \(job) AND state = 'retrying' AND next_attempt_ms <= \(now)
              AND (claimant = \(claimant) OR claimant IS NULL OR lease_until_ms IS NULL OR lease_until_ms <= \(now))
            ORDER BY next_attempt_ms, idx
            LIMIT \(limit)
            FOR UPDATE SKIP LOCKED
        ), fresh AS (
            SELECT idx FROM job_item
            WHERE tenant = \(tenant) AND job_id = \(job) AND state = 'pending' AND idx >= \(from)
              AND (claimant = \(claimant) OR claimant IS NULL OR lease_until_ms IS NULL OR lease_until_ms <= \(now))
            ORDER BY idx
            LIMIT greatest(0, \(limit) - (SELECT count(*) FROM due))
            FOR UPDATE SKIP LOCKED
        )
        SELECT idx FROM due UNION ALL SELECT idx FROM fresh
        """
    }

    /// ``leasedItems(tenant:job:indexes:claimant:)``'s read, prepared: it runs for every
    /// commit group, and planning its three parts cost the server more than running them.
    enum LeasedItemsText: PreparedText {
        static let name = "herald_leased_items"
        static let sql = """
            SELECT 0, 0, 0, true FROM job WHERE tenant = $1 AND id = $2 AND state IN ('accepted', 'running')
            UNION ALL
            (SELECT 1, first_idx, end_idx, true FROM job_claim_range
             WHERE tenant = $1 AND job_id = $2 AND claimant = $3
               AND first_idx BETWEEN coalesce(
                   (SELECT first_idx FROM job_claim_range WHERE tenant = $1 AND job_id = $2
                      AND first_idx <= $4 ORDER BY first_idx DESC LIMIT 1), $4)
                   AND $5
               AND end_idx > $4
             ORDER BY first_idx LIMIT $5::bigint - $4::bigint + 1)
            UNION ALL
            SELECT 2, idx, 0, state IN ('pending', 'retrying') AND claimant IS NOT DISTINCT FROM $3 FROM job_item
            WHERE tenant = $1 AND job_id = $2 AND idx BETWEEN $4 AND $5 AND idx = ANY($6)
            """
        static let types: [PostgresDataType] = [.text, .text, .text, .int4, .int4, .int4Array]
    }

    /// The item indexes of rows whose first column is one.
    private static func indexes(_ rows: [PostgresRow]) throws -> Set<Int> {
        Set(try rows.map { try $0.makeRandomAccess()[0].decode(Int.self) })
    }

    public func nextAttempt(tenant: TenantID, job: JobID) async throws -> Date? {
        try await client.query(
            """
            SELECT min(next_attempt_ms) FROM job_item
            WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue) AND state = 'retrying'
            """, logger: logger
        ).collect().first.flatMap { row in try row.makeRandomAccess()[0].decode(Int64?.self) }.map(Self.date)
    }

    public func deferItem(tenant: TenantID, job: JobID, index: Int, retry: JobItemRetry) async throws -> Bool {
        let logger = self.logger
        return try await client.withTransaction(logger: logger) { connection in
            try await !Self.applyChanges(
                connection, tenant: tenant, job: job, outcomes: [], retries: [index: retry], logger: logger
            ).isEmpty
        }
    }

    @discardableResult
    public func releaseLeases(tenant: TenantID, job: JobID, claimantBase: String, keeping: String) async throws -> Int {
        let logger = self.logger
        return try await client.withTransaction(logger: logger) { connection in
            guard try await Self.lockJob(connection, tenant: tenant, job: job, runnable: false, logger: logger) != nil
            else { return 0 }
            let held = try await Self.takeOverRanges(
                connection, tenant: tenant, job: job, .instances(base: claimantBase, keeping: keeping), logger: logger)
            return held
                + (try await connection.query(
                    """
                    UPDATE job_item SET claimant = NULL, lease_until_ms = NULL
                    WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue) AND state IN ('pending', 'retrying')
                      AND claimant IS NOT NULL AND claimant <> \(keeping)
                      AND (claimant = \(claimantBase) OR left(claimant, \(claimantBase.unicodeScalars.count + 1)::int) = \(claimantBase + "/"))
                    RETURNING 1
                    """, logger: logger
                ).collect().count)
        }
    }

    /// Items in index order, each from its row, its plain success record or its chunk.
    public func items(tenant: TenantID, job: JobID, fromIndex: Int, limit: Int) async throws -> [JobItem] {
        try await Self.readItems(client: client, tenant: tenant, job: job, fromIndex: fromIndex, limit: limit, logger: logger)
    }

    static func readItems(
        client: BoundedPostgresClient, tenant: TenantID, job: JobID, fromIndex: Int, limit: Int, logger: Logger
    ) async throws -> [JobItem] {
        try await client.withConnection { connection in
            let counts = try await connection.query(
                "SELECT item_count FROM job WHERE tenant = \(tenant.rawValue) AND id = \(job.rawValue)", logger: logger
            ).collect()
            guard let itemCount = try counts.first?.makeRandomAccess()[0].decode(Int.self) else { return [] }
            let start = min(max(0, fromIndex), itemCount)
            let end = start + min(max(0, limit), itemCount - start)
            guard start < end else { return [] }
            let (a, b) = (Int32(clamping: start), Int32(clamping: end))
            var rows: [Int: JobItem] = [:]
            for row in try await connection.query(
                """
                SELECT \(unescaped: jobItemColumns(prefix: "")) FROM job_item
                WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue) AND idx >= \(a) AND idx < \(b)
                """, logger: logger
            ).collect() {
                let item = try jobItem(from: row)
                rows[item.index] = item
            }
            let notes = Dictionary(
                try await chunkItemsWithoutRows(connection, tenant: tenant, job: job, low: a, end: b, logger: logger),
                uniquingKeysWith: { first, _ in first })
            let sent = try await sentRecords(connection, tenant: tenant, job: job, low: start, high: end, logger: logger)
            var ranges: [(first: Int, end: Int, claimant: String, until: Int64)] = []
            for row in try await connection.query(
                """
                SELECT first_idx, end_idx, claimant, lease_until_ms FROM job_claim_range
                WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue) AND first_idx < \(b) AND end_idx > \(a)
                  AND first_idx >= coalesce(
                      (SELECT max(first_idx) FROM job_claim_range WHERE tenant = \(tenant.rawValue)
                         AND job_id = \(job.rawValue) AND first_idx <= \(a)), \(a))
                """, logger: logger
            ).collect() {
                let cells = row.makeRandomAccess()
                ranges.append(
                    (try cells[0].decode(Int.self), try cells[1].decode(Int.self), try cells[2].decode(String.self),
                     try cells[3].decode(Int64.self)))
            }
            return try (start..<end).map { index in
                if let row = rows[index] { return row }
                guard let notification = notes[index] else { throw StoreError.corrupt("job \(job) lacks item \(index)") }
                if let record = sent[index] {
                    let result = JobItemResult(
                        state: .sent, status: 200, reason: nil, message: nil,
                        apnsID: record.apnsID, apnsTimestamp: nil,
                        finishedAt: date(record.finished), attempts: record.attempts)
                    return JobItem(
                        job: job, index: index, notification: notification, state: .sent, result: result,
                        attempts: record.attempts)
                }
                let lease = ranges.first { $0.first <= index && index < $0.end }
                return JobItem(
                    job: job, index: index, notification: notification, state: .pending, result: nil,
                    claimant: lease?.claimant, leaseUntil: lease.map { date($0.until) })
            }
        }
    }

    public func progress(tenant: TenantID, job: JobID) async throws -> JobProgress? {
        guard let counts = try await outcomeCounts(tenant: tenant, job: job) else { return nil }
        var progress = JobProgress(pending: 0, sent: 0, failed: 0)
        for count in counts { try progress.add(state: count.state.rawValue, count: count.count) }
        return progress
    }

    // MARK: Job reports

    /// The counts kept in `job_outcome` (migration v9) with the job's retrying and pending
    /// items (``JobOutcomeCount/assemble(outcomes:retrying:itemCount:job:)``): one statement of
    /// a few row reads, whatever the job's size.
    public func outcomes(tenant: TenantID, job: JobID) async throws -> [JobOutcomeCount] {
        try await outcomeCounts(tenant: tenant, job: job) ?? []
    }

    /// nil when the tenant has no such job.
    private func outcomeCounts(tenant: TenantID, job: JobID) async throws -> [JobOutcomeCount]? {
        // The job's row first (its item count, state '' so it sorts apart), then the retrying
        // items (a range of the partial index `job_item_due`), then the outcome counts.
        let rows = try await client.query(
            """
            SELECT '', NULL::int, NULL::text, item_count::bigint FROM job WHERE tenant = \(tenant.rawValue) AND id = \(job.rawValue)
            UNION ALL
            SELECT 'retrying', NULL::int, NULL::text, count(*) FROM job_item
            WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue) AND state = 'retrying'
            UNION ALL
            SELECT state, status, reason, n FROM job_outcome
            WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue) AND n > 0
            """, logger: logger
        ).collect()
        var itemCount: Int? = nil
        var retrying = 0
        var outcomes: [JobOutcomeCount] = []
        for row in rows {
            let cells = row.makeRandomAccess()
            let raw = try cells[0].decode(String.self)
            let count = try cells[3].decode(Int.self)
            switch raw {
            case "": itemCount = count
            case "retrying": retrying = count
            default:
                guard let state = JobItemState(rawValue: raw) else {
                    throw StoreError.corrupt("job outcome count with an unknown state")
                }
                outcomes.append(
                    JobOutcomeCount(
                        state: state, status: try cells[1].decode(Int?.self), reason: try cells[2].decode(String?.self),
                        count: count))
            }
        }
        guard let itemCount else { return nil }
        return try JobOutcomeCount.assemble(outcomes: outcomes, retrying: retrying, itemCount: itemCount, job: job)
    }

    public func failedItems(tenant: TenantID, job: JobID, afterIndex: Int, limit: Int) async throws -> [JobItem] {
        // The payload is not read: the report does not show it.
        try await client.query(
            """
            SELECT \(unescaped: Self.jobItemColumns(prefix: "", payload: "''::bytea")) FROM job_item
            WHERE tenant = \(tenant.rawValue) AND job_id = \(job.rawValue) AND state = 'failed' AND idx > \(afterIndex)
            ORDER BY idx LIMIT \(max(0, limit))
            """, logger: logger
        ).collect().map(Self.jobItem(from:))
    }

    // MARK: Rows

    /// Milliseconds since 1970, clamped to years 0001 to 9999 (a NaN is 0): never traps.
    static func millis(_ date: Date) -> Int64 {
        let value = (date.timeIntervalSince1970 * 1000).rounded()
        guard value.isFinite else { return 0 }
        return Int64(min(max(value, -62_135_596_800_000), 253_402_300_799_999))
    }

    /// An attempt count as the `INTEGER` column holds it (clamped, never traps).
    static func count(_ value: Int) -> Int32 { Int32(clamping: value) }

    static func date(_ millis: Int64) -> Date {
        Date(timeIntervalSince1970: Double(millis) / 1000)
    }

    static let jobColumns = "tenant, id, state, environment, item_count, created_at_ms, updated_at_ms"

    private static func fetchJob(_ connection: PostgresConnection, tenant: TenantID, id: JobID, logger: Logger)
        async throws -> Job?
    {
        try await connection.query(
            """
            SELECT \(unescaped: jobColumns) FROM job WHERE tenant = \(tenant.rawValue) AND id = \(id.rawValue)
            """, logger: logger
        ).collect().first.map(job(from:))
    }

    static func job(from row: PostgresRow) throws -> Job {
        let cells = row.makeRandomAccess()
        guard let tenant = try? TenantID(try cells[0].decode(String.self)),
            let state = JobState(rawValue: try cells[2].decode(String.self))
        else {
            throw StoreError.corrupt("job row with an invalid tenant or state")
        }
        let rawID = try cells[1].decode(String.self)
        guard let id = try? JobID(rawID) else { throw StoreError.corrupt("job row with an invalid id") }
        return Job(
            id: id, tenant: tenant, state: state,
            environment: try cells[3].decode(String?.self).flatMap(APNsEnvironment.init(rawValue:)),
            itemCount: try cells[4].decode(Int.self), createdAt: date(try cells[5].decode(Int64.self)),
            updatedAt: date(try cells[6].decode(Int64.self)))
    }

    /// The `job_item` columns in the order ``jobItem(from:)`` reads them.
    /// The payload is the item's `job_payload` row's (v8), or its own for items of older jobs.
    static func jobItemColumns(prefix p: String, payload: String? = nil) -> String {
        let table = p.isEmpty ? "job_item." : p
        let shared = """
            coalesce((SELECT shared.payload FROM job_payload shared WHERE shared.tenant = \(table)tenant \
            AND shared.job_id = \(table)job_id AND shared.id = \(table)payload_ref), \(table)payload)
            """
        return """
        \(p)job_id, \(p)idx, \(p)device_token, \(p)topic, \(p)push_type, \(p)priority, \(p)expiration, \
        \(p)collapse_id, \(p)apns_id, \(payload ?? shared), \(p)state, \(p)status, \(p)reason, \(p)message, \
        \(p)result_apns_id, \(p)apns_timestamp_ms, \(p)finished_at_ms, \(p)claimant, \(p)lease_until_ms, \
        \(p)attempts, \(p)first_attempt_ms, \(p)next_attempt_ms, \(p)last_error, \(p)wire_at_ms, \(p)result_unique_id
        """
    }

    static func jobItem(from row: PostgresRow) throws -> JobItem {
        let cells = row.makeRandomAccess()
        guard let state = JobItemState(rawValue: try cells[10].decode(String.self)),
            let pushType = PushType(rawValue: try cells[4].decode(String.self))
        else {
            throw StoreError.corrupt("job item row with an invalid state or push type")
        }
        let notification: HeraldCore.Notification
        do {
            let payload = try cells[9].decode(ByteBuffer.self)
            let expiration = try cells[6].decode(Int64?.self)
            notification = HeraldCore.Notification(
                deviceToken: try DeviceToken(hex: try cells[2].decode(String.self)),
                topic: try cells[3].decode(String?.self), pushType: pushType,
                priority: try cells[5].decode(Int?.self).flatMap(Priority.init(rawValue:)),
                expiration: expiration.map { $0 == 0 ? .immediately : .at(UInt32(clamping: $0)) },
                collapseID: try cells[7].decode(String?.self), id: try NotificationID(try cells[8].decode(String.self)),
                payload: Array(buffer: payload))
        } catch {
            throw StoreError.corrupt("job item row with an invalid device token or apns-id")
        }
        let attempts = try cells[19].decode(Int.self)
        var result: JobItemResult? = nil
        if state.isFinal {
            result = JobItemResult(
                state: state, status: try cells[11].decode(Int?.self), reason: try cells[12].decode(String?.self),
                message: try cells[13].decode(String?.self),
                apnsID: try cells[14].decode(String?.self).flatMap { try? NotificationID($0) },
                apnsTimestamp: try cells[15].decode(Int64?.self).map(date),
                finishedAt: date(try cells[16].decode(Int64?.self) ?? 0), attempts: attempts,
                uniqueID: try cells[24].decode(String?.self).flatMap(APNsUniqueID.init))
        }
        let rawJob = try cells[0].decode(String.self)
        guard let job = try? JobID(rawJob) else { throw StoreError.corrupt("job item row with an invalid job id") }
        return JobItem(
            job: job, index: try cells[1].decode(Int.self), notification: notification, state: state,
            result: result, claimant: try cells[17].decode(String?.self),
            leaseUntil: try cells[18].decode(Int64?.self).map(date), attempts: attempts,
            firstAttemptAt: try cells[20].decode(Int64?.self).map(date),
            nextAttemptAt: try cells[21].decode(Int64?.self).map(date), lastError: try cells[22].decode(String?.self),
            onWireAt: try cells[23].decode(Int64?.self).map(date))
    }

    static let invalidTokenColumns =
        "environment, token, topic, reason, apns_timestamp_ms, recorded_at_ms, registered_at_ms"

    static func invalidTokenRecord(_ row: PostgresRow) throws -> InvalidTokenRecord {
        let cells = row.makeRandomAccess()
        guard let environment = APNsEnvironment(rawValue: try cells[0].decode(String.self)),
            let token = try? DeviceToken(hex: try cells[1].decode(String.self))
        else {
            throw StoreError.corrupt("invalid-token row with an invalid environment or token")
        }
        return InvalidTokenRecord(
            token: token, topic: try cells[2].decode(String.self), environment: environment,
            reason: APNsReason(wireValue: try cells[3].decode(String.self)),
            apnsTimestamp: try cells[4].decode(Int64?.self).map(date), recordedAt: date(try cells[5].decode(Int64.self)),
            registeredAt: try cells[6].decode(Int64?.self).map(date))
    }
}
