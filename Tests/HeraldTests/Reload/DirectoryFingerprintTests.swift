import Foundation
import Testing

@testable import Herald

@Suite("Tenant directory fingerprints")
struct DirectoryFingerprintTests {
    /// Ten seconds ahead: every file written by the test counts as settled, so its hash may be reused.
    static func later() -> Int64 { DirectoryFingerprint.wallNanoseconds() + 10_000_000_000 }

    @Test func anUnwrittenSettledFileKeepsItsStampAndAWrittenOneIsHashedAgain() throws {
        let directory = Fixtures.temporaryDirectory("fingerprint")
        let path = directory + "/acme.yaml"
        try Data("team_id: ABCDE12345\n".utf8).write(to: URL(fileURLWithPath: path))
        let first = DirectoryFingerprint.take(directory: directory, now: Self.later())
        let stamp = try #require(first.files[path])
        #expect(stamp.status != nil)
        #expect(DirectoryFingerprint.take(directory: directory, reusing: first, now: Self.later()) == first)

        // The same size and, set back, the same modification time: the change time still tells.
        let modified = try #require(try FileManager.default.attributesOfItem(atPath: path)[.modificationDate] as? Date)
        try Data("team_id: ZZZZZ99999\n".utf8).write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.modificationDate: modified], ofItemAtPath: path)
        let second = DirectoryFingerprint.take(directory: directory, reusing: first, now: Self.later())
        #expect(second != first)
        #expect(second.files[path]?.size == stamp.size)
    }

    @Test func aFileChangedInTheLastTwoSecondsIsNotTrustedByItsStatus() throws {
        let directory = Fixtures.temporaryDirectory("fingerprint-recent")
        let path = directory + "/acme.yaml"
        try Data("team_id: ABCDE12345\n".utf8).write(to: URL(fileURLWithPath: path))
        let first = DirectoryFingerprint.take(directory: directory)
        #expect(first.files[path] != nil)
        #expect(first.files[path]?.status == nil)
    }
}
