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

    @Test("every regular file two levels down is stamped, links followed, hidden ones and deeper ones left out")
    func theFilesLookedAt() throws {
        let directory = Fixtures.temporaryDirectory("fingerprint-walk")
        let manager = FileManager.default
        // Enough files to be stamped over several workers.
        for index in 0..<600 { try Data("id: t\(index)\n".utf8).write(to: URL(fileURLWithPath: "\(directory)/t\(index).yaml")) }
        try manager.createDirectory(atPath: directory + "/keys/old", withIntermediateDirectories: true)
        try manager.createDirectory(atPath: directory + "/keys/old/older", withIntermediateDirectories: true)
        try Data("k".utf8).write(to: URL(fileURLWithPath: directory + "/keys/a.p8"))
        try Data("k".utf8).write(to: URL(fileURLWithPath: directory + "/keys/old/b.p8"))
        try Data("k".utf8).write(to: URL(fileURLWithPath: directory + "/keys/old/older/c.p8"))
        try Data("h".utf8).write(to: URL(fileURLWithPath: directory + "/.hidden.yaml"))
        // A mounted secret: a hidden directory of data, reached through links.
        try manager.createDirectory(atPath: directory + "/secrets/..data", withIntermediateDirectories: true)
        try Data("s".utf8).write(to: URL(fileURLWithPath: directory + "/secrets/..data/hook"))
        try manager.createSymbolicLink(atPath: directory + "/secrets/hook", withDestinationPath: "..data/hook")
        try manager.createSymbolicLink(atPath: directory + "/linked", withDestinationPath: directory + "/keys")
        try manager.createSymbolicLink(atPath: directory + "/dangling.yaml", withDestinationPath: directory + "/nowhere")

        let fingerprint = DirectoryFingerprint.take(directory: directory, now: Self.later())
        let names = Set(fingerprint.files.keys.map { String($0.dropFirst(directory.count + 1)) })
        let expected = Set((0..<600).map { "t\($0).yaml" }).union(["keys/a.p8", "keys/old/b.p8", "secrets/hook", "linked/a.p8", "linked/old/b.p8"])
        #expect(names == expected, "\(names.symmetricDifference(expected).sorted())")
        #expect(fingerprint.files["\(directory)/t7.yaml"]?.size == "id: t7\n".utf8.count)
        #expect(DirectoryFingerprint.take(directory: directory, reusing: fingerprint, now: Self.later()) == fingerprint)
    }

    @Test("a mounted secret swapped to a new file (its link moved) shows as changed, though the old file is untouched")
    func aSwappedLinkShows() throws {
        let directory = Fixtures.temporaryDirectory("fingerprint-swap")
        let manager = FileManager.default
        for version in ["..v1", "..v2"] {
            try manager.createDirectory(atPath: "\(directory)/secrets/\(version)", withIntermediateDirectories: true)
        }
        try Data("secret-one".utf8).write(to: URL(fileURLWithPath: directory + "/secrets/..v1/hook"))
        try Data("secret-two".utf8).write(to: URL(fileURLWithPath: directory + "/secrets/..v2/hook"))
        try manager.createSymbolicLink(atPath: directory + "/secrets/..data", withDestinationPath: "..v1")
        try manager.createSymbolicLink(atPath: directory + "/secrets/hook", withDestinationPath: "..data/hook")
        let path = directory + "/secrets/hook"
        let first = DirectoryFingerprint.take(directory: directory, now: Self.later())
        let stamp = try #require(first.files[path])
        #expect(stamp.status != nil)
        #expect(DirectoryFingerprint.take(directory: directory, reusing: first, now: Self.later()) == first)

        // The way a mounted secret is updated: the `..data` link replaced, the old file kept.
        try manager.removeItem(atPath: directory + "/secrets/..data")
        try manager.createSymbolicLink(atPath: directory + "/secrets/..data", withDestinationPath: "..v2")
        let second = DirectoryFingerprint.take(directory: directory, reusing: first, now: Self.later())
        #expect(second != first)
        #expect(second.files[path]?.sha256 != stamp.sha256)
        #expect(second.files[path]?.size == stamp.size)
    }
}
