import Foundation
import Herald
import HeraldCore
import HeraldTestSupport
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

    @Test("the watcher service looks at each interval on its clock, reloads once the files settle, and ends when cancelled")
    func watcherService() async throws {
        try await withReloadRig { rig in
            try rig.writeTokenTenant("acme")
            try await rig.coordinator.reloadAll(trigger: .startup)
            let clock = SteppedPushClock()
            let interval = Duration.seconds(2)
            let settle = Duration.milliseconds(250)
            let watcher = TenantDirectoryWatcher(coordinator: rig.coordinator, interval: interval, settle: settle, clock: clock)
            let generation = rig.coordinator.generation
            let task = Task { try await watcher.run() }
            let firstLook = clock.now.advanced(by: interval)
            #expect(await eventually { clock.deadlines == [firstLook] }, "the watcher waits for its first look")
            try rig.writeTokenTenant("acme", keyID: "KEYB000001")

            // The change is there, but the watcher looks only at its interval: nothing before it.
            clock.advance(by: interval - .milliseconds(1))
            #expect(clock.deadlines == [firstLook])
            #expect(rig.coordinator.generation == generation)

            // It looks, sees the change, and waits for the files to settle before reloading.
            clock.advance(to: firstLook)
            let settled = firstLook.advanced(by: settle)
            #expect(await eventually { clock.deadlines == [settled] }, "sleeps: \(clock.deadlines)")
            #expect(rig.coordinator.generation == generation)
            clock.advance(to: settled)
            #expect(await eventually { rig.coordinator.generation == generation + 1 })
            #expect(rig.router.runtime(for: try TenantID("acme"))?.configuration.auth.kind == .token)
            // Then waits a whole interval from the end of that look for the next.
            #expect(await eventually { clock.deadlines.count == 1 && clock.deadlines[0] >= settled.advanced(by: interval) })

            task.cancel()
            try await task.value
            #expect(clock.deadlines.isEmpty, "cancelled: no sleep left under way")
        }
    }
}
