import HeraldStore
import Logging
import NIOSSL
import PostgresNIO

extension PostgresPushStore {
    /// One schema version: its name (the same as the SQLite store's migration of that version,
    /// so the two schemas move together) and its statements, applied in one transaction.
    struct Migration: Sendable {
        var name: String
        var statements: [PostgresQuery]

        /// The dollar quote each statement goes in (``block``); no statement may hold it.
        static let statementQuote = "$herald_statement$"
        /// The dollar quote of the block itself.
        static let blockQuote = "$herald_migration$"

        /// The whole migration as one statement: a `DO` block that executes each statement in
        /// order and records the migration, atomic as any single statement is. One round trip
        /// instead of one a statement: a fresh schema is made in about twenty, not about 130.
        /// - Throws: `StoreError.cannotOpen` for a statement with bind parameters or holding one of
        ///   the block's quotes (the migrations are Herald's own text: a test opens every one).
        func block() throws -> PostgresQuery {
            var body = ""
            for text in statements.map(\.sql) + ["INSERT INTO herald_migration (name) VALUES (\(Self.literal(name)))"] {
                guard !text.contains(Self.statementQuote), !text.contains(Self.blockQuote) else {
                    throw StoreError.cannotOpen("migration \(name): a statement holds the migration block's dollar quote")
                }
                body += "    EXECUTE \(Self.statementQuote)\(text)\(Self.statementQuote);\n"
            }
            guard statements.allSatisfy({ $0.binds.count == 0 }) else {
                throw StoreError.cannotOpen("migration \(name): a statement has bind parameters")
            }
            return PostgresQuery(unsafeSQL: "DO \(Self.blockQuote)\nBEGIN\n\(body)END\n\(Self.blockQuote)")
        }

        /// `text` as an SQL string literal.
        private static func literal(_ text: String) -> String {
            "'" + text.replacingOccurrences(of: "'", with: "''") + "'"
        }
    }

    /// The first key of the advisory lock held while migrating ("HRLD" in ASCII); the second is
    /// the schema's name hashed: instances that start together on one schema wait for the first
    /// one's migrations instead of running them twice, while stores in other schemas of the same
    /// database (other deployments, parallel tests) do not wait for each other.
    static let migrationLockNamespace: Int32 = 0x4852_4c44

