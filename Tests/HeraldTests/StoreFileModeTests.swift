import Foundation
import HeraldStore
import Testing

/// The store holds device tokens and payloads: its directory and files are the owner's alone,
/// whatever the process's umask.
@Suite("Store file modes")
struct StoreFileModeTests {
    @Test("a new data directory is 0700; the database and its WAL files are 0600 even with umask 022")
    func privateModes() async throws {
        let parent = Fixtures.temporaryDirectory("herald-store-modes")
        let directory = parent + "/data/nested"
        let previous = umask(0o022)
        defer { umask(previous) }
        let store = try SQLitePushStore(directory: directory)
        // A write makes SQLite create the -wal and -shm files.
        _ = try await store.synchronousMode()
        _ = try await store.createJob(
            tenant: Fixtures.tenantID("acme"), id: try JobID("job-modes"), environment: .production,
            notifications: [Fixtures.note()], createdAt: Date())

        #expect(try mode(directory) == 0o700)
        #expect(try mode(parent + "/data") == 0o700)
        for suffix in ["", "-wal", "-shm"] {
            let path = directory + "/herald.sqlite" + suffix
            #expect(FileManager.default.fileExists(atPath: path), "\(path)")
            #expect(try mode(path) == 0o600, "\(path)")
        }
    }

    @Test("an existing database keeps working (the file is not recreated)")
    func existingFile() async throws {
        let directory = Fixtures.temporaryDirectory("herald-store-modes")
        do {
            let store = try SQLitePushStore(directory: directory)
            _ = try await store.createJob(
                tenant: Fixtures.tenantID("acme"), id: try JobID("job-1"), environment: .production,
                notifications: [Fixtures.note()], createdAt: Date())
        }
        let reopened = try SQLitePushStore(directory: directory)
        #expect(try await reopened.job(tenant: Fixtures.tenantID("acme"), id: try JobID("job-1")) != nil)
    }

    private func mode(_ path: String) throws -> Int {
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        return ((attributes[.posixPermissions] as? NSNumber)?.intValue ?? -1) & 0o777
    }
}
