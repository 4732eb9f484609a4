import Foundation
import Testing

@testable import HeraldStore

/// Admin accounts, their tokens and the audit log, on both backends.
@Suite("Admin directory")
struct AdminDirectoryTests {
    let t0 = Date(timeIntervalSince1970: 1_700_000_000)

    @Test("accounts: created once, listed by name, role changed, deleted with their tokens", arguments: StoreBackend.allCases)
    func accounts(_ backend: StoreBackend) async throws {
        try await backend.withServerStore { store in
            #expect(try await store.createAdminAccount(AdminAccount(name: "zoe", role: .viewer, createdAt: t0)))
            #expect(try await store.createAdminAccount(AdminAccount(name: "ann", role: .owner, createdAt: t0)))
            #expect(try await !store.createAdminAccount(AdminAccount(name: "ann", role: .viewer, createdAt: t0)))
            #expect(try await store.adminAccounts().map(\.name) == ["ann", "zoe"])
            #expect(try await store.adminAccount(named: "ann")?.role == .owner)
            #expect(try await store.adminAccount(named: "ann")?.createdAt == t0)
            #expect(try await store.setAdminRole(.operator, account: "zoe"))
            #expect(try await !store.setAdminRole(.operator, account: "nobody"))
            #expect(try await store.adminAccount(named: "zoe")?.role == .operator)

            let token = AdminTokenRecord(id: "at_0000000000000001", account: "zoe", name: "laptop", createdAt: t0, expiresAt: nil)
            try await store.addAdminToken(token, sha256: String(repeating: "a", count: 64))
            #expect(try await store.deleteAdminAccount(named: "zoe"))
            #expect(try await !store.deleteAdminAccount(named: "zoe"))
            #expect(try await store.adminTokens(account: "zoe").isEmpty)
            #expect(try await store.authenticateAdminToken(sha256: String(repeating: "a", count: 64), now: t0) == nil)
            await #expect(throws: StoreError.self) {
                try await store.addAdminToken(token, sha256: String(repeating: "b", count: 64))
            }
        }
    }

    @Test("tokens: found by their SHA-256 while valid; an expired or revoked one is not", arguments: StoreBackend.allCases)
    func tokens(_ backend: StoreBackend) async throws {
        try await backend.withServerStore { store in
            _ = try await store.createAdminAccount(AdminAccount(name: "ops", role: .operator, createdAt: t0))
            let lasting = AdminTokenRecord(id: "at_00000000000000a1", account: "ops", name: "ci", createdAt: t0, expiresAt: nil)
            let brief = AdminTokenRecord(
                id: "at_00000000000000a2", account: "ops", name: "brief", createdAt: t0.addingTimeInterval(1),
                expiresAt: t0.addingTimeInterval(60))
            try await store.addAdminToken(lasting, sha256: String(repeating: "1", count: 64))
            try await store.addAdminToken(brief, sha256: String(repeating: "2", count: 64))
            #expect(try await store.adminTokens(account: "ops").map(\.id) == [brief.id, lasting.id])

            let found = try #require(try await store.authenticateAdminToken(sha256: String(repeating: "1", count: 64), now: t0))
            #expect(found.0.name == "ops" && found.0.role == .operator && found.1 == lasting)
            #expect(try await store.authenticateAdminToken(sha256: String(repeating: "2", count: 64), now: t0.addingTimeInterval(59)) != nil)
            #expect(try await store.authenticateAdminToken(sha256: String(repeating: "2", count: 64), now: t0.addingTimeInterval(60)) == nil)
            #expect(try await store.authenticateAdminToken(sha256: String(repeating: "3", count: 64), now: t0) == nil)

            #expect(try await store.revokeAdminToken(account: "ops", id: lasting.id, at: t0.addingTimeInterval(5)))
            #expect(try await !store.revokeAdminToken(account: "ops", id: lasting.id, at: t0.addingTimeInterval(6)))
            #expect(try await !store.revokeAdminToken(account: "other", id: brief.id, at: t0))
            #expect(try await store.authenticateAdminToken(sha256: String(repeating: "1", count: 64), now: t0) == nil)
            let listed = try await store.adminTokens(account: "ops")
            #expect(listed.first { $0.id == lasting.id }?.revokedAt == t0.addingTimeInterval(5))
        }
    }

    @Test("audit: appended in order, filtered, paged newest first, pruned by age", arguments: StoreBackend.allCases)
    func audit(_ backend: StoreBackend) async throws {
        try await backend.withServerStore { store in
            var ids: [Int64] = []
            for index in 0..<5 {
                ids.append(
                    try await store.appendAudit(
                        AuditEntry(
                            at: t0.addingTimeInterval(Double(index)), account: index.isMultiple(of: 2) ? "ann" : "bob",
                            source: "192.0.2.\(index)", requestID: "req-\(index)",
                            action: index < 3 ? "tenant.update" : "api_key.create", tenant: index == 4 ? "globex" : "acme",
                            object: index == 3 ? "ci" : nil, details: ["topics": "com.acme.\(index)", "note": "ü \"quoted\""])))
            }
            #expect(ids == ids.sorted() && Set(ids).count == 5)

            let all = try await store.auditEntries(AuditQuery())
            #expect(all.map(\.id) == ids.reversed())
            let third = try #require(all.first { $0.id == ids[3] })
            #expect(third.account == "bob" && third.source == "192.0.2.3" && third.requestID == "req-3")
            #expect(third.action == "api_key.create" && third.tenant == "acme" && third.object == "ci")
            #expect(third.details == ["topics": "com.acme.3", "note": "ü \"quoted\""] && third.at == t0.addingTimeInterval(3))

            #expect(try await store.auditEntries(AuditQuery(tenant: "globex")).map(\.id) == [ids[4]])
            #expect(try await store.auditEntries(AuditQuery(account: "bob")).map(\.id) == [ids[3], ids[1]])
            #expect(try await store.auditEntries(AuditQuery(action: "tenant.update", limit: 2)).map(\.id) == [ids[2], ids[1]])
            #expect(
                try await store.auditEntries(AuditQuery(action: "tenant.update", before: ids[1])).map(\.id) == [ids[0]])
            #expect(
                try await store.auditEntries(AuditQuery(from: t0.addingTimeInterval(1), to: t0.addingTimeInterval(3)))
                    .map(\.id) == [ids[2], ids[1]])

            #expect(try await store.pruneAudit(before: t0.addingTimeInterval(2)) == 2)
            #expect(try await store.auditEntries(AuditQuery()).map(\.id) == [ids[4], ids[3], ids[2]])
        }
    }

    @Test func accountNames() {
        for good in ["a", "ann", "ops-team_1.x", String(repeating: "a", count: 64)] { #expect(AdminAccount.validName(good)) }
        for bad in ["", "-ann", "Ann", "a b", "a/b", "ann\u{0}", String(repeating: "a", count: 65), "é"] {
            #expect(!AdminAccount.validName(bad), "\(bad)")
        }
    }
}
