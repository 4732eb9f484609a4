import EventLoopExecutors
import Foundation
import HeraldCore
import HeraldStore
import HeraldTestSupport
import PostgresNIO
import Testing

@testable import HeraldPostgres

/// PostgreSQL specifics: the connection settings, and migrations when several instances start at
/// once. The contract itself is ``StoreContractTests``.
@Suite("PostgreSQL store")
struct PostgresStoreTests {
    @Test("a postgres:// URL gives host, port, user, password and database; anything else is refused")
    func url() throws {
        let configuration = try PostgresPushStore.Configuration(
            url: "postgres://herald:s3cret@127.0.0.1:54321/heraldb", schema: "tenant_a", poolSize: 3)
        #expect(configuration.host == "127.0.0.1" && configuration.port == 54321)
        #expect(configuration.username == "herald" && configuration.password == "s3cret")
        #expect(configuration.database == "heraldb" && configuration.schema == "tenant_a" && configuration.poolSize == 3)
        #expect(configuration.displayName == "127.0.0.1:54321/heraldb", "no user or password in what is logged")
        #expect(try PostgresPushStore.Configuration(url: "postgresql://u@db/herald").port == 5432)
        for bad in ["", "http://u@h/db", "postgres://h/db", "postgres://u@h", "postgres://u@h/", "postgres://u@h/a/b"] {
            #expect(throws: StoreError.self, "\(bad)") { try PostgresPushStore.Configuration(url: bad) }
        }
    }

    @Test("schema names are plain identifiers")
    func schemas() {
        for good in ["herald", "h_2", "_x", String(repeating: "a", count: 63)] {
            #expect(PostgresPushStore.Configuration.isValidSchema(good), "\(good)")
        }
        for bad in ["", "2x", "Herald", "a-b", "a\"b", "a;drop", String(repeating: "a", count: 64)] {
            #expect(!PostgresPushStore.Configuration.isValidSchema(bad), "\(bad)")
        }
    }