    /// The schema, in order. Never edit a migration that has shipped: add the next one.
    static let migrations: [Migration] = [
        Migration(
            name: "v1: invalid tokens, jobs, job items",
            statements: [
                """
                CREATE TABLE invalid_token (
                    tenant TEXT NOT NULL,
                    environment TEXT NOT NULL,
                    token TEXT NOT NULL,
                    topic TEXT NOT NULL,
                    reason TEXT NOT NULL,
                    apns_timestamp_ms BIGINT,
                    recorded_at_ms BIGINT NOT NULL,
                    registered_at_ms BIGINT,
                    PRIMARY KEY (tenant, environment, token, topic)
                )
                """,
                "CREATE INDEX invalid_token_recent ON invalid_token (tenant, recorded_at_ms)",
                "CREATE INDEX invalid_token_by_token ON invalid_token (tenant, token)",
                """
                CREATE TABLE job (
                    tenant TEXT NOT NULL,
                    id TEXT NOT NULL,
                    state TEXT NOT NULL,
                    environment TEXT,
                    item_count INTEGER NOT NULL,
                    created_at_ms BIGINT NOT NULL,
                    updated_at_ms BIGINT NOT NULL,
                    PRIMARY KEY (tenant, id)
                )
                """,
                "CREATE INDEX job_by_state ON job (tenant, state, created_at_ms)",
                "CREATE INDEX job_by_created ON job (tenant, created_at_ms)",
                """
                CREATE TABLE job_item (
                    tenant TEXT NOT NULL,
                    job_id TEXT NOT NULL,
                    idx INTEGER NOT NULL,
                    device_token TEXT NOT NULL,
                    topic TEXT,
                    push_type TEXT NOT NULL,
                    priority INTEGER,
                    expiration BIGINT,
                    collapse_id TEXT,
                    apns_id TEXT NOT NULL,
                    payload BYTEA NOT NULL,
                    state TEXT NOT NULL,
                    status INTEGER,
                    reason TEXT,
                    message TEXT,
                    result_apns_id TEXT,
                    apns_timestamp_ms BIGINT,
                    finished_at_ms BIGINT,
                    claimant TEXT,
                    lease_until_ms BIGINT,
                    PRIMARY KEY (tenant, job_id, idx),
                    FOREIGN KEY (tenant, job_id) REFERENCES job (tenant, id) ON DELETE CASCADE
                )
                """,
                "CREATE INDEX job_item_by_state ON job_item (tenant, job_id, state, idx)",
            ]),
        Migration(
            name: "v2: job item outcome index",
            statements: ["CREATE INDEX job_item_outcomes ON job_item (tenant, job_id, state, status, reason)"]),
        // Durable delivery, as the SQLite store's v4: each item's attempts, its first attempt (its
        // retry time counts from there), when it is due again while `retrying`, and its last
        // transient error. `job_item_due` serves the claim of due retries (earliest first) and
        // the job's next attempt time. (A database that already has v5 gets this one after it.)
        Migration(
            name: "v4-job-item-attempts",
            statements: [
                "ALTER TABLE job_item ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0",
                "ALTER TABLE job_item ADD COLUMN first_attempt_ms BIGINT",
                "ALTER TABLE job_item ADD COLUMN next_attempt_ms BIGINT",
                "ALTER TABLE job_item ADD COLUMN last_error TEXT",
                "CREATE INDEX job_item_due ON job_item (tenant, job_id, state, next_attempt_ms)",
            ]),
        Migration(
            name: "v5: provider tokens",
            statements: [
                """
                CREATE TABLE provider_token (
                    team_id TEXT NOT NULL,
                    key_id TEXT NOT NULL,
                    key_fingerprint TEXT NOT NULL,
                    token TEXT NOT NULL,
                    issued_at_ms BIGINT NOT NULL,
                    PRIMARY KEY (team_id, key_id, key_fingerprint)
                )
                """
            ]),
        // At-most-once across a crash, as the SQLite store's v6: when an item's request was last
        // about to be written; cleared when a transient answer defers the item.
        Migration(
            name: "v6: job item on the wire",
            statements: ["ALTER TABLE job_item ADD COLUMN wire_at_ms BIGINT"]),
        // Several `herald serve` instances (as the SQLite store's v7): the instance registry, the
        // webhook outbox and the retention sweep's index (the SQLite store's v3 has those two), and
        // `job_item_leased` (partial: only leased items) for lease renewal, a dead instance's
        // leases and the items each one holds.
        Migration(
            name: "v7-instances",
            statements: [
                """
                CREATE TABLE herald_instance (
                    id TEXT PRIMARY KEY,
                    claimant TEXT NOT NULL,
                    host TEXT NOT NULL,
                    pid INTEGER NOT NULL,
                    started_at_ms BIGINT NOT NULL,
                    last_heartbeat_ms BIGINT NOT NULL
                )
                """,
                "CREATE INDEX job_item_leased ON job_item (claimant, tenant, job_id) WHERE claimant IS NOT NULL",
                "CREATE INDEX job_by_updated ON job (state, updated_at_ms)",
                """
                CREATE TABLE webhook_outbox (
                    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    tenant TEXT NOT NULL,
                    url TEXT NOT NULL,
                    headers TEXT NOT NULL,
                    body BYTEA NOT NULL,
                    timeout_ms BIGINT NOT NULL,
                    allow_private BOOLEAN NOT NULL,
                    attempt INTEGER NOT NULL,
                    max_attempts INTEGER NOT NULL,
                    backoff_ms BIGINT NOT NULL,
                    next_attempt_ms BIGINT NOT NULL,
                    claimed_until_ms BIGINT
                )
                """,
                "CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_ms, id)",
                "CREATE INDEX webhook_outbox_by_tenant ON webhook_outbox (tenant)",
            ]),
        // A batch's payloads stored once per run of equal payloads, as in the SQLite store's v3: a
        // template batch of 100,000 tokens holds one `job_payload` row, not 100,000 copies. Items
        // of older jobs keep their own `payload` (`payload_ref` NULL); new items store an empty one
        // there. Deleting a job deletes its payloads (cascade).
        Migration(
            name: "v8-shared-payloads",
            statements: [
                """
                CREATE TABLE job_payload (
                    tenant TEXT NOT NULL,
                    job_id TEXT NOT NULL,
                    id INTEGER NOT NULL,
                    payload BYTEA NOT NULL,
                    PRIMARY KEY (tenant, job_id, id),
                    FOREIGN KEY (tenant, job_id) REFERENCES job (tenant, id) ON DELETE CASCADE
                )
                """,
                "ALTER TABLE job_item ADD COLUMN payload_ref INTEGER",
            ]),
        // The batch path's lean item shape, as the SQLite store's v9: outcome counts kept per job
        // (`job_outcome`, added to by the statement that records the outcomes: a report reads a few
        // rows), and partial claim, retry and failed-item indexes in place of the full ones, so
        // that an outcome does not move three index entries of its item (each a new entry beside a
        // dead one until a vacuum): a sent item leaves `job_item_pending` and enters no index.
        // NULLS NOT DISTINCT (PostgreSQL 15) makes one counter row per (state, status, reason),
        // NULLs included.
        Migration(
            name: "v9-lean-job-items",
            statements: [
                """
                CREATE TABLE job_outcome (
                    tenant TEXT NOT NULL,
                    job_id TEXT NOT NULL,
                    state TEXT NOT NULL,
                    status INTEGER,
                    reason TEXT,
                    n BIGINT NOT NULL,
                    FOREIGN KEY (tenant, job_id) REFERENCES job (tenant, id) ON DELETE CASCADE
                )
                """,
                """
                CREATE UNIQUE INDEX job_outcome_key ON job_outcome (tenant, job_id, state, status, reason)
                    NULLS NOT DISTINCT
                """,
                """
                INSERT INTO job_outcome (tenant, job_id, state, status, reason, n)
                    SELECT tenant, job_id, state, status, reason, count(*) FROM job_item
                    WHERE state IN ('sent', 'failed', 'unknown')
                    GROUP BY tenant, job_id, state, status, reason
                """,
                "DROP INDEX job_item_by_state",
                "DROP INDEX job_item_outcomes",
                "DROP INDEX job_item_due",
                "CREATE INDEX job_item_pending ON job_item (tenant, job_id, idx) WHERE state = 'pending'",
                "CREATE INDEX job_item_due ON job_item (tenant, job_id, next_attempt_ms) WHERE state = 'retrying'",
                "CREATE INDEX job_item_failed ON job_item (tenant, job_id, idx) WHERE state = 'failed'",
            ]),
        // PostgreSQL only (the SQLite store has no counterpart; the next migration of both backends
        // is v11): a new job's items as chunk rows (`job_chunk`, up to 1,000 items each, a field
        // per array), given their own `job_item` rows only when a claim, an outcome or a read first
        // needs them; `job.materialized` counts the items that have one (a prefix of the job; every
        // item of an older job has one). And job items without the foreign key to their job: its
        // check runs once per inserted item (a lookup and a `FOR KEY SHARE` lock of the job's row),
        // more than half of the server's CPU for inserting items. Nothing needs it: item rows are
        // inserted only from their job's chunks, and the retention sweep deletes a job's items
        // before the job (`deleteExpiredJobs`), which is all the cascade would do; chunks keep
        // theirs (a hundred rows a job). The arrays are stored uncompressed (`EXTERNAL`): each
        // chunk is read once or twice, and compressing 150 kB rows costs the POST more than it
        // saves.
        Migration(
            name: "v9.1-pg-job-chunks",
            statements: [
                """
                CREATE TABLE job_chunk (
                    tenant TEXT NOT NULL,
                    job_id TEXT NOT NULL,
                    first_idx INTEGER NOT NULL,
                    count INTEGER NOT NULL,
                    tokens TEXT[] NOT NULL,
                    topics TEXT[] NOT NULL,
                    push_types TEXT[] NOT NULL,
                    priorities INTEGER[] NOT NULL,
                    expirations BIGINT[] NOT NULL,
                    collapse_ids TEXT[] NOT NULL,
                    apns_ids TEXT[] NOT NULL,
                    payload_refs INTEGER[] NOT NULL,
                    nulls SMALLINT[] NOT NULL,
                    PRIMARY KEY (tenant, job_id, first_idx),
                    FOREIGN KEY (tenant, job_id) REFERENCES job (tenant, id) ON DELETE CASCADE
                )
                """,
                """
                ALTER TABLE job_chunk ALTER tokens SET STORAGE EXTERNAL, ALTER topics SET STORAGE EXTERNAL,
                    ALTER push_types SET STORAGE EXTERNAL, ALTER priorities SET STORAGE EXTERNAL,
                    ALTER expirations SET STORAGE EXTERNAL, ALTER collapse_ids SET STORAGE EXTERNAL,
                    ALTER apns_ids SET STORAGE EXTERNAL, ALTER payload_refs SET STORAGE EXTERNAL,
                    ALTER nulls SET STORAGE EXTERNAL
                """,
                "ALTER TABLE job ADD COLUMN materialized INTEGER NOT NULL DEFAULT 0",
                "UPDATE job SET materialized = item_count",
                "ALTER TABLE job_item DROP CONSTRAINT IF EXISTS job_item_tenant_job_id_fkey",
                // Room on each page for the on-the-wire mark's new row version: that column is in
                // no index, so the update can stay on the page without new index entries (HOT).
                "ALTER TABLE job_item SET (fillfactor = 60)",
            ]),
        // A job's end told once (`JobEndLedger`), as SQLite's v11: `end_told_ms` set in the
        // transaction that queues the end event; the untold ends in a partial index of their own;
        // jobs that ended before count as told.
        Migration(
            name: "v11-job-end-told",
            statements: [
                "ALTER TABLE job ADD COLUMN end_told_ms BIGINT",
                "UPDATE job SET end_told_ms = updated_at_ms WHERE state IN ('finished', 'cancelled')",
                """
                CREATE INDEX job_end_untold ON job (updated_at_ms)
                    WHERE end_told_ms IS NULL AND state IN ('finished', 'cancelled')
                """,
            ]),
        // APNs' apns-unique-id of an item's answer, as SQLite's v12.
        Migration(name: "v12-item-unique-id", statements: ["ALTER TABLE job_item ADD COLUMN result_unique_id TEXT"]),
        // PostgreSQL only: a claim leases a range of items from the job's frontier
        // (`job.materialized` from now on: every item below it was claimed once) as one
        // `job_claim_range` row instead of a row per item, and plain successes are kept as
        // `job_sent` rows of arrays, one a commit group and block of 1,024 indexes; an item has a
        // `job_item` row only when it has more to keep. Items of running jobs below their frontier
        // all have rows already, which the new shape reads as it reads any row.
        Migration(
            name: "v12.1-pg-claim-ranges",
            statements: [
                """
                CREATE TABLE job_claim_range (
                    tenant TEXT NOT NULL,
                    job_id TEXT NOT NULL,
                    first_idx INTEGER NOT NULL,
                    end_idx INTEGER NOT NULL,
                    claimant TEXT NOT NULL,
                    lease_until_ms BIGINT NOT NULL,
                    PRIMARY KEY (tenant, job_id, first_idx),
                    FOREIGN KEY (tenant, job_id) REFERENCES job (tenant, id) ON DELETE CASCADE
                )
                """,
                "CREATE INDEX job_claim_range_by_claimant ON job_claim_range (claimant)",
                "CREATE INDEX job_claim_range_by_lease ON job_claim_range (tenant, job_id, lease_until_ms)",
                """
                CREATE TABLE job_sent (
                    tenant TEXT NOT NULL,
                    job_id TEXT NOT NULL,
                    id BIGINT GENERATED ALWAYS AS IDENTITY,
                    block INTEGER NOT NULL,
                    idxs INTEGER[] NOT NULL,
                    attempts INTEGER[] NOT NULL,
                    finished_ms BIGINT[] NOT NULL,
                    apns_ids TEXT[] NOT NULL,
                    PRIMARY KEY (tenant, job_id, id),
                    FOREIGN KEY (tenant, job_id) REFERENCES job (tenant, id) ON DELETE CASCADE
                )
                """,
                "CREATE INDEX job_sent_by_block ON job_sent (tenant, job_id, block)",
            ]),
        // Admin accounts (a console password as its bcrypt hash, failed logins and a lock), their
        // tokens (kept as SHA-256) and the audit log, as SQLite's v13.
        Migration(
            name: "v13-admin-accounts",
            statements: [
                """
                CREATE TABLE admin_account (
                    name TEXT PRIMARY KEY,
                    role TEXT NOT NULL,
                    created_at_ms BIGINT NOT NULL,
                    password_hash TEXT,
                    failed_logins INTEGER NOT NULL DEFAULT 0,
                    locked_until_ms BIGINT
                )
                """,
                """
                CREATE TABLE admin_token (
                    id TEXT PRIMARY KEY,
                    account TEXT NOT NULL REFERENCES admin_account (name) ON DELETE CASCADE,
                    name TEXT NOT NULL,
                    sha256 TEXT NOT NULL UNIQUE,
                    created_at_ms BIGINT NOT NULL,
                    expires_at_ms BIGINT,
                    revoked_at_ms BIGINT
                )
                """,
                "CREATE INDEX admin_token_by_account ON admin_token (account, created_at_ms)",
                """
                CREATE TABLE audit_log (
                    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    at_ms BIGINT NOT NULL,
                    account TEXT NOT NULL,
                    source TEXT,
                    request_id TEXT,
                    action TEXT NOT NULL,
                    tenant TEXT,
                    object TEXT,
                    details TEXT NOT NULL
                )
                """,
                "CREATE INDEX audit_log_by_at ON audit_log (at_ms)",
                "CREATE INDEX audit_log_by_tenant ON audit_log (tenant, id)",
                "CREATE INDEX audit_log_by_account ON audit_log (account, id)",
            ]),
        // Usage per tenant and hour, as SQLite's v14.
        Migration(
            name: "v14-usage",
            statements: [
                """
                CREATE TABLE usage_hour (
                    tenant TEXT NOT NULL,
                    hour_ms BIGINT NOT NULL,
                    kind TEXT NOT NULL,
                    count BIGINT NOT NULL,
                    PRIMARY KEY (tenant, hour_ms, kind)
                )
                """,
                "CREATE INDEX usage_hour_by_hour ON usage_hour (hour_ms)",
            ]),
        Migration(
            name: "v15-channels",
            statements: [
                """
                CREATE TABLE channel (
                    tenant TEXT NOT NULL,
                    environment TEXT NOT NULL,
                    id TEXT NOT NULL,
                    bundle_id TEXT NOT NULL,
                    storage_policy INTEGER NOT NULL,
                    label TEXT,
                    created_ms BIGINT NOT NULL,
                    PRIMARY KEY (tenant, environment, id)
                )
                """,
                "CREATE INDEX channel_by_app ON channel (tenant, environment, bundle_id)",
            ]),
        // PostgreSQL only: a commit group of plain successes (nearly every group of a batch) in
        // one call and one commit, its statements planned once a connection.
        Migration(
            name: "v15.1-pg-record-sent",
            statements: [
                PostgresQuery(unsafeSQL: PostgresPushStore.recordSentFunctionFirst),
                // A group's record (a few KB of arrays) is kept in its row as written: never
                // compressed nor moved out of line, which cost more than the rest of its insert.
                "ALTER TABLE job_sent SET (toast_tuple_target = 8160)",
                // One index, by block, to keep up and to read (a lookup of a group's blocks
                // planned once for every group has no other to choose).
                "ALTER TABLE job_sent DROP CONSTRAINT job_sent_pkey",
                "ALTER TABLE job_sent ADD PRIMARY KEY (tenant, job_id, block, id)",
                "DROP INDEX job_sent_by_block",
            ]),
        // The same function in three statements instead of eight
        // (``PostgresPushStore/recordSentFunction``); its signature and answers are unchanged,
        // so instances not yet restarted keep calling it.
        Migration(
            name: "v15.2-pg-record-sent-in-three-statements",
            statements: [PostgresQuery(unsafeSQL: PostgresPushStore.recordSentFunction)]),
        // PostgreSQL only: a chunk's device tokens as `bytea[]` and apns-ids as `uuid[]`, bytes
        // that the server takes in as they come, half or less the size of their text, which it
        // checks character by character. A chunk keeps them in `token_bytes` and `apns_uuids`
        // (chunks of jobs posted before, in `tokens` and `apns_ids`; readers take either). A group
        // of plain successes whose every item has its apns-id (nearly every group) goes to
        // ``PostgresPushStore/recordSentUUIDsFunction`` and keeps them in `job_sent.apns_uuids`;
        // other groups keep writing text. A row holds one form or the other.
        Migration(
            name: "v15.3-pg-ids-as-bytes",
            statements: [
                "ALTER TABLE job_chunk ADD COLUMN token_bytes BYTEA[], ADD COLUMN apns_uuids UUID[]",
                "ALTER TABLE job_chunk ALTER token_bytes SET STORAGE EXTERNAL, ALTER apns_uuids SET STORAGE EXTERNAL",
                "ALTER TABLE job_chunk ALTER tokens DROP NOT NULL, ALTER apns_ids DROP NOT NULL",
                "ALTER TABLE job_sent ADD COLUMN apns_uuids UUID[]",
                "ALTER TABLE job_sent ALTER apns_ids DROP NOT NULL",
                // Every row written so far has its text ids: nothing to check on them.
                """
                ALTER TABLE job_chunk ADD CONSTRAINT job_chunk_one_form
                    CHECK ((tokens IS NULL) <> (token_bytes IS NULL) AND (apns_ids IS NULL) <> (apns_uuids IS NULL)) NOT VALID
                """,
                """
                ALTER TABLE job_sent ADD CONSTRAINT job_sent_apns_one_form
                    CHECK ((apns_ids IS NULL) <> (apns_uuids IS NULL)) NOT VALID
                """,
                PostgresQuery(unsafeSQL: PostgresPushStore.recordSentUUIDsFunction),
            ]),
        // PostgreSQL only: a claim in one call (``PostgresPushStore/claimFunction``) instead of
        // thirteen statements, each a round trip that cost `herald serve` and the server more
        // than its work.
        Migration(name: "v15.4-pg-claim-in-one-call", statements: [PostgresQuery(unsafeSQL: PostgresPushStore.claimFunction)]),
    ]

