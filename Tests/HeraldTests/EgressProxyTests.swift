import APNsSandbox
import Foundation
import Herald
import HeraldAPNs
import HeraldCore
import HeraldTestSupport
import Testing

/// Tenants that reach APNs (the sandbox) through a real outbound proxy: tinyproxy for HTTP
/// CONNECT, dante for SOCKS5. TLS to the sandbox runs inside the tunnel unchanged.
@Suite("Outbound proxies: HTTP CONNECT and SOCKS5")
struct EgressProxyTests {
    static let tinyproxyRuns = LocalProxy.tinyproxyPath != nil || LocalProxy.required
    static let danteRuns = LocalProxy.dantePath != nil || LocalProxy.required

    static func proxied(_ tenant: TenantConfiguration, _ proxy: EgressProxy) -> TenantConfiguration {
        var tenant = tenant
        tenant.proxy = .proxy(proxy)
        return tenant
    }

    static func http(_ local: LocalProxy, user: String? = nil, password: String? = nil) -> EgressProxy {
        EgressProxy(
            scheme: .http, host: "127.0.0.1", port: local.port, username: user,
            password: password.map { Secret(bytes: Array($0.utf8), origin: "test password") })
    }

    /// The tunnels the proxy's log shows to the sandbox's port.
    static func tunnels(_ local: LocalProxy, to port: Int) -> Int {
        local.log.components(separatedBy: "\n").filter { $0.contains("CONNECT 127.0.0.1:\(port) ") }.count
    }

    @Test(
        "through tinyproxy: sends succeed in a tunnel the proxy's log shows; a tenant with proxy none in the same process connects directly",
        .enabled(if: tinyproxyRuns, "tinyproxy is not installed"))
    func httpConnect() async throws {
        let local = try LocalProxy.tinyproxy()
        defer { local.stop() }
        try await withSandboxRig { rig in
            let proxied = Self.proxied(try rig.tenant("acme"), Self.http(local))
            var direct = try rig.tenant("direct")
            direct.proxy = .direct
            await rig.router.install([proxied, direct])
            for seed in 0..<5 {
                #expect(try await rig.router.send(tenant: proxied.id, notification: rig.note(seed)).isSuccess)
            }
            #expect(try await rig.router.send(tenant: direct.id, notification: rig.note(9)).isSuccess)
            #expect(rig.sandbox.requests.filter(\.delivered).count == 6)
            #expect(Self.tunnels(local, to: rig.sandbox.port) == 1, "one connection for five sends, none for the direct tenant: \(local.log)")
        }
    }

    @Test(
        "a wrong proxy password fails the send naming the proxy and the refused credentials, never the password; the right one, reloaded, sends",
        .enabled(if: tinyproxyRuns, "tinyproxy is not installed"))
    func basicAuthentication() async throws {
        let local = try LocalProxy.tinyproxy(credentials: ("herald", "right-proxy-password"))
        defer { local.stop() }
        try await withSandboxRig { rig in
            let base = try rig.tenant("acme")
            await rig.router.install([Self.proxied(base, Self.http(local, user: "herald", password: "wrong-proxy-password"))])
            do {
                _ = try await rig.router.send(tenant: base.id, notification: rig.note(1))
                Issue.record("a send through a proxy that refused the credentials went out")
            } catch let error as PushError {
                let text = "\(error)"
                #expect(error.code == .transport && !error.mayHaveReachedAPNs, "\(text)")
                #expect(text.contains("http://127.0.0.1:\(local.port)") && text.contains("the proxy refused the username and password"), "\(text)")
                #expect(!text.contains("wrong-proxy-password") && !text.contains("herald:"), "\(text)")
            }
            #expect(rig.sandbox.requests.isEmpty)
            let health = try #require(rig.router.runtime(for: base.id)?.transport.status)
            #expect(health.lastError?.contains("refused the username and password") == true, "\(health)")
            #expect(health.lastError?.contains("wrong-proxy-password") == false)
            #expect((health.proxyFailures["authenticationRequired"] ?? 0) >= 1, "\(health.proxyFailures)")

            await rig.router.install([Self.proxied(base, Self.http(local, user: "herald", password: "right-proxy-password"))])
            #expect(try await rig.router.send(tenant: base.id, notification: rig.note(2)).isSuccess)
            #expect(rig.sandbox.requests.filter(\.delivered).count == 1)
        }
    }