    @Test("instances opening one database at once migrate it once, to the same versions")
    func concurrentMigrations() async throws {
        let configuration = try StoreBackend.postgresConfiguration(schema: StoreBackend.freshSchema(), poolSize: 2)
        let stores = try await withThrowingTaskGroup(of: PostgresPushStore.self) { group in
            for _ in 0..<3 {
                group.addTask { try await PostgresPushStore.open(configuration, logger: StoreBackend.logger) }
            }
            var stores: [PostgresPushStore] = []
            for try await store in group { stores.append(store) }
            return stores
        }
        for store in stores {
            #expect(try await store.appliedMigrations() == PostgresPushStore.migrations.map(\.name))
        }
        // The schema versions share their names with the SQLite store's (v3, the SQLite store's
        // shared payloads and outbox, has no PostgreSQL counterpart: v7 and v8 brought them),
        // except each store's own: `v<N>.<M>-pg-…` after the version they follow here, and
        // `v<N>-sqlite-…` there (v10, SQLite's batch item shape).
        #expect(
            PostgresPushStore.migrations.map(\.name).filter { !$0.contains("-pg-") }
                == StoreTests.allMigrations.filter { !$0.hasPrefix("v3") && !$0.contains("-sqlite-") })
        #expect(
            PostgresPushStore.migrations.map(\.name).filter { $0.contains("-pg-") } == [
                "v9.1-pg-job-chunks", "v12.1-pg-claim-ranges", "v15.1-pg-record-sent",
                "v15.2-pg-record-sent-in-three-statements", "v15.3-pg-ids-as-bytes", "v15.4-pg-claim-in-one-call",
            ])
        try await stores[0].dropSchemaForTests()
        for store in stores { await store.close() }
    }

    @Test("a migration is one statement: all of it is applied and recorded, or none of it; a statement holding its quote is refused")
    func migrationBlocks() async throws {
        for migration in PostgresPushStore.migrations { _ = try migration.block() }
        let store = try await PostgresPushStore.open(
            try StoreBackend.postgresConfiguration(schema: StoreBackend.freshSchema(), poolSize: 1), logger: StoreBackend.logger)
        func count(_ sql: String) async throws -> Int {
            let rows = try await store.client.query(PostgresQuery(unsafeSQL: sql), logger: StoreBackend.logger).collect()
            return try #require(try rows.first?.decode(Int.self))
        }
        let applied = try await count("SELECT count(*)::int FROM herald_migration")
        // A name with a quote in it is recorded as it is; a function body's own `$$` is kept.
        let good = PostgresPushStore.Migration(
            name: "test: it's applied",
            statements: [
                "CREATE TABLE migration_probe (n INTEGER NOT NULL)",
                "CREATE FUNCTION migration_probe_one() RETURNS INTEGER LANGUAGE sql AS $$ SELECT 1 $$",
                "INSERT INTO migration_probe (n) SELECT migration_probe_one()",
            ])
        try await store.client.query(try good.block(), logger: StoreBackend.logger)
        #expect(try await count("SELECT n::int FROM migration_probe") == 1)
        #expect(try await count("SELECT count(*)::int FROM herald_migration WHERE name = 'test: it''s applied'") == 1)
        // The second statement fails: the first one's table is not left behind, nor the record.
        let bad = PostgresPushStore.Migration(
            name: "test: half", statements: ["CREATE TABLE migration_half (n INTEGER)", "INSERT INTO no_such_table VALUES (1)"])
        await #expect(throws: (any Error).self) { try await store.client.query(try bad.block(), logger: StoreBackend.logger) }
        #expect(try await count("SELECT count(*)::int FROM pg_tables WHERE tablename = 'migration_half'") == 0)
        #expect(try await count("SELECT count(*)::int FROM herald_migration") == applied + 1)
        let quoted = PostgresPushStore.Migration(
            name: "test: quoted", statements: ["SELECT \(PostgresPushStore.Migration.statementQuote)x\(PostgresPushStore.Migration.statementQuote)"])
        #expect(throws: StoreError.self) { try quoted.block() }
        try await store.dropSchemaForTests()
        await store.close()
    }

    /// The pool's connections are opened at start, kept, and each gets a `SELECT 1` every
    /// keep-alive interval (``PoolKeepAlive``; postgres-nio's own keep-alive is off): here every
    /// 200 ms, seen from another store's connection in `pg_stat_activity`.
    @Test("every connection of the pool is opened at start and touched by each keep-alive round")
    func keepAlive() async throws {
        var configuration = try StoreBackend.postgresConfiguration(schema: StoreBackend.freshSchema(), poolSize: 3)
        configuration.keepAlive.interval = .milliseconds(200)
        let store = try await PostgresPushStore.open(configuration, logger: StoreBackend.logger)
        let observer = try await PostgresPushStore.open(
            try StoreBackend.postgresConfiguration(schema: StoreBackend.freshSchema(), poolSize: 1), logger: StoreBackend.logger)
        #expect(configuration.applicationName == "herald/\(configuration.schema ?? "")")
        // A connection's last statement shows in `query`: each of the three has run the
        // keep-alive's since the migrations and the observer's first look.
        var (connections, touched) = (0, 0)
        let patience = ContinuousClock.now.advanced(by: .seconds(20))
        while ContinuousClock.now < patience {
            let rows = try await observer.client.query(
                """
                SELECT count(*)::int, (count(*) FILTER (WHERE query = 'SELECT 1'))::int FROM pg_stat_activity
                WHERE application_name = \(configuration.applicationName)
                """, logger: StoreBackend.logger
            ).collect()
            (connections, touched) = try #require(try rows.first?.decode((Int, Int).self))
            if connections == 3, touched == 3 { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(connections == 3, "the pool's connections: \(connections)")
        #expect(touched == 3, "connections whose last statement was the keep-alive's: \(touched)")
        // The store answers as before, and closes with its keep-alive.
        #expect(try await store.jobs(tenant: TenantID("acme"), states: nil, limit: 1).isEmpty)
        try await store.dropSchemaForTests()
        await store.close()
        try await observer.dropSchemaForTests()
        await observer.close()
    }

    @Test("the pool's connections are shared out over the event loops, as evenly as they go")
    func poolShares() {
        #expect(BoundedPostgresClient.shares(of: 10, over: 2) == [5, 5])
        #expect(BoundedPostgresClient.shares(of: 3, over: 2) == [2, 1])
        #expect(BoundedPostgresClient.shares(of: 5, over: 4) == [2, 1, 1, 1])
        #expect(BoundedPostgresClient.shares(of: 1, over: 4) == [1])
        #expect(BoundedPostgresClient.shares(of: 7, over: 1) == [7])
    }

    /// A call made on an event loop leases a connection of that loop's while one is free, and
    /// runs there; once that loop's connections are all held, it goes to another loop's pool.
    @Test("a call made on an event loop is served by a connection of that loop, or another's when none is free")
    func callsOnTheirLoop() async throws {
        let loops = Array(PostgresClient.defaultEventLoopGroup.makeIterator())
        let store = try await PostgresPushStore.open(
            try StoreBackend.postgresConfiguration(schema: StoreBackend.freshSchema(), poolSize: loops.count), logger: StoreBackend.logger)
        let pools = store.client.pools
        #expect(pools.count == loops.count && pools.allSatisfy { $0.connections == 1 })
        #expect(Set(pools.map { ObjectIdentifier($0.loop) }).count == pools.count)
        for pool in pools {
            let client = store.client
            let (chosen, served) = try await Task(executorPreference: EventLoopTaskExecutor(pool.loop)) {
                let chosen = client.pool()
                let served = try await client.withConnection { connection in
                    _ = try await connection.query("SELECT 1", logger: StoreBackend.logger).collect()
                    return connection.eventLoop === pool.loop && pool.loop.inEventLoop
                }
                return (chosen, served)
            }.value
            #expect(chosen === pool)
            #expect(served, "the call was served on its caller's loop")
        }
        if pools.count > 1 {
            // The first loop's one connection held: a call made on that loop goes elsewhere.
            let held = pools[0]
            let client = store.client
            let release = AsyncStream<Void>.makeStream()
            let holding = AsyncStream<Void>.makeStream()
            let holder = Task {
                try await client.withConnection(in: held) { _ in
                    holding.continuation.yield()
                    for await _ in release.stream { break }
                }
            }
            for await _ in holding.stream { break }
            let chosen = await Task(executorPreference: EventLoopTaskExecutor(held.loop)) { client.pool() }.value
            #expect(chosen !== held)
            release.continuation.yield()
            try await holder.value
        }
        try await store.dropSchemaForTests()
        await store.close()
    }

    @Test("a server that refuses the login is a clear error without the password")
    func refused() async throws {
        var configuration = try StoreBackend.postgresConfiguration(schema: StoreBackend.freshSchema(), poolSize: 1)
        configuration.password = "not-the-password-\(UUID().uuidString)"
        let wrong = configuration.password ?? ""
        do {
            let store = try await PostgresPushStore.open(configuration, logger: StoreBackend.logger)
            await store.close()
            Issue.record("a wrong password opened the store")
        } catch let error as StoreError {
            #expect(error.message.contains("cannot open the PostgreSQL store at \(configuration.displayName)"))
            #expect(!error.message.contains(wrong))
        }
    }

    @Test("a group of plain successes with their apns-ids is kept as uuid[], one with an id missing as text; both read back")
    func sentRecordForms() async throws {
        let store = try await PostgresPushStore.open(
            try StoreBackend.postgresConfiguration(schema: StoreBackend.freshSchema(), poolSize: 2), logger: StoreBackend.logger)
        let (acme, job) = (try TenantID("acme"), try JobID("forms"))
        let t0 = Date(timeIntervalSince1970: 1_700_000_000)
        _ = try await store.createJob(
            tenant: acme, id: job, environment: .development, notifications: (0..<5).map { _ in Fixtures.note() }, createdAt: t0)
        let items = try await store.claimPendingItems(
            tenant: acme, job: job, limit: 5, claimant: "runner", now: t0, leaseUntil: t0.addingTimeInterval(60))
        #expect(items.count == 5)
        func sent(_ index: Int, id: NotificationID?) -> JobItemChange {
            JobItemChange(
                index: index,
                change: .outcome(
                    JobItemResult(
                        state: .sent, status: 200, reason: nil, apnsID: id, finishedAt: t0.addingTimeInterval(Double(index)),
                        attempts: index + 1)))
        }
        // Every id there (given out of order): uuid[]. One without: text. A plain success beside a
        // failure (the general path): text.
        #expect(try await store.recordChanges(tenant: acme, job: job, [sent(1, id: items[1].notification.id), sent(0, id: items[0].notification.id)]) == 2)
        #expect(try await store.recordChanges(tenant: acme, job: job, [sent(2, id: nil)]) == 1)
        let failed = JobItemResult(
            state: .failed, status: 400, reason: "BadDeviceToken", apnsID: items[4].notification.id, finishedAt: t0, attempts: 1)
        #expect(
            try await store.recordChanges(
                tenant: acme, job: job, [sent(3, id: items[3].notification.id), JobItemChange(index: 4, change: .outcome(failed))]) == 2)
        let forms = try await store.client.query(
            "SELECT count(apns_uuids)::int, count(apns_ids)::int FROM job_sent", logger: StoreBackend.logger
        ).collect()
        let (uuidRecords, textRecords) = try #require(try forms.first?.decode((Int, Int).self))
        #expect(uuidRecords == 1 && textRecords == 2)

        let read = try await store.items(tenant: acme, job: job, fromIndex: 0, limit: 10)
        #expect(read.map(\.result?.apnsID) == [items[0].notification.id, items[1].notification.id, nil, items[3].notification.id, items[4].notification.id])
        #expect(read.prefix(4).map(\.result?.attempts) == [1, 2, 3, 4])
        #expect(read.prefix(4).map(\.result?.finishedAt) == (0..<4).map { t0.addingTimeInterval(Double($0)) })
        #expect(read.allSatisfy { $0.result != nil && $0.state != .pending })
        // An item of a record is not recorded twice, whichever form holds it.
        #expect(try await store.recordChanges(tenant: acme, job: job, [sent(0, id: items[0].notification.id), sent(2, id: nil)]) == 0)
        #expect(try await store.progress(tenant: acme, job: job) == JobProgress(pending: 0, sent: 4, failed: 1))
        try await store.dropSchemaForTests()
        await store.close()
    }

    @Test("a job's chunks keep its tokens as bytea[] and apns-ids as uuid[]; chunks of text (jobs posted before) are claimed, listed and given rows alike")
    func chunkIDForms() async throws {
        let store = try await PostgresPushStore.open(
            try StoreBackend.postgresConfiguration(schema: StoreBackend.freshSchema(), poolSize: 2), logger: StoreBackend.logger)
        let acme = try TenantID("acme")
        let t0 = Date(timeIntervalSince1970: 1_700_000_000)
        var given = Fixtures.note()
        given.id = Fixtures.apnsID()
        let odd = Fixtures.note(token: try DeviceToken(hex: "00FF10"))
        let notes = [given, odd] + (2..<4).map { _ in Fixtures.note() }
        for (name, asText) in [("uuids", false), ("texts", true)] {
            let job = try JobID(name)
            _ = try await store.createJob(tenant: acme, id: job, environment: .development, notifications: notes, createdAt: t0)
            let forms = try await store.client.query(
                """
                SELECT count(token_bytes)::int + count(apns_uuids)::int, count(tokens)::int + count(apns_ids)::int
                FROM job_chunk WHERE job_id = \(name)
                """, logger: StoreBackend.logger
            ).collect()
            let (byteColumns, textColumns) = try #require(try forms.first?.decode((Int, Int).self))
            #expect(byteColumns == 2 && textColumns == 0, "\(name)")
            let listed = try await store.items(tenant: acme, job: job, fromIndex: 0, limit: 10)
            if asText {
                // As a job posted before the ids were kept as uuid[] has them.
                try await store.client.query(
                    """
                    UPDATE job_chunk SET apns_ids = apns_uuids::text[], apns_uuids = NULL,
                        tokens = ARRAY(SELECT encode(b, 'hex') FROM unnest(token_bytes) WITH ORDINALITY AS v(b, n) ORDER BY n),
                        token_bytes = NULL
                    WHERE job_id = \(name)
                    """,
                    logger: StoreBackend.logger)
            }
            let ids = listed.map(\.notification.id)
            #expect(ids.first == given.id && Set(ids.compactMap { $0 }).count == 4, "\(name)")
            #expect(listed.map(\.notification.deviceToken) == notes.map(\.deviceToken), "\(name)")
            let claimed = try await store.claimPendingItems(
                tenant: acme, job: job, limit: 4, claimant: "runner", now: t0, leaseUntil: t0.addingTimeInterval(60))
            #expect(claimed.map(\.notification.id) == ids, "\(name)")
            #expect(claimed.map(\.notification.deviceToken) == notes.map(\.deviceToken), "\(name)")
            // A failure gives its item a row, its apns-id copied from the chunk.
            let failed = JobItemResult(
                state: .failed, status: 400, reason: "BadDeviceToken", apnsID: ids[1], finishedAt: t0, attempts: 1)
            #expect(try await store.recordChanges(tenant: acme, job: job, [JobItemChange(index: 1, change: .outcome(failed))]) == 1)
            let rowed = try await store.client.query(
                "SELECT apns_id, device_token FROM job_item WHERE job_id = \(name) AND idx = 1", logger: StoreBackend.logger
            ).collect()
            let (rowID, rowToken) = try #require(try rowed.first?.decode((String, String).self))
            #expect(rowID == ids[1]?.rawValue && rowToken == "00ff10", "\(name)")
            let read = try await store.items(tenant: acme, job: job, fromIndex: 0, limit: 10)
            #expect(read.map(\.notification.id) == ids && read[1].result == failed, "\(name)")
            #expect(read.map(\.notification.deviceToken) == notes.map(\.deviceToken), "\(name)")
        }
        try await store.dropSchemaForTests()
        await store.close()
    }

    /// Job creation is one at a time per tenant (its limits are checked and its items inserted
    /// under an advisory lock), but per tenant *of a schema*: deployments sharing a database with
    /// schemas of their own must not wait for each other's tenants of the same name.
    @Test("a job creation waits for the same tenant's in its schema, not for a same-named tenant's in another schema")
    func jobCreationLockIsPerSchema() async throws {
        let first = try await PostgresPushStore.open(
            try StoreBackend.postgresConfiguration(schema: StoreBackend.freshSchema(), poolSize: 3), logger: StoreBackend.logger)
        let second = try await PostgresPushStore.open(
            try StoreBackend.postgresConfiguration(schema: StoreBackend.freshSchema(), poolSize: 3), logger: StoreBackend.logger)
        let acme = try TenantID("acme")
        let key = PostgresPushStore.jobLockKey(schema: first.configuration.schema, tenant: acme)
        #expect(key != PostgresPushStore.jobLockKey(schema: second.configuration.schema, tenant: acme))
        let create: @Sendable (PostgresPushStore, String) async throws -> JobCreation = { store, id in
            try await store.createJob(
                tenant: acme, id: try JobID(id), environment: .development, notifications: [Fixtures.note()],
                createdAt: Date())
        }
        // A transaction of the first store's pool holds the lock of its `acme`, as a create does.
        let waiting = try await first.client.withTransaction(logger: StoreBackend.logger) { connection in
            try await connection.query(
                "SELECT pg_advisory_xact_lock(\(PostgresPushStore.jobLockNamespace), hashtext(\(key)))",
                logger: StoreBackend.logger)
            // The other schema's `acme` is not held up: it is created while the lock is held.
            let other = try await create(second, "other-schema")
            #expect(Self.isCreated(other), "\(other)")
            // This schema's `acme` waits for the lock: once the server shows a session waiting
            // for it, the job is still not there.
            let waiting = Task { try await create(first, "same-schema") }
            var waiters = 0
            for _ in 0..<6_000 where waiters == 0 {
                let rows = try await connection.query(
                    """
                    SELECT count(*)::int FROM pg_locks
                    WHERE locktype = 'advisory' AND NOT granted AND classid = \(PostgresPushStore.jobLockNamespace)
                      AND objid::bigint = (hashtext(\(key))::bigint & 4294967295)
                    """, logger: StoreBackend.logger
                ).collect()
                waiters = try rows.first?.decode(Int.self) ?? 0
                if waiters == 0 { try await Task.sleep(for: .milliseconds(10)) }
            }
            #expect(waiters == 1, "the create never waited for the lock")
            #expect(try await first.job(tenant: acme, id: try JobID("same-schema")) == nil, "created under the held lock")
            return waiting
        }
        // Released at the transaction's end: the create that waited goes through.
        let created = try await waiting.value
        #expect(Self.isCreated(created), "\(created)")
        try await first.dropSchemaForTests()
        try await second.dropSchemaForTests()
        await first.close()
        await second.close()
    }

    private static func isCreated(_ creation: JobCreation) -> Bool {
        if case .created = creation { true } else { false }
    }

    /// `storage.postgres.call_timeout`: a call whose answer never comes (here the link to the
    /// server goes silent; after a restart it is a query postgres-nio lost) fails with a timeout
    /// instead of holding its caller, and the store works again once the server answers.
    @Test("a call that gets no answer fails after the call timeout; the store recovers when the server answers again")
    func silentServer() async throws {
        // The call timeout runs on a stepped clock, moved past it once the call is under way: no
        // call before the silence can time out on a loaded machine, and none waits in real time.
        let clock = SteppedPushClock()
        let callTimeout = Duration.seconds(5)
        try await Self.withStoreBehindProxy(callTimeout: callTimeout, clock: clock) { store, proxy in
            let tenant = try TenantID("acme")
            #expect(try await store.jobs(tenant: tenant, states: nil, limit: 10).isEmpty)

            proxy.silent = true
            let due = clock.now.advanced(by: callTimeout)
            let call = Task { try await store.jobs(tenant: tenant, states: nil, limit: 10) }
            // Under way: its query is held on the silent link, and the store's deadline watcher
            // sleeps until `due` or earlier (an earlier call's deadline: it then sleeps again).
            try await Self.waitFor { proxy.heldBackBytes > 0 && clock.deadlines.contains { $0 <= due } }
            clock.advance(to: due)
            do {
                _ = try await call.value
                Issue.record("a call over a silent link returned")
            } catch let error as StoreError {
                #expect(error.isTimedOut, "\(error)")
                #expect(error.message.contains("storage.postgres.call_timeout"), "\(error.message)")
            }
            #expect(store.unansweredCalls.timedOut >= 1)

            // The server answers again, on new connections (the silent ones are cut). A call lost
            // with its connection waits for its bound: the clock is moved past it after 2 s.
            proxy.silent = false
            proxy.cutConnections()
            var answered = false
            for _ in 0..<40 where !answered {
                let attempt = Task { try await store.jobs(tenant: tenant, states: nil, limit: 10) }
                let watchdog = Task {
                    try await Task.sleep(for: .seconds(2))
                    clock.advance(by: callTimeout)
                }
                do {
                    _ = try await attempt.value
                    answered = true
                } catch {
                    try await Task.sleep(for: .milliseconds(250))
                }
                watchdog.cancel()
            }
            #expect(answered, "the store did not recover")
        }
    }

    /// Waits until `condition` holds, polling every 10 ms for at most 20 s; fails the test if it never does.
    private static func waitFor(_ condition: () -> Bool) async throws {
        let clock = ContinuousClock()
        let patience = clock.now.advanced(by: .seconds(20))
        while !condition(), clock.now < patience { try await Task.sleep(for: .milliseconds(10)) }
        #expect(condition(), "the condition never held")
    }

    /// A connection lost under a call (PostgreSQL restarting, the network cut) fails the call as
    /// ``StoreError/unavailable(_:)``, which the API answers with 503 `store_unavailable`, not as
    /// postgres-nio's own error.
    @Test("a call whose connection is lost fails as unavailable, not with the driver's error, and before the call timeout")
    func lostConnection() async throws {
        try await Self.withStoreBehindProxy(callTimeout: .seconds(60)) { store, proxy in
            let tenant = try TenantID("acme")
            #expect(try await store.jobs(tenant: tenant, states: nil, limit: 10).isEmpty)
            // The query goes out and its answer never comes; then the connection goes.
            proxy.silent = true
            let call = Task { try await store.jobs(tenant: tenant, states: nil, limit: 10) }
            // The query reached the link (under load its task may start late: cut before, the
            // call would go out on a new connection and wait for the call timeout instead).
            let clock = ContinuousClock()
            let patience = clock.now.advanced(by: .seconds(20))
            while proxy.heldBackBytes == 0, clock.now < patience { try await Task.sleep(for: .milliseconds(10)) }
            #expect(proxy.heldBackBytes > 0, "the query never reached the link")
            let started = PushInstant.now
            proxy.cutConnections()
            do {
                _ = try await call.value
                Issue.record("a call over a cut connection returned")
            } catch let error as StoreError {
                #expect(error.isUnavailable, "\(error)")
                #expect(error.leftOutcomeUnknown)
                #expect(error.message.contains("PostgreSQL"), "\(error.message)")
            }
            #expect(started.duration(to: .now) < .seconds(30))
            proxy.silent = false
        }
    }

    /// A store on a fresh schema reached through a ``SilentLinkProxy``; the schema is dropped and
    /// everything stopped afterwards.
    private static func withStoreBehindProxy(
        callTimeout: Duration, clock: any PushClock = SystemPushClock(),
        _ body: (PostgresPushStore, SilentLinkProxy) async throws -> Void
    ) async throws {
        let direct = try StoreBackend.postgresConfiguration(schema: StoreBackend.freshSchema(), poolSize: 1)
        var configuration = direct
        configuration.poolSize = 2
        let proxy = try await SilentLinkProxy.start(targetHost: configuration.host, targetPort: configuration.port)
        configuration.host = "127.0.0.1"
        configuration.port = proxy.port
        configuration.callTimeout = callTimeout
        configuration.clock = clock
        let store: PostgresPushStore
        do {
            store = try await PostgresPushStore.open(configuration, logger: StoreBackend.logger)
        } catch {
            await proxy.stop()
            throw error
        }
        var failure: (any Error)? = nil
        do {
            try await body(store, proxy)
        } catch {
            failure = error
        }
        proxy.silent = false
        proxy.cutConnections()
        await store.close()
        await proxy.stop()
        // The schema is dropped over a link of its own: a connection the store opened through
        // the proxy while it was silent may still be waiting for its startup's answer.
        if let cleaner = try? await PostgresPushStore.open(direct, logger: StoreBackend.logger) {
            try? await cleaner.dropSchemaForTests()
            await cleaner.close()
        }
        if let failure { throw failure }
    }
}
