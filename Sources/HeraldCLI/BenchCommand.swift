import APNsSandbox
import ArgumentParser
import Foundation
import Herald
import HeraldAPNs
import HeraldCore
import HeraldStore
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// `herald bench`: sends N notifications for a tenant as fast as its pool allows and reports
/// rate, latency, CPU and memory.
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Send N notifications for a tenant as fast as its connection pool allows; print rate, latency, CPU and memory.",
        discussion: """
            Against the tenant's own endpoint (e.g. a running `herald sandbox`), or with --sandbox an
            in-process APNsSandbox started from --sandbox-config (its CPU time is then counted too).

              herald sandbox &                   # in another shell
              herald bench --tenant demo-token --count 100000 --connections 2 --concurrency 1000
              herald bench --tenant demo-token --count 100000 --through transport   # the engine alone
              herald bench --tenant demo-token --count 50000 --noisy-neighbor   # transports alone

            By default every notification goes through the tenant's runtime in a router (its plugins, \
            the retry, its transport), like every other send: a rate-limit plugin then limits the rate.
            """)

    @Option(help: "The tenants directory.")
    var tenants: String = "tenants"

    @Option(help: "The tenant's ID.")
    var tenant: String

    @Option(help: "How many notifications to send (after the warm-up).")
    var count: Int = 100_000

    @Option(help: "HTTP/2 connections (default: the tenant's pool.connections).")
    var connections: Int?

    @Option(help: "Notifications in flight at once.")
    var concurrency: Int = 1000

    @Option(name: .customLong("max-streams"), help: "At most this many streams per connection, whatever the server allows (default: the transport's).")
    var maxStreams: Int?

    @Option(
        name: .customLong("write-after"),
        help: "Write the requests a read of answers sends after every this many, not at the end of the read (0: at the end).")
    var writeAfter: Int?

    @Option(
        help: """
            Event-loop threads of Herald's client (default: NIO's shared group, one per core). h2load's -t counts the same \
            thing; the sandbox and the client share the machine's cores.
            """)
    var threads: Int?

    /// The client's event loops: a group of --threads, or NIO's shared one.
    private func clientGroup() -> any EventLoopGroup {
        guard let threads else { return MultiThreadedEventLoopGroup.singleton }
        return MultiThreadedEventLoopGroup(numberOfThreads: threads)
    }

    @Option(name: .customLong("payload-bytes"), help: "Payload size in bytes.")
    var payloadBytes: Int = 256

    @Option(help: "Distinct device tokens the notifications go to, in turn.")
    var devices: Int = BenchWorkload.defaultDevices

    @Flag(
        name: .customLong("print-paths"),
        help: """
            Print the workload's distinct :path values (one per line, in the order they are sent) and exit: a yardstick \
            such as h2load (-i) can then send the very same requests.
            """)
    var printPaths = false

    @Option(help: "Notifications sent before measuring (opens connections, raises stream limits).")
    var warmup: Int = 2000

    @Option(help: "production or development (default: the tenant's default).")
    var environment: String?

    @Option(
        help: """
            router (default): every notification goes through the tenant's runtime in a router, like every other send \
            (its plugins, the retry, its transport); transport: straight to the tenant's transport (the engine alone, \
            for comparing with h2load; the default with --noisy-neighbor).
            """)
    var through: String?

    /// The path in effect: the option, or the default.
    private var path: String { through ?? (noisyNeighbor ? "transport" : "router") }

    @Option(
        name: .customLong("callers"),
        help: """
            How notifications are sent: loops (async sends from tasks on the event loops of the tenant's connections; the default through the router), \
            global (async sends from tasks on Swift's global executor) or callbacks (the callback API: each completion, on \
            a connection's event loop, sends the next; the default through the transport; through the router, one attempt \
            each, as the job runner sends a batch item).
            """)
    var callers: String?

    @Option(
        help: """
            Through the router: also send the workload straight to a transport of the tenant's own, by callback (the \
            floor of --through transport), alternating chunks of this many notifications between the two in this one \
            process, and print the router's CPU a notification and rate against the transport's. A machine whose speed \
            drifts then slows both alike.
            """)
    var alternate: Int?

    /// The callers in effect: the option, or the default of the path.
    private var callerMode: String { callers ?? (path == "transport" ? "callbacks" : "loops") }

    @Option(help: "Send through this outbound proxy (http://HOST:PORT or socks5://HOST:PORT), or none, whatever the tenant file says.")
    var proxy: String?

    @Flag(help: "Start an in-process APNsSandbox and point the tenant at it.")
    var sandbox = false

    @Option(name: .customLong("sandbox-config"), help: "The sandbox configuration for --sandbox and --noisy-neighbor.")
    var sandboxConfig: String = "config/sandbox.yaml"

    @Flag(
        name: .customLong("noisy-neighbor"),
        help: "Measure the tenant alone, then again while a second tenant saturates its own pool against a stalled (or failing) endpoint.")
    var noisyNeighbor = false

    @Option(name: .customLong("noisy-mode"), help: "stall (answers delayed by --noisy-latency) or 503 (every answer 503).")
    var noisyMode: String = "stall"

    @Option(name: .customLong("noisy-latency"), help: "Seconds the noisy tenant's endpoint holds each answer (stall mode).")
    var noisyLatency: Double = 5

    @Option(name: .customLong("noisy-concurrency"), help: "The noisy tenant's sends in flight.")
    var noisyConcurrency: Int = 4000

    @Option(
        name: .customLong("quiet-rate"),
        help: """
            With --noisy-neighbor: the quiet tenant sends at this steady rate (notifications/s), alone and then beside the noisy one;             0 sends as fast as it can (then both tenants compete for the same CPU).
            """)
    var quietRate: Double = 2000

    @Flag(
        help:
            "Send broadcasts (Live Activity updates on one channel, made for the run on the tenant's channel management endpoint) instead of device notifications.")
    var broadcast = false

    @Flag(help: "Print the figures as JSON.")
    var json = false

    func validate() throws {
        guard count > 0 else { throw ValidationError("--count must be at least 1") }
        guard concurrency > 0 else { throw ValidationError("--concurrency must be at least 1") }
        guard payloadBytes > 0, payloadBytes <= 5120 else { throw ValidationError("--payload-bytes must be 1…5120") }
        if let connections, !(1...64).contains(connections) { throw ValidationError("--connections must be 1…64") }
        if let threads, !(1...64).contains(threads) { throw ValidationError("--threads must be 1…64") }
        guard (1...1_000_000).contains(devices) else { throw ValidationError("--devices must be 1…1000000") }
        if let writeAfter, !(0...100_000).contains(writeAfter) { throw ValidationError("--write-after must be 0…100000") }
        guard warmup >= 0 else { throw ValidationError("--warmup must be 0 or more") }
        guard quietRate >= 0 else { throw ValidationError("--quiet-rate must be 0 or more") }
        guard ["stall", "503"].contains(noisyMode) else { throw ValidationError("--noisy-mode must be stall or 503") }
        guard ["router", "transport"].contains(path) else { throw ValidationError("--through must be router or transport") }
        guard ["callbacks", "loops", "global"].contains(callerMode) else { throw ValidationError("--callers must be callbacks, loops or global") }
        if broadcast, noisyNeighbor { throw ValidationError("--broadcast and --noisy-neighbor do not go together") }
        if let alternate {
            guard alternate > 0 else { throw ValidationError("--alternate must be at least 1") }
            guard path == "router", !noisyNeighbor else { throw ValidationError("--alternate compares the router with the transport: it runs --through router") }
        }
        if noisyNeighbor, path == "router" {
            throw ValidationError("--noisy-neighbor measures the transports' isolation: it runs --through transport")
        }
    }

    func run() async throws {
        if printPaths {
            for device in BenchWorkload.devices(devices) {
                print(HeraldCore.Notification(deviceToken: device, payload: [UInt8]()).path)
            }
            return
        }
        var tenantConfiguration: TenantConfiguration
        var environment: APNsEnvironment? = nil
        do {
            tenantConfiguration = try CLITenants.load(directory: tenants, id: tenant)
            if let name = self.environment {
                guard let parsed = APNsEnvironment(rawValue: name) else {
                    throw CLIFailure("--environment: '\(name)' must be production or development")
                }
                environment = parsed
            }
            if let proxy {
                if proxy == "none" {
                    tenantConfiguration.proxy = .direct
                } else {
                    guard let parsed = EgressProxy(url: proxy) else {
                        throw CLIFailure("--proxy: '\(proxy)' must read http://HOST[:PORT], socks5://HOST[:PORT] or none")
                    }
                    tenantConfiguration.proxy = .proxy(parsed)
                }
            }
        } catch let failure as CLIFailure {
            failure.print()
            throw ExitStatus.invalid
        }
        guard let topic = tenantConfiguration.topics.first(where: { PushType.alert.agrees(withTopic: $0) }) ?? tenantConfiguration.topics.first else {
            CLIFailure("tenant '\(tenant)' has no topic").print()
            throw ExitStatus.invalid
        }
        if let connections { tenantConfiguration.pool.connections = connections }
        tenantConfiguration.pool.maxQueued = max(tenantConfiguration.pool.maxQueued, concurrency)

        var sandboxes: [APNsSandbox] = []
        if sandbox || noisyNeighbor {
            let started = try await startSandbox(faults: .none)
            sandboxes.append(started)
            tenantConfiguration.endpoints = Self.endpoints(of: started, default: tenantConfiguration.endpoints.defaultEnvironment)
        }
        var channel: (id: ChannelID, bundleID: String)? = nil
        if broadcast {
            do {
                channel = try await makeChannel(tenantConfiguration, environment: environment)
            } catch {
                for started in sandboxes { try? await started.shutdown() }
                throw error
            }
        }

        let endpoint = tenantConfiguration.endpoints.endpoint(for: environment ?? tenantConfiguration.endpoints.defaultEnvironment)
        let header =
            "herald bench: tenant \(tenantConfiguration.id) → \(endpoint?.url ?? "-")\(sandbox || noisyNeighbor ? " (in-process sandbox)" : "")"
            + ", \(channel.map { "broadcasts on channel \($0.id)" } ?? "device notifications")"
            + ", connections \(tenantConfiguration.pool.connections), concurrency \(concurrency), payload \(payloadBytes) B, through the \(path == "router" ? "router (plugins: \(tenantConfiguration.plugins.map(\.name).joined(separator: ", ")))" : "transport alone"), sent by \(callerMode == "callbacks" ? "callbacks" : callerMode == "loops" ? "async tasks on the event loops" : "async tasks on the global executor")"

        do {
            if noisyNeighbor {
                try await runNoisyNeighbor(quiet: tenantConfiguration, topic: topic, environment: environment, header: header, sandboxes: &sandboxes)
            } else {
                try await runSolo(
                    tenantConfiguration, topic: topic, channel: channel, environment: environment, endpoint: endpoint, header: header)
            }
        } catch {
            for started in sandboxes { try? await started.shutdown() }
            throw error
        }
        for started in sandboxes { try? await started.shutdown() }
    }

    private func runSolo(
        _ tenantConfiguration: TenantConfiguration, topic: String, channel: (id: ChannelID, bundleID: String)?,
        environment: APNsEnvironment?, endpoint: APNsEndpoint?, header: String
    ) async throws {
        func makeWorkload(_ count: Int) -> BenchWorkload {
            if let channel {
                return BenchWorkload(count: count, broadcastsOn: channel.id, bundleID: channel.bundleID, payloadBytes: payloadBytes)
            }
            return BenchWorkload(count: count, topic: topic, payloadBytes: payloadBytes, devices: devices)
        }
        let workload = makeWorkload(count)
        let warmupLoad = makeWorkload(warmup)
        let figures: BenchFigures
        let group = clientGroup()
        defer {
            if threads != nil { group.shutdownGracefully { _ in } }
        }
        var floor: BenchFigures? = nil
        if path == "router" {
            let (router, dataDirectory) = try await makeRouter(tenantConfiguration, group: group)
            let tenantID = tenantConfiguration.id
            let routerLoad: @Sendable ([HeraldCore.Notification]) async -> BenchFigures
            if callerMode == "callbacks" {
                // As the job runner sends a batch item: one attempt (its retries are the caller's),
                // through the one pipeline without a task.
                let start: @Sendable (consuming HeraldCore.Notification, @escaping @Sendable (consuming Result<APNsResponse, any Error>) -> Void) -> Void = {
                    note, completion in
                    router.startSend(tenant: tenantID, notification: note, environment: environment, retries: false) { outcome in
                        // Moved, not copied (`map` would copy the answer's strings).
                        switch consume outcome {
                        case .success(let result): completion(.success(result.response))
                        case .failure(let error): completion(.failure(error))
                        }
                    }
                }
                routerLoad = { notes in await BenchCallbackLoad.run(notes, concurrency: concurrency, start: start) }
            } else {
                // On the loops the tenant's connections answer on, as for `--through transport`.
                let executors = callerMode == "loops" ? router.runtime(for: tenantID)?.transport.sendingExecutors ?? [] : []
                routerLoad = { notes in
                    await BenchLoad.run(notes, concurrency: concurrency, executors: executors) { note in
                        try await router.send(tenant: tenantID, notification: note, environment: environment).response
                    }
                }
            }
            if warmup > 0 { _ = await routerLoad(warmupLoad.notes) }
            if let alternate {
                let transport = try makeTransport(tenantConfiguration, group: group)
                let floorNotes = try workload.admitted(by: transport.tenant, environment: environment)
                if warmup > 0 {
                    let notes = try warmupLoad.admitted(by: transport.tenant, environment: environment)
                    _ = await BenchCallbackLoad.run(notes, through: transport, concurrency: concurrency)
                }
                // Chunk by chunk, in turn (router first, then transport first): both see the same
                // machine.
                var routed = BenchFigures()
                var direct = BenchFigures()
                var start = 0
                var chunk = 0
                while start < workload.notes.count {
                    let end = min(start + alternate, workload.notes.count)
                    let routerNotes = Array(workload.notes[start..<end])
                    let transportNotes = Array(floorNotes[start..<end])
                    if chunk % 2 == 0 {
                        routed.merge(await routerLoad(routerNotes))
                        direct.merge(await BenchCallbackLoad.run(transportNotes, through: transport, concurrency: concurrency))
                    } else {
                        direct.merge(await BenchCallbackLoad.run(transportNotes, through: transport, concurrency: concurrency))
                        routed.merge(await routerLoad(routerNotes))
                    }
                    start = end
                    chunk += 1
                }
                await transport.close()
                figures = routed
                floor = direct
            } else {
                figures = await routerLoad(workload.notes)
            }
            await router.shutdown()
            try? FileManager.default.removeItem(atPath: dataDirectory)
        } else {
            let transport = try makeTransport(tenantConfiguration, group: group)
            if warmup > 0 {
                _ = try await load(warmupLoad, through: transport, environment: environment, concurrency: min(concurrency, warmup))
            }
            figures = try await load(workload, through: transport, environment: environment, concurrency: concurrency)
            await transport.close()
        }
        let rss = ProcessUsage.now().peakRSSBytes

        if json {
            var members: [(String, JSONValue)] = [
                ("tenant", .string(tenantConfiguration.id.rawValue)),
                ("endpoint", .string(endpoint?.url ?? "")),
                ("in_process_sandbox", .bool(sandbox)),
                ("connections", .int(Int64(tenantConfiguration.pool.connections))),
                ("concurrency", .int(Int64(concurrency))),
                ("payload_bytes", .int(Int64(payloadBytes))),
                ("kind", .string(channel == nil ? "device" : "broadcast")),
                ("through", .string(path)),
            ]
            members += figures.jsonMembers()
            if let floor {
                members.append(("transport", .object(floor.jsonMembers())))
                members.append(("alternated_chunk", .int(Int64(alternate ?? 0))))
                members.append(("cpu_against_transport", .double(Self.ratio(figures.cpuMicrosPerNotification, floor.cpuMicrosPerNotification))))
                members.append(("rate_against_transport", .double(Self.ratio(figures.rate, floor.rate))))
            }
            members.append(("peak_rss_bytes", .int(Int64(rss))))
            print(JSONValue.object(members).jsonText)
        } else {
            print(header)
            for line in figures.textLines() { print(line) }
            if let floor {
                print("the transport alone, by callback, alternated in chunks of \(alternate ?? 0):")
                for line in floor.textLines() { print("  " + line) }
                print(
                    String(
                        format: "router / transport: CPU a notification %.2f×, rate %.0f%%",
                        Self.ratio(figures.cpuMicrosPerNotification, floor.cpuMicrosPerNotification), Self.ratio(figures.rate, floor.rate) * 100))
            }
            print(String(format: "peak rss:      %.1f MiB", Double(rss) / 1_048_576))
            if sandbox { print("(CPU and memory include the in-process sandbox)") }
        }
        if figures.succeeded == 0 || floor?.succeeded == 0 { throw ExitStatus.rejected }
    }

    /// `value / base`, rounded to 1/1000; 0 without a base.
    private static func ratio(_ value: Double, _ base: Double) -> Double {
        base > 0 ? (value / base * 1000).rounded() / 1000 : 0
    }

    // MARK: Noisy neighbour

    private final class NoisyCounters: Sendable {
        let stop = Atomic<Bool>(false)
        let answered = Atomic<Int>(0)
        let refused = Atomic<Int>(0)
        let failed = Atomic<Int>(0)
    }

    /// The quiet tenant alone, then with a neighbour whose endpoint stalls or fails and whose
    /// pool is saturated. Both sandboxes are in this process; they share nothing but the event loops.
    private func runNoisyNeighbor(
        quiet quietTenant: TenantConfiguration, topic: String, environment: APNsEnvironment?, header: String,
        sandboxes: inout [APNsSandbox]
    ) async throws {
        let faults = noisyMode == "503" ? SandboxFaults(fraction503: 1) : SandboxFaults(addedLatency: noisyLatency)
        let noisySandbox = try await startSandbox(faults: faults)
        sandboxes.append(noisySandbox)
        var noisyTenant = quietTenant
        noisyTenant.id = try TenantID(String("\(quietTenant.id.rawValue)-noisy".prefix(64)))
        noisyTenant.endpoints = Self.endpoints(of: noisySandbox, default: quietTenant.endpoints.defaultEnvironment)
        noisyTenant.pool.maxQueued = max(100, noisyConcurrency / 4)

        let quiet = try makeTransport(quietTenant)
        let workload = BenchWorkload(count: count, topic: topic, payloadBytes: payloadBytes)
        if warmup > 0 {
            _ = try await load(
                BenchWorkload(count: warmup, topic: topic, payloadBytes: payloadBytes), through: quiet, environment: environment,
                concurrency: min(concurrency, warmup))
        }
        let solo = try await quietLoad(workload, through: quiet, environment: environment)

        // The neighbour: as many sends as it can, each retried a moment after a queueFull.
        let noisy = try makeTransport(noisyTenant)
        let flag = NoisyCounters()
        let noisyNotes = try BenchWorkload(count: 1024, topic: topic, payloadBytes: payloadBytes)
            .admitted(by: noisyTenant, environment: environment)
        let noisyLoad = Task {
            await withTaskGroup(of: Void.self) { group in
                for worker in 0..<noisyConcurrency {
                    group.addTask {
                        var index = worker
                        while !flag.stop.load(ordering: .relaxed) {
                            index &+= 1
                            do {
                                let response = try await noisy.send(noisyNotes[index % noisyNotes.count])
                                if response.status == 200 { flag.answered.add(1, ordering: .relaxed) } else { flag.failed.add(1, ordering: .relaxed) }
                            } catch let error as PushError where error.code == .queueFull {
                                flag.refused.add(1, ordering: .relaxed)
                                try? await Task.sleep(for: .milliseconds(20))
                            } catch {
                                flag.failed.add(1, ordering: .relaxed)
                                try? await Task.sleep(for: .milliseconds(20))
                            }
                        }
                    }
                }
            }
        }
        // Let the neighbour fill its streams and queue first.
        for _ in 0..<400 {
            let busy = noisy.poolStatus.reduce(0) { $0 + $1.inFlight + $1.queued }
            if busy >= noisyTenant.pool.maxQueued || flag.failed.load(ordering: .relaxed) > 0 { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        let noisyStatus = noisy.poolStatus
        let withNeighbour = try await quietLoad(workload, through: quiet, environment: environment)
        flag.stop.store(true, ordering: .relaxed)
        await noisy.close()
        await noisyLoad.value
        await quiet.close()

        let ratio = solo.rate > 0 ? withNeighbour.rate / solo.rate : 0
        let noisyInFlight = noisyStatus.reduce(0) { $0 + $1.inFlight }
        let noisyQueued = noisyStatus.reduce(0) { $0 + $1.queued }
        let noisyDescription = noisyMode == "503" ? "every answer 503" : String(format: "answers held %.1f s", noisyLatency)
        if json {
            let members: [(String, JSONValue)] = [
                ("tenant", .string(quietTenant.id.rawValue)),
                ("noisy_mode", .string(noisyMode)),
                ("quiet_rate", .double(quietRate)),
                ("solo", .object(solo.jsonMembers())),
                ("with_noisy_neighbor", .object(withNeighbour.jsonMembers())),
                ("rate_ratio", .double((ratio * 1000).rounded() / 1000)),
                (
                    "noisy",
                    .object([
                        ("in_flight_at_start", .int(Int64(noisyInFlight))), ("queued_at_start", .int(Int64(noisyQueued))),
                        ("answered_200", .int(Int64(flag.answered.load(ordering: .relaxed)))),
                        ("answered_other_or_failed", .int(Int64(flag.failed.load(ordering: .relaxed)))),
                        ("refused_queue_full", .int(Int64(flag.refused.load(ordering: .relaxed)))),
                    ])
                ),
                ("peak_rss_bytes", .int(Int64(ProcessUsage.now().peakRSSBytes))),
            ]
            print(JSONValue.object(members).jsonText)
        } else {
            print(header)
            print(quietRate > 0 ? String(format: "— quiet tenant alone, paced at %.0f notifications/s —", quietRate) : "— quiet tenant alone, as fast as it can —")
            for line in solo.textLines() { print(line) }
            print("— with a noisy neighbour (\(noisyDescription); \(noisyInFlight) in flight, \(noisyQueued) queued when the run began) —")
            for line in withNeighbour.textLines() { print(line) }
            print(
                "noisy tenant: \(flag.answered.load(ordering: .relaxed)) answered 200, \(flag.failed.load(ordering: .relaxed)) other answers or failures, \(flag.refused.load(ordering: .relaxed)) refused (queue full)"
            )
            print(String(format: "quiet rate with neighbour / alone: %.2f (goal ≥ 0.80)", ratio))
            print(String(format: "peak rss:      %.1f MiB", Double(ProcessUsage.now().peakRSSBytes) / 1_048_576))
        }
    }

    // MARK: Helpers

    private func quietLoad(_ workload: BenchWorkload, through transport: TenantTransport, environment: APNsEnvironment?) async throws
        -> BenchFigures
    {
        guard quietRate > 0 else { return try await load(workload, through: transport, environment: environment, concurrency: concurrency) }
        let notes = try workload.admitted(by: transport.tenant, environment: environment)
        return await BenchCallbackLoad.runPaced(notes, through: transport, rate: quietRate)
    }

    /// Sends the workload straight to the transport, its notes admitted before the clock starts.
    private func load(
        _ workload: BenchWorkload, through transport: TenantTransport, environment: APNsEnvironment?, concurrency: Int
    ) async throws -> BenchFigures {
        let notes = try workload.admitted(by: transport.tenant, environment: environment)
        if callerMode == "callbacks" {
            return await BenchCallbackLoad.run(notes, through: transport, concurrency: concurrency)
        }
        return await BenchLoad.run(
            notes, concurrency: concurrency, executors: callerMode == "loops" ? transport.sendingExecutors : []
        ) { note in
            try await transport.send(note)
        }
    }

    /// A router with the tenant's runtime (its plugins and transport) over a throwaway SQLite
    /// store, as `herald serve` builds one. Returns it with the store's directory (to remove).
    private func makeRouter(_ tenant: TenantConfiguration, group: any EventLoopGroup) async throws -> (Router, String) {
        var logger = Logger(label: "herald.bench")
        logger.logLevel = .error
        let directory = NSTemporaryDirectory() + "/herald-bench-\(ProcessInfo.processInfo.processIdentifier)-\(UInt32.random(in: 0...UInt32.max))"
        do {
            let store = try SQLitePushStore(directory: directory)
            var transports = APNsTransportProvider(eventLoopGroup: group)
            transports.tokenStore = store
            transports.streamCeiling = maxStreams
            let router = Router(configuration: RouterConfiguration(store: store, transports: transports, logger: logger))
            let report = await router.install([tenant])
            if let failure = report.failures.first { throw CLIFailure("\(tenant.sourceFile): \(failure.message)") }
            return (router, directory)
        } catch let failure as CLIFailure {
            try? FileManager.default.removeItem(atPath: directory)
            failure.print()
            throw ExitStatus.invalid
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            CLIFailure("\(error)").print()
            throw ExitStatus.invalid
        }
    }

    private func makeTransport(
        _ tenant: TenantConfiguration, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) throws -> TenantTransport {
        var logger = Logger(label: "herald.bench")
        logger.logLevel = .error
        do {
            let credentials = try CredentialProviders.make(for: tenant, clock: SystemWallClock())
            var configuration = TransportConfiguration(pool: tenant.pool)
            if let maxStreams { configuration.streamCeiling = maxStreams }
            if let writeAfter { configuration.writeAfterRequests = writeAfter }
            configuration.proxy = tenant.proxy?.proxy
            try TenantTransport.validate(tenant: tenant, credentials: credentials)
            return TenantTransport(
                tenant: tenant, credentials: credentials, configuration: configuration, eventLoopGroup: group, logger: logger)
        } catch {
            CLIFailure("\(tenant.sourceFile): \(error)").print()
            throw ExitStatus.invalid
        }
    }

    /// A channel for the run, created with the tenant's credential on its channel management
    /// endpoint (storage policy 0: broadcasts with expiration 0, as the workload sends them).
    private func makeChannel(_ tenant: TenantConfiguration, environment: APNsEnvironment?) async throws
        -> (id: ChannelID, bundleID: String)
    {
        guard let bundle = tenant.broadcastBundleIDs.first else {
            CLIFailure("--broadcast: tenant '\(tenant.id)' has no bundle ID to broadcast to").print()
            throw ExitStatus.invalid
        }
        let transport = try makeTransport(tenant)
        defer { Task { await transport.close() } }
        var ids = NotificationIDGenerator()
        let response = try await transport.manageChannels(
            .create(bundleID: bundle, storagePolicy: .noMessageStored), requestID: ids.nextID(),
            environment: environment ?? tenant.endpoints.defaultEnvironment, deadline: .now + .seconds(30))
        guard response.status == 201, let id = try? ChannelAnswer.createdChannel(response) else {
            CLIFailure("--broadcast: the channel management endpoint answered \(response.status) \(response.reason?.wireValue ?? "")").print()
            throw ExitStatus.rejected
        }
        return (id, bundle)
    }

    private func startSandbox(faults: SandboxFaults) async throws -> APNsSandbox {
        var file: SandboxConfigFile
        do {
            file = try SandboxConfigFile.load(path: sandboxConfig)
        } catch {
            CLIFailure("\(error)").print()
            throw ExitStatus.invalid
        }
        file.configuration.port = 0
        file.configuration.channelsPort = 0
        file.configuration.host = "127.0.0.1"
        file.configuration.recordInMemory = false
        file.configuration.recordFile = nil
        file.configuration.faults = faults
        var logger = Logger(label: "herald.sandbox")
        logger.logLevel = .error
        return try await APNsSandbox.start(file.configuration, logger: logger)
    }

    private static func endpoints(of sandbox: APNsSandbox, default environment: APNsEnvironment) -> EndpointsConfiguration {
        let endpoint = APNsEndpoint(host: "127.0.0.1", port: sandbox.port)
        let channels = APNsEndpoint(host: "127.0.0.1", port: sandbox.channelsPort)
        return EndpointsConfiguration(
            production: endpoint, development: endpoint, defaultEnvironment: environment,
            trustRootsPEM: Array(sandbox.trustRootsPEM.utf8), trustRootsOrigin: "in-process sandbox CA",
            channelsProduction: channels, channelsDevelopment: channels)
    }
}
