import Herald
import HeraldCore
import Testing

/// The lifecycle's own rules, which the admin API, the console and `herald tenants` share
/// because the lifecycle service applies them (their end-to-end refusals are in
/// `LifecycleAPITests` and `ConsoleLifecycleTests`).
@Suite("Tenant lifecycle rules")
struct TenantLifecycleRulesTests {
    @Test func keyNamesAreShortURLSafeWords() throws {
        for name in ["default", "backend-2", "ci.release_key", String(repeating: "k", count: 64)] {
            try TenantLifecycleRules.checkKeyName(name)
        }
        for name in ["", "a/b", "has space", "ümlaut", "a?b", String(repeating: "k", count: 65)] {
            let error = #expect(throws: TenantLifecycleError.self, "\(name)") { try TenantLifecycleRules.checkKeyName(name) }
            #expect(error?.code == .invalid && error?.field == "api_keys")
        }
    }

    @Test func topicsAreABoundedArrayOfStrings() throws {
        func field(_ topics: JSONValue?) -> String? {
            do {
                try TenantLifecycleRules.checkTopics(in: [("pool", .object([])), ("topics", topics)])
                return nil
            } catch {
                return error.field
            }
        }
        #expect(field(.array([.string("com.acme.app"), .string("com.acme.app.voip")])) == nil)
        // Taking the section out is left to the file's own check (topics are required there).
        #expect(field(nil) == nil && field(.null) == nil)
        #expect(field(.array([.string("com.acme.app"), .bool(false)])) == "topics[1]")
        #expect(field(.array([.int(7)])) == "topics[0]")
        #expect(field(.string("com.acme.app")) == "topics")
        let many = JSONValue.array((0...TenantLifecycleRules.maximumTopics).map { .string("com.acme.app\($0)") })
        #expect(field(many) == "topics")
        let most = JSONValue.array((1...TenantLifecycleRules.maximumTopics).map { .string("com.acme.app\($0)") })
        #expect(field(most) == nil)
    }
}