    @Test(
        "a tenant file's proxy password file, wrong then fixed: the reload reads the file again and sending resumes",
        .enabled(if: tinyproxyRuns, "tinyproxy is not installed"))
    func passwordFixedByReload() async throws {
        let local = try LocalProxy.tinyproxy(credentials: ("herald", "right-proxy-password"))
        defer { local.stop() }
        let rig = try await ReloadRig.start()
        do {
            try rig.write("wrong-proxy-password\n", to: "proxy.password")
            try rig.writeTokenTenant(
                "acme",
                extra: """
                    proxy:
                      url: http://127.0.0.1:\(local.port)
                      username: herald
                      password: file:proxy.password
                    """)
            #expect(try await rig.coordinator.reloadAll().failures.isEmpty)
            let tenant = try TenantID("acme")
            do {
                _ = try await rig.router.send(tenant: tenant, notification: rig.note(1))
                Issue.record("a send through a proxy that refused the credentials went out")
            } catch let error as PushError {
                #expect("\(error)".contains("the proxy refused the username and password"), "\(error)")
                #expect(!"\(error)".contains("wrong-proxy-password"), "\(error)")
            }
            #expect(rig.sandbox.requests.isEmpty)
            #expect(rig.router.runtime(for: tenant)?.transport.status.proxyFailures["authenticationRequired"] ?? 0 >= 1)

            try rig.write("right-proxy-password\n", to: "proxy.password")
            let report = try await rig.coordinator.reloadAll()
            #expect(report.failures.isEmpty, "\(report.failures)")
            #expect(try await rig.router.send(tenant: tenant, notification: rig.note(2)).isSuccess)
            #expect(rig.sandbox.requests.filter(\.delivered).count == 1)
        } catch {
            await rig.shutdown()
            throw error
        }
        await rig.shutdown()
    }

    @Test(
        "a proxy that refuses the target port (403) and one that is not there are told apart",
        .enabled(if: tinyproxyRuns, "tinyproxy is not installed"))
    func refusedAndUnreachable() async throws {
        let local = try LocalProxy.tinyproxy(connectPorts: [443])
        defer { local.stop() }
        // Held for the whole test: a port that refuses connections, which no other test's listener can take.
        let closed = try LocalProxy.ClosedPort()
        try await withSandboxRig { rig in
            let refused = Self.proxied(try rig.tenant("refused"), Self.http(local))
            let nowhere = Self.proxied(
                try rig.tenant("nowhere"), EgressProxy(scheme: .http, host: "127.0.0.1", port: closed.port))
            await rig.router.install([refused, nowhere])
            for (tenant, expected) in [(refused.id, "403"), (nowhere.id, "cannot connect to the proxy")] {
                do {
                    _ = try await rig.router.send(tenant: tenant, notification: rig.note(1))
                    Issue.record("\(tenant): a send went out")
                } catch let error as PushError {
                    #expect("\(error)".contains(expected), "\(tenant): \(error)")
                }
            }
            #expect(rig.sandbox.requests.isEmpty)
        }
        withExtendedLifetime(closed) {}
    }

    @Test("through dante: SOCKS5 with the APNs host named to the proxy", .enabled(if: danteRuns, "danted is not installed"))
    func socks5() async throws {
        let local = try LocalProxy.dante()
        defer { local.stop() }
        try await withSandboxRig { rig in
            let tenant = Self.proxied(
                try rig.tenant("acme"), EgressProxy(scheme: .socks5, host: "127.0.0.1", port: local.port))
            await rig.router.install([tenant])
            for seed in 0..<3 {
                #expect(try await rig.router.send(tenant: tenant.id, notification: rig.note(seed)).isSuccess)
            }
            #expect(rig.sandbox.requests.filter(\.delivered).count == 3)
            #expect(local.log.contains("127.0.0.1.\(rig.sandbox.port)"), "the proxy's log shows the tunnel: \(local.log)")
        }
    }

    @Test(
        "webhooks leave through webhooks.proxy; a private target the tenant does not allow is still refused, before the proxy is asked",
        .enabled(if: tinyproxyRuns, "tinyproxy is not installed"))
    func webhooksThroughAProxy() async throws {
        let local = try LocalProxy.tinyproxy()
        defer { local.stop() }
        let server = try await WebhookTestServer()
        let sender = HTTPWebhookSender(proxy: Self.http(local))
        do {
            let body = Array(#"{"event":"device_token.invalid"}"#.utf8)
            let allowed = WebhookRequest(
                url: server.url, headers: ["Content-Type": "application/json"], body: body, timeout: .seconds(10),
                allowPrivateAddresses: true)
            #expect(try await sender.post(allowed) == 200)
            #expect(server.received.map(\.body) == [body])
            let requests = local.log.components(separatedBy: "\n").filter { $0.contains("Request (file descriptor") }
            #expect(requests.count == 1 && requests[0].contains("127.0.0.1:\(server.port)"), "\(local.log)")

            var refused = allowed
            refused.allowPrivateAddresses = false
            await #expect(throws: WebhookError.self) { _ = try await sender.post(refused) }
            #expect(server.received.count == 1)
            #expect(local.log.components(separatedBy: "\n").filter { $0.contains("Request (file descriptor") }.count == 1)
        } catch {
            try await server.shutdown()
            throw error
        }
        try await server.shutdown()
    }

    @Test("no_proxy: a bypassed host is reached directly, names and domains matched as NO_PROXY does")
    func bypass() {
        var proxy = EgressProxy(scheme: .http, host: "proxy", port: 3128, bypass: ["localhost", ".internal", "example.org", "[::1]"])
        #expect(!proxy.applies(to: "localhost") && !proxy.applies(to: "LOCALHOST."))
        #expect(!proxy.applies(to: "apns.internal") && !proxy.applies(to: "a.b.internal"))
        #expect(!proxy.applies(to: "example.org") && !proxy.applies(to: "api.example.org"))
        #expect(!proxy.applies(to: "::1"))
        #expect(proxy.applies(to: "api.push.apple.com") && proxy.applies(to: "notexample.org"))
        proxy.bypass = ["*"]
        #expect(!proxy.applies(to: "api.push.apple.com"))
        #expect(proxy.address == "http://proxy:3128")
        #expect(EgressProxy(scheme: .socks5, host: "::1", port: 1080).address == "socks5://[::1]:1080")
    }
}

/// Endpoints given as IPv6 literals (`https://[::1]:PORT`), directly and through a proxy.
@Suite("IPv6 endpoints")
struct IPv6EndpointTests {
    static func onLoopbackV6(_ tenant: TenantConfiguration, port: Int) throws -> TenantConfiguration {
        var tenant = tenant
        let endpoint = try #require(APNsEndpoint(url: "https://[::1]:\(port)"))
        #expect(endpoint.host == "::1" && endpoint.url == "https://[::1]:\(port)")
        tenant.endpoints.production = endpoint
        tenant.endpoints.development = endpoint
        return tenant
    }

