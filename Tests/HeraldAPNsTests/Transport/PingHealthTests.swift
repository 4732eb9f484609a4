import APNsSandbox
import Foundation
import HeraldCore
import NIOCore
import Testing

@testable import HeraldAPNs

/// The client's PING health check end to end: a connection whose peer goes silent (no FIN, no
/// reset) is found out by an unanswered PING, closed and replaced, instead of holding the next
/// sends until their deadline.
@Suite("PING health check against APNsSandbox")
struct PingHealthTests {
    @Test("an idle connection whose peer went silent is closed after its PING goes unanswered; the next send opens a new one")
    func silentPeerIsFoundByPing() async throws {
        try await withSandbox { harness in
            let relay = try await SilentRelay.start(to: harness.sandbox.port)
            var tenant = try harness.tokenTenant(.alpha, pool: { var pool = PoolConfiguration(); pool.connections = 1; return pool }())
            let viaRelay = APNsEndpoint(host: "127.0.0.1", port: relay.port)
            tenant.endpoints.development = viaRelay
            tenant.endpoints.production = viaRelay
            let transport = try harness.transport(for: tenant) {
                $0.pingInterval = .milliseconds(300)
                // Generous: while the whole suite runs, the event loops on a PING's way through the
                // relay and the sandbox can wait seconds for a core, and only a silent peer should
                // close the connection. The silent phase below waits for it (up to about 30 s).
                $0.pingTimeout = .seconds(10)
            }

            #expect(try await transport.send(Notes.note(topic: "com.example.alpha")).status == 200)
            // Counted from here: on a loaded machine a first connection attempt through the relay
            // can outlast the connect timeout and be given up for another before the send goes out.
            let connectionsAfterSend = harness.sandbox.connectionCount
            // Idle and answering: PINGs go out and come back, the connection stays. The server's
            // three next transmissions on the idle connection are PING acknowledgements (at least
            // two, should one be a late frame of the send's).
            let relayed = relay.serverReadsRelayed
            await waitUntil { relay.serverReadsRelayed >= relayed + 3 }
            #expect(relay.serverReadsRelayed >= relayed + 3, "no PING was answered")
            #expect(transport.poolStatus.map(\.connections) == [1])
            #expect(harness.sandbox.connectionCount == connectionsAfterSend, "no connection replaced while PINGs are answered")

            relay.goSilent()
            await waitUntil { transport.poolStatus.allSatisfy { $0.connections == 0 } }
            #expect(transport.poolStatus.map(\.connections) == [0], "the silent connection is closed by its PING timeout")

            relay.resume()
            #expect(try await transport.send(Notes.note(topic: "com.example.alpha")).status == 200)
            #expect(harness.sandbox.connectionCount == connectionsAfterSend + 1, "the second send went out on a new connection")
            await transport.close()
            await relay.close()
            harness.expectCleanAudit()
        }
    }
}
