import Foundation
import Herald
import HeraldCore
import Testing

/// A tenants directory that suddenly holds no tenant file (emptied by mistake, or a volume that
/// is not mounted) must not take every customer down.
@Suite("Reload refuses to remove every tenant")
struct EmptyDirectoryReloadTests {
    @Test("an emptied directory is refused by the watcher and by a full reload; the tenants keep sending")
    func emptiedDirectoryIsRefused() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme")
            try rig.writeTokenTenant("beta", keyID: "KEYB000001")
            try await rig.coordinator.reloadAll(trigger: .startup)
            let before = Set(rig.router.tenantIDs)
            #expect(before.count == 2)

            let watcher = TenantDirectoryWatcher(
                coordinator: rig.coordinator, interval: .milliseconds(50), settle: .milliseconds(10))
            try FileManager.default.removeItem(atPath: rig.path("acme.yaml"))
            try FileManager.default.removeItem(atPath: rig.path("beta.yaml"))

            // The watcher sees the change, the reload is refused, and it is not retried (nor
            // logged again) until the directory changes once more.
            #expect(await watcher.checkOnce() == nil)
            #expect(Set(rig.router.tenantIDs) == before)
            #expect(await watcher.checkOnce() == nil)

            // A full reload asked for directly is refused the same way, with a clear reason.
            let error = await #expect(throws: ReloadError.self) {
                try await rig.coordinator.reloadAll(trigger: .api)
            }
            #expect(error?.isWouldRemoveEveryTenant == true)
            #expect(error?.description.contains("holds no tenant file") == true)
            #expect(Set(rig.router.tenantIDs) == before)

            // The tenants still send.
            #expect(try await rig.router.send(tenant: try TenantID("acme"), notification: rig.note(1)).status == 200)

            // Removing tenants one at a time still works: bring one back, then the other goes.
            try rig.writeTokenTenant("acme")
            let report = try #require(await watcher.checkOnce())
            #expect(report.removed == [try TenantID("beta")])
            #expect(rig.router.tenantIDs == [try TenantID("acme")])
        }
    }

    @Test("a first load of an empty directory is no error (nothing runs yet)")
    func emptyAtStartup() async throws {
        try await withReloadRig { rig in
            let report = try await rig.coordinator.reloadAll(trigger: .startup)
            #expect(report.added.isEmpty)
            #expect(rig.router.tenantIDs.isEmpty)
        }
    }
}