    /// Applies the migrations not applied yet (up to and including `lastMigration`; all when nil),
    /// each as one statement (``Migration/block()``), on a connection of its own that holds the migration lock. A
    /// direct connection, not one of the pool's: a server that refuses it (wrong password, no
    /// such database) fails the open at once instead of after the pool's retries.
    func migrate(upTo lastMigration: String?) async throws {
        let logger = self.logger
        let connection = try await PostgresConnection.connect(
            on: PostgresClient.defaultEventLoopGroup.any(), configuration: try Self.connectionConfiguration(configuration),
            id: 0, logger: logger
        ).get()
        do {
            // Released when the connection closes, whatever happens below. Taken before the schema
            // is created: two instances creating it at once would both pass IF NOT EXISTS and one
            // would fail on the catalogue's unique index.
            let lockedSchema = configuration.schema ?? "public"
            try await connection.query(
                "SELECT pg_advisory_lock(\(Self.migrationLockNamespace), hashtext(\(lockedSchema)))", logger: logger)
            if let schema = configuration.schema {
                // Checked by `Configuration.isValidSchema`: a plain lowercase identifier.
                try await connection.query(
                    PostgresQuery(unsafeSQL: "CREATE SCHEMA IF NOT EXISTS \"\(schema)\""), logger: logger)
            }
            try await Self.applyMigrations(connection, upTo: lastMigration, logger: logger)
        } catch {
            try? await connection.close()
            throw error
        }
        try await connection.close()
    }

