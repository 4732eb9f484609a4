import GRDB

extension SQLitePushStore {
    /// The schema, one registered migration per version. Never edit a migration that has shipped:
    /// add the next one.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: invalid tokens, jobs, job items") { db in
            try db.execute(
                sql: """
                    CREATE TABLE invalid_token (
                        tenant TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        token TEXT NOT NULL,
                        topic TEXT NOT NULL,
                        reason TEXT NOT NULL,
                        apns_timestamp_ms INTEGER,
                        recorded_at_ms INTEGER NOT NULL,
                        registered_at_ms INTEGER,
                        PRIMARY KEY (tenant, environment, token, topic)
                    ) WITHOUT ROWID;
                    CREATE INDEX invalid_token_recent ON invalid_token (tenant, recorded_at_ms);

                    CREATE TABLE job (
                        tenant TEXT NOT NULL,
                        id TEXT NOT NULL,
                        state TEXT NOT NULL,
                        environment TEXT,
                        item_count INTEGER NOT NULL,
                        created_at_ms INTEGER NOT NULL,
                        updated_at_ms INTEGER NOT NULL,
                        PRIMARY KEY (tenant, id)
                    ) WITHOUT ROWID;
                    CREATE INDEX job_by_state ON job (tenant, state, created_at_ms);
                    CREATE INDEX job_by_created ON job (tenant, created_at_ms);

                    CREATE TABLE job_item (
                        tenant TEXT NOT NULL,
                        job_id TEXT NOT NULL,
                        idx INTEGER NOT NULL,
                        device_token TEXT NOT NULL,
                        topic TEXT,
                        push_type TEXT NOT NULL,
                        priority INTEGER,
                        expiration INTEGER,
                        collapse_id TEXT,
                        apns_id TEXT NOT NULL,
                        payload BLOB NOT NULL,
                        state TEXT NOT NULL,
                        status INTEGER,
                        reason TEXT,
                        message TEXT,
                        result_apns_id TEXT,
                        apns_timestamp_ms INTEGER,
                        finished_at_ms INTEGER,
                        claimant TEXT,
                        lease_until_ms INTEGER,
                        PRIMARY KEY (tenant, job_id, idx),
                        FOREIGN KEY (tenant, job_id) REFERENCES job (tenant, id) ON DELETE CASCADE
                    ) WITHOUT ROWID;
                    CREATE INDEX job_item_by_state ON job_item (tenant, job_id, state, idx);
                    """)
        }
        // The job report (`GET /v1/jobs/{id}`) counts a job's items by outcome: with this index the
        // count reads only the index's small entries, already grouped in order, instead of every
        // item row with its payload. The failed-items page keeps using `job_item_by_state`, whose
        // `idx` order it pages by.
        migrator.registerMigration("v2: job item outcome index") { db in
            try db.execute(sql: "CREATE INDEX job_item_outcomes ON job_item (tenant, job_id, state, status, reason)")
        }
        // A batch's payloads are stored once per run of equal payloads, not once per item: a
        // template batch of 100,000 tokens holds one payload row. Items of older jobs keep their
        // own `payload` (their `payload_ref` is NULL); new items store an empty blob there.
        // `job_by_updated` lets the retention sweep find expired jobs of every tenant.
        // `webhook_outbox` holds plugin webhooks until a sender delivers them (or gives up).
        migrator.registerMigration("v3-shared-payloads-and-retention") { db in
            try db.execute(
                sql: """
                    CREATE TABLE job_payload (
                        tenant TEXT NOT NULL,
                        job_id TEXT NOT NULL,
                        id INTEGER NOT NULL,
                        payload BLOB NOT NULL,
                        PRIMARY KEY (tenant, job_id, id),
                        FOREIGN KEY (tenant, job_id) REFERENCES job (tenant, id) ON DELETE CASCADE
                    );
                    ALTER TABLE job_item ADD COLUMN payload_ref INTEGER;
                    CREATE INDEX job_by_updated ON job (state, updated_at_ms);

                    CREATE TABLE webhook_outbox (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        tenant TEXT NOT NULL,
                        url TEXT NOT NULL,
                        headers TEXT NOT NULL,
                        body BLOB NOT NULL,
                        timeout_ms INTEGER NOT NULL,
                        allow_private INTEGER NOT NULL,
                        attempt INTEGER NOT NULL,
                        max_attempts INTEGER NOT NULL,
                        backoff_ms INTEGER NOT NULL,
                        next_attempt_ms INTEGER NOT NULL,
                        claimed_until_ms INTEGER
                    );
                    CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_ms, id);
                    """)
        }
        // Durable delivery: each item's attempts, the time of its first attempt (its retry time
        // counts from there), when it is due again while `retrying`, and its last transient error.
        // `job_item_due` serves the claim of due retries (earliest first) and the job report's
        // next attempt time.
        migrator.registerMigration("v4-job-item-attempts") { db in
            try db.execute(
                sql: """
                    ALTER TABLE job_item ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
                    ALTER TABLE job_item ADD COLUMN first_attempt_ms INTEGER;
                    ALTER TABLE job_item ADD COLUMN next_attempt_ms INTEGER;
                    ALTER TABLE job_item ADD COLUMN last_error TEXT;
                    CREATE INDEX job_item_due ON job_item (tenant, job_id, state, next_attempt_ms);
                    """)
        }
        // Provider tokens shared by every instance signing with one key, and kept across restarts
        // (`ProviderTokenStore`). Named v5: v3 and v4 are the job store's next versions.
        migrator.registerMigration("v5: provider tokens") { db in
            try db.execute(
                sql: """
                    CREATE TABLE provider_token (
                        team_id TEXT NOT NULL,
                        key_id TEXT NOT NULL,
                        key_fingerprint TEXT NOT NULL,
                        token TEXT NOT NULL,
                        issued_at_ms INTEGER NOT NULL,
                        PRIMARY KEY (team_id, key_id, key_fingerprint)
                    ) WITHOUT ROWID
                    """)
        }
        // At-most-once across a crash: an item's request is marked "on the wire" (when) right
        // before it is written; an item claimed again with the mark and no outcome may have
        // reached APNs (its instance stopped before the answer was recorded). Cleared when a
        // transient answer defers the item.
        migrator.registerMigration("v6: job item on the wire") { db in
            try db.execute(sql: "ALTER TABLE job_item ADD COLUMN wire_at_ms INTEGER")
        }
        // Several `herald serve` instances: each beats its row in `herald_instance`; the
        // rows that stop beating are taken for dead and the leases of their claimant released.
        // `job_item_leased` (partial: only leased items) serves lease renewal, the release of a
        // dead instance's leases and the count of items each instance holds.
        migrator.registerMigration("v7-instances") { db in
            try db.execute(
                sql: """
                    CREATE TABLE herald_instance (
                        id TEXT PRIMARY KEY,
                        claimant TEXT NOT NULL,
                        host TEXT NOT NULL,
                        pid INTEGER NOT NULL,
                        started_at_ms INTEGER NOT NULL,
                        last_heartbeat_ms INTEGER NOT NULL
                    ) WITHOUT ROWID;
                    CREATE INDEX job_item_leased ON job_item (claimant, tenant, job_id) WHERE claimant IS NOT NULL;
                    """)
        }
        // The PostgreSQL store's v8 stores a batch's payloads once (`job_payload`, `payload_ref`),
        // which this store's v3 does already: nothing to change here. Registered so that both
        // backends' schema versions keep the same names and order.
        migrator.registerMigration("v8-shared-payloads") { _ in }
        // The batch path's lean item shape. It drops the full indexes whose text-keyed entries
        // every outcome rewrites (`job_item_by_state`, `job_item_outcomes`, `job_item_due`, each
        // with the item's state) and spares each report poll a count of the whole job:
        // - `job_outcome` counts a job's outcomes by (state, status, reason), filled from the
        //   outcomes recorded so far and updated in the transaction that records each new one: a
        //   report reads a few rows, whatever the job's size;
        // - the claim, retry and failed-item indexes are partial: only pending items are in
        //   `job_item_pending`, only `retrying` ones in `job_item_due`, only failed ones in
        //   `job_item_failed`. An item that is sent leaves one index (and enters none).
        migrator.registerMigration("v9-lean-job-items") { db in
            try db.execute(
                sql: """
                    CREATE TABLE job_outcome (
                        tenant TEXT NOT NULL,
                        job_id TEXT NOT NULL,
                        state TEXT NOT NULL,
                        status INTEGER,
                        reason TEXT,
                        n INTEGER NOT NULL,
                        FOREIGN KEY (tenant, job_id) REFERENCES job (tenant, id) ON DELETE CASCADE
                    );
                    CREATE INDEX job_outcome_by_job ON job_outcome (tenant, job_id, state, status, reason);
                    INSERT INTO job_outcome (tenant, job_id, state, status, reason, n)
                        SELECT tenant, job_id, state, status, reason, count(*) FROM job_item
                        WHERE state IN ('sent', 'failed', 'unknown')
                        GROUP BY tenant, job_id, state, status, reason;
                    DROP INDEX job_item_by_state;
                    DROP INDEX job_item_outcomes;
                    DROP INDEX job_item_due;
                    CREATE INDEX job_item_pending ON job_item (tenant, job_id, idx) WHERE state = 'pending';
                    CREATE INDEX job_item_due ON job_item (tenant, job_id, next_attempt_ms) WHERE state = 'retrying';
                    CREATE INDEX job_item_failed ON job_item (tenant, job_id, idx) WHERE state = 'failed';
                    """)
        }
        // The batch item shape: chunk rows of notifications written by the POST, one
        // bit per settled item, the plain successes of a commit group as one row, a row of its
        // own only for an item with more to keep, one lease per claimant and job; items keyed by
        // the job's integer key (`job.item_key`). Jobs stored before are rewritten into it.
        // See `ItemChunks.swift` and `SQLitePushStore+BatchItemsMigration.swift`.
        migrator.registerMigration("v10-sqlite-batch-items") { db in try Self.migrateToBatchItems(db) }
        // A job's end told once (`JobEndLedger`): `end_told_ms` is set in the transaction that
        // queues the job's end event, and the untold ends are found through a partial index that
        // holds only them. Jobs that ended before this version count as told (their end was told
        // then, or not at all: telling it now would be late news).
        migrator.registerMigration("v11-job-end-told") { db in
            try db.execute(
                sql: """
                    ALTER TABLE job ADD COLUMN end_told_ms INTEGER;
                    UPDATE job SET end_told_ms = updated_at_ms WHERE state IN ('finished', 'cancelled');
                    CREATE INDEX job_end_untold ON job (updated_at_ms)
                        WHERE end_told_ms IS NULL AND state IN ('finished', 'cancelled');
                    """)
        }
        // APNs' apns-unique-id of an item's answer (the development environment's delivery-log
        // key), kept in the item's row; a plain success without one stays a `job_sent` record.
        migrator.registerMigration("v12-item-unique-id") { db in
            try db.execute(sql: "ALTER TABLE job_item ADD COLUMN result_unique_id TEXT")
        }
        // Admin accounts (a console password as its bcrypt hash, failed logins and a lock), their
        // tokens (kept as SHA-256) and the audit log (`AdminDirectory`).
        migrator.registerMigration("v13-admin-accounts") { db in
            try db.execute(
                sql: """
                    CREATE TABLE admin_account (
                        name TEXT PRIMARY KEY NOT NULL,
                        role TEXT NOT NULL,
                        created_at_ms INTEGER NOT NULL,
                        password_hash TEXT,
                        failed_logins INTEGER NOT NULL DEFAULT 0,
                        locked_until_ms INTEGER
                    ) WITHOUT ROWID;
                    CREATE TABLE admin_token (
                        id TEXT PRIMARY KEY NOT NULL,
                        account TEXT NOT NULL REFERENCES admin_account (name) ON DELETE CASCADE,
                        name TEXT NOT NULL,
                        sha256 TEXT NOT NULL UNIQUE,
                        created_at_ms INTEGER NOT NULL,
                        expires_at_ms INTEGER,
                        revoked_at_ms INTEGER
                    ) WITHOUT ROWID;
                    CREATE INDEX admin_token_by_account ON admin_token (account, created_at_ms);
                    CREATE TABLE audit_log (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        at_ms INTEGER NOT NULL,
                        account TEXT NOT NULL,
                        source TEXT,
                        request_id TEXT,
                        action TEXT NOT NULL,
                        tenant TEXT,
                        object TEXT,
                        details TEXT NOT NULL
                    );
                    CREATE INDEX audit_log_by_at ON audit_log (at_ms);
                    CREATE INDEX audit_log_by_tenant ON audit_log (tenant, id);
                    CREATE INDEX audit_log_by_account ON audit_log (account, id);
                    """)
        }
        // Usage per tenant and hour (`UsageLedger`): each instance adds what it counted.
        migrator.registerMigration("v14-usage") { db in
            try db.execute(
                sql: """
                    CREATE TABLE usage_hour (
                        tenant TEXT NOT NULL,
                        hour_ms INTEGER NOT NULL,
                        kind TEXT NOT NULL,
                        count INTEGER NOT NULL,
                        PRIMARY KEY (tenant, hour_ms, kind)
                    ) WITHOUT ROWID;
                    CREATE INDEX usage_hour_by_hour ON usage_hour (hour_ms);
                    """)
        }
        migrator.registerMigration("v15-channels") { db in
            try db.execute(
                sql: """
                    CREATE TABLE channel (
                        tenant TEXT NOT NULL,
                        environment TEXT NOT NULL,
                        id TEXT NOT NULL,
                        bundle_id TEXT NOT NULL,
                        storage_policy INTEGER NOT NULL,
                        label TEXT,
                        created_ms INTEGER NOT NULL,
                        PRIMARY KEY (tenant, environment, id)
                    ) WITHOUT ROWID;
                    CREATE INDEX channel_by_app ON channel (tenant, environment, bundle_id);
                    """)
        }
        return migrator
    }
}
