import Foundation
import Herald
import HeraldCore
import Synchronization
import Testing

/// Appends its name to a shared log before and after the rest of the pipeline.
struct TraceMiddleware: PushMiddleware {
    let name: String
    let log: Mutex<[String]>.Box

    func willSend(_ notification: AdmittedNotification, context: PushContext) throws -> PushDecision {
        log.append("\(name)>\(context.attempt)")
        return .proceed
    }

    func didSend(
        _ notification: AdmittedNotification, context: PushContext, startedAt: PushInstant,
        outcome: Result<PushResult, any Error>
    ) -> PushFollowUp? {
        log.append("<\(name)")
        return nil
    }
}

extension Mutex where Value == [String] {
    /// A reference to a shared, locked list of strings.
    final class Box: Sendable {
        private let mutex = Mutex<[String]>([])
        func append(_ s: String) { mutex.withLock { $0.append(s) } }
        var values: [String] { mutex.withLock { $0 } }
    }
}

struct TraceFactory: PluginFactory {
    let name: String
    let log: Mutex<[String]>.Box
    func make(options: JSONValue, environment: PluginEnvironment) throws(PluginOptionError) -> any PushMiddleware {
        _ = try PluginOptions(options, allowed: [])
        return TraceMiddleware(name: name, log: log)
    }
}

@Suite("Send pipeline")
struct PipelineTests {
    @Test("middlewares run in the order given, the first outermost, ending in the terminal")
    func order() async throws {
        let log = Mutex<[String]>.Box()
        let pipeline = SendPipeline([
            TraceMiddleware(name: "a", log: log), TraceMiddleware(name: "b", log: log),
            TraceMiddleware(name: "c", log: log),
        ]) { notification, context, completion in
            log.append("wire")
            completion(.success(APNsResponse(status: 200, apnsID: notification.id)))
        }
        let result = try await pipeline.send(
            Fixtures.admitted(),
            context: PushContext(tenant: Fixtures.tenantID("t"), environment: .production, deadline: .now + .seconds(5)))
        #expect(result.isSuccess)
        #expect(log.values == ["a>1", "b>1", "c>1", "wire", "<c", "<b", "<a"])
    }

    @Test("a tenant's plugins run in its YAML order, and every resend of the retry passes through all of them, wherever retry is listed")
    func tenantOrder() async throws {
        let log = Mutex<[String]>.Box()
        var registry = PluginRegistry()
        registry.register(TraceFactory(name: "one", log: log))
        registry.register(TraceFactory(name: "two", log: log))
        let transports = ScriptedTransports { _ in
            ScriptedTransport([.respond(status: 503, reason: .serviceUnavailable)])
        }
        let router = try Fixtures.router(transports: transports, registry: registry)
        await router.install([
            Fixtures.tenant("outer", plugins: [Fixtures.plugin("two"), Fixtures.plugin("one")]),
            Fixtures.tenant(
                "inner",
                plugins: [
                    Fixtures.plugin("two"), Fixtures.plugin("retry", .obj(["max_attempts": .int(2)])),
                    Fixtures.plugin("one"),
                ]),
        ])
        let outer = try await router.send(tenant: Fixtures.tenantID("outer"), notification: Fixtures.note())
        #expect(outer.isSuccess && outer.attempts == 2)
        // Default retry wraps everything: each attempt passes through both plugins.
        #expect(log.values == ["two>1", "one>1", "<one", "<two", "two>2", "one>2", "<one", "<two"])

        let innerLog = log.values.count
        let inner = try await router.send(tenant: Fixtures.tenantID("inner"), notification: Fixtures.note())
        #expect(inner.isSuccess && inner.attempts == 2)
        // Retry listed between them sets its options only: the router resends around the pipeline.
        #expect(Array(log.values.dropFirst(innerLog)) == ["two>1", "one>1", "<one", "<two", "two>2", "one>2", "<one", "<two"])
    }

    @Test("the context names the tenant and environment, and the apns-id is set before the pipeline")
    func context() async throws {
        let seen = Mutex<[String]>.Box()
        struct Probe: PushMiddleware {
            let seen: Mutex<[String]>.Box
            func willSend(_ notification: AdmittedNotification, context: PushContext) throws -> PushDecision {
                seen.append(
                    "\(context.tenant) \(context.environment) \(context.logger[metadataKey: "herald.apns-id"] == notification.id.rawValue)"
                )
                return .proceed
            }
        }
        struct ProbeFactory: PluginFactory {
            let seen: Mutex<[String]>.Box
            let name = "probe"
            func make(options: JSONValue, environment: PluginEnvironment) throws(PluginOptionError)
                -> any PushMiddleware
            { Probe(seen: seen) }
        }
        var registry = PluginRegistry()
        registry.register(ProbeFactory(seen: seen))
        let router = try Fixtures.router(registry: registry)
        await router.install([
            Fixtures.tenant("ctx", plugins: [Fixtures.plugin("probe")], defaultEnvironment: .development)
        ])
        _ = try await router.send(tenant: Fixtures.tenantID("ctx"), notification: Fixtures.note())
        _ = try await router.send(
            tenant: Fixtures.tenantID("ctx"), notification: Fixtures.note(), environment: .production)
        #expect(seen.values == ["ctx development true", "ctx production true"])
    }

    @Test("a send's logger names the apns-id in what it logs and reads, and it can be changed or removed")
    func loggerNotificationID() throws {
        final class Logged: Sendable {
            let entries = Mutex<[[String: String]]>([])
            func append(_ metadata: [String: String]) { entries.withLock { $0.append(metadata) } }
            var values: [[String: String]] { entries.withLock { $0 } }
        }
        let logged = Logged()
        var logger = PushLogger(minimumLevel: .debug, metadata: ["herald.tenant": "acme"]) { _, _, metadata in
            logged.append(metadata)
        }
        logger[metadataKey: "herald.plugin"] = "probe"
        let id = try NotificationID("3f6c4d8e-2a1b-4c5d-8e9f-0a1b2c3d4e5f")
        var named = logger.withNotificationID(id)
        named.info("sent", metadata: ["herald.status": "200"])
        named.debug("plain")
        logger.info("without")
        #expect(named[metadataKey: "herald.apns-id"] == id.rawValue)
        #expect(named.metadata == ["herald.tenant": "acme", "herald.plugin": "probe", "herald.apns-id": id.rawValue])
        #expect(logger[metadataKey: "herald.apns-id"] == nil)
        named[metadataKey: "herald.apns-id"] = "other"
        #expect(named[metadataKey: "herald.apns-id"] == "other")
        named[metadataKey: "herald.apns-id"] = nil
        #expect(named.metadata == ["herald.tenant": "acme", "herald.plugin": "probe"])
        #expect(
            logged.values == [
                ["herald.tenant": "acme", "herald.plugin": "probe", "herald.apns-id": id.rawValue, "herald.status": "200"],
                ["herald.tenant": "acme", "herald.plugin": "probe", "herald.apns-id": id.rawValue],
                ["herald.tenant": "acme", "herald.plugin": "probe"],
            ])
    }
}