    /// The settings of a single connection, as the pool's connections get them.
    static func connectionConfiguration(_ configuration: Configuration) throws -> PostgresConnection.Configuration {
        var connection = PostgresConnection.Configuration(
            host: configuration.host, port: configuration.port, username: configuration.username,
            password: configuration.password, database: configuration.database,
            tls: configuration.requireTLS
                ? .require(try NIOSSLContext(configuration: .makeClientConfiguration())) : .disable)
        connection.options.connectTimeout = .seconds(10)
        connection.options.additionalStartupParameters = startupParameters(configuration)
        return connection
    }

    /// What every connection tells the server at its start: its `application_name`, and the
    /// store's schema as its `search_path`.
    static func startupParameters(_ configuration: Configuration) -> [(String, String)] {
        [("application_name", configuration.applicationName)] + (configuration.schema.map { [("search_path", $0)] } ?? [])
    }

    private static func applyMigrations(_ connection: PostgresConnection, upTo lastMigration: String?, logger: Logger)
        async throws
    {
        try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS herald_migration (
                name TEXT PRIMARY KEY,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )
            """, logger: logger)
        let applied = Set(try await appliedMigrations(connection, logger: logger))
        for migration in migrations {
            if !applied.contains(migration.name) {
                try await connection.query(try migration.block(), logger: logger)
                logger.info("store migrated", metadata: ["herald.migration": "\(migration.name)"])
            }
            if migration.name == lastMigration { break }
        }
    }

    private static func appliedMigrations(_ connection: PostgresConnection, logger: Logger) async throws -> [String] {
        var names: [String] = []
        for try await name in try await connection.query(
            "SELECT name FROM herald_migration ORDER BY applied_at, name", logger: logger
        ).decode(String.self) {
            names.append(name)
        }
        return names
    }

    /// The migrations applied to the database, in the order they were applied.
    public func appliedMigrations() async throws -> [String] {
        let logger = self.logger
        return try await client.withConnection { connection in
            try await Self.appliedMigrations(connection, logger: logger)
        }
    }
}
