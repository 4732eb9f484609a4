import Foundation
import Herald
import HeraldCore
import Testing

/// The directory watcher (polling: modification time, size and SHA-256 per file).
@Suite("Tenants directory watcher")
struct ReloadTriggerTests {
    @Test("a changed key file, a new tenant file and a removed one each trigger a reload; no change, no reload")
    func watcherSeesChanges() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme")
            try await rig.coordinator.reloadAll(trigger: .startup)
            let watcher = TenantDirectoryWatcher(
                coordinator: rig.coordinator, interval: .milliseconds(50), settle: .milliseconds(10))
            let id = try TenantID("acme")

            #expect(await watcher.checkOnce() == nil)

            // Only the key file changes (same key ID, new bytes): the tenant is reloaded.
            try rig.write(
                "# rewritten\n" + rig.keys["KEYA000001"]!.pemRepresentation + "\n", to: "keys/AuthKey_KEYA000001.p8")
            let keyChange = try #require(await watcher.checkOnce())
            #expect(keyChange.trigger == .watcher)
            #expect(keyChange.reloaded == [id])
            #expect(await watcher.checkOnce() == nil)

            try rig.writeTokenTenant("second", keyID: "KEYB000001")
            let added = try #require(await watcher.checkOnce())
            #expect(added.added == [try TenantID("second")])
            #expect(added.unchanged == [id])

            try FileManager.default.removeItem(atPath: rig.path("second.yaml"))
            let removed = try #require(await watcher.checkOnce())
            #expect(removed.removed == [try TenantID("second")])

            // Hidden files (editor swap files, upload temporaries) are ignored.
            try rig.write("junk", to: ".acme.yaml.swp")
            #expect(await watcher.checkOnce() == nil)
        }
    }

    @Test("the watcher service reloads on its own and ends when its task is cancelled")
    func watcherService() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme")
            try await rig.coordinator.reloadAll(trigger: .startup)
            let watcher = TenantDirectoryWatcher(
                coordinator: rig.coordinator, interval: .milliseconds(20), settle: .milliseconds(5))
            let generation = rig.coordinator.generation
            let task = Task { try await watcher.run() }
            try rig.writeTokenTenant("acme", keyID: "KEYB000001")
            // Bounded wait for the poll to pick it up.
            for _ in 0..<500 where rig.coordinator.generation == generation {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(rig.coordinator.generation == generation + 1)
            #expect(rig.router.runtime(for: try TenantID("acme"))?.configuration.auth.kind == .token)
            task.cancel()
            try await task.value
        }
    }
}