    @Test("the sandbox on [::1]: a tenant whose endpoint is https://[::1]:PORT sends")
    func direct() async throws {
        try await withSandboxRig(configure: { $0.host = "::1" }) { rig in
            let tenant = try Self.onLoopbackV6(try rig.tenant("acme"), port: rig.sandbox.port)
            await rig.router.install([tenant])
            #expect(try await rig.router.send(tenant: tenant.id, notification: rig.note(1)).isSuccess)
            #expect(rig.sandbox.requests.filter(\.delivered).count == 1)
        }
    }

    @Test(
        "an IPv6 endpoint through an HTTP CONNECT proxy: the CONNECT names [::1]:PORT",
        .enabled(if: EgressProxyTests.tinyproxyRuns, "tinyproxy is not installed"))
    func throughAProxy() async throws {
        let local = try LocalProxy.tinyproxy()
        defer { local.stop() }
        try await withSandboxRig(configure: { $0.host = "::1" }) { rig in
            var tenant = try Self.onLoopbackV6(try rig.tenant("acme"), port: rig.sandbox.port)
            tenant.proxy = .proxy(EgressProxyTests.http(local))
            await rig.router.install([tenant])
            #expect(try await rig.router.send(tenant: tenant.id, notification: rig.note(1)).isSuccess)
            #expect(local.log.contains("CONNECT [::1]:\(rig.sandbox.port) "), "\(local.log)")
        }
    }
}

/// A batch whose proxy dies and comes back while the job runs.
@Suite("Outbound proxies: the proxy killed mid-batch")
struct EgressProxyOutageTests {
    @Test(
        "tinyproxy killed mid-batch and started again: the job finishes, every device delivered, duplicates within the sends in flight",
        .enabled(if: EgressProxyTests.tinyproxyRuns, "tinyproxy is not installed"))
    func proxyKilledMidBatch() async throws {
        var local = try LocalProxy.tinyproxy()
        let port = local.port
        defer { local.stop() }
        try await withSandboxRig { rig in
            let tenant = EgressProxyTests.proxied(try DeliveryRun.tenant(rig, "acme"), EgressProxyTests.http(local))
            await rig.router.install([tenant])
            let count = 3_000
            let concurrency = 50
            let job = try await DeliveryRun.createJob(rig, tenant: tenant.id, id: "through-proxy", count: count, seed: 5_000)
            let runner = DeliveryRun.runner(rig, concurrency: concurrency)
            async let running: Void = runner.run()
            while rig.sandbox.requests.count < 500 { try await Task.sleep(for: .milliseconds(10)) }
            local.stop()
            let atKill = rig.sandbox.requests.count
            // Down until sends have failed and been deferred, then the proxy is back on its port.
            var deferred = 0
            for _ in 0..<6_000 where deferred == 0 {
                deferred = try await rig.store.progress(tenant: tenant.id, job: job.id)?.retrying ?? 0
                if deferred == 0 { try await Task.sleep(for: .milliseconds(10)) }
            }
            #expect(deferred > 0, "no send was deferred while the proxy was down")
            local = try LocalProxy.tinyproxy(port: port)
            let progress = try await DeliveryRun.waitFinished(rig, tenant: tenant.id, job: job.id, timeout: .seconds(600))
            runner.stop()
            await running

            #expect(atKill < count, "the kill came mid-batch")
            #expect(progress.sent == count && progress.failed == 0 && progress.pending == 0, "\(progress)")
            let delivered = DeliveryRun.byDevice(rig).mapValues { $0.filter(\.delivered).count }
            #expect(delivered.count == count && delivered.values.allSatisfy { $0 >= 1 })
            let twice = delivered.values.filter { $0 > 1 }.count
            #expect(twice <= concurrency, "devices delivered twice: \(twice), at most the sends in flight at the kill")
            #expect(EgressProxyTests.tunnels(local, to: rig.sandbox.port) >= 1, "the restarted proxy carried the rest")
        }
    }
}
