import Herald
import HeraldCore
import HeraldStore
import Hummingbird
import NIOCore
import Prometheus
import Synchronization

/// Where the server is in its life, for `/readyz`.
enum ServerPhase: String, Sendable {
    case starting
    case ready
    case stopping
}

/// The server's phase, shared by the listener (ready), the readiness service (stopping) and `/readyz`.
final class ServerPhaseState: Sendable {
    private struct State {
        var phase = ServerPhase.starting
        var stoppingSince: PushInstant?
    }

    private let state = Mutex(State())

    var phase: ServerPhase {
        get { state.withLock { $0.phase } }
        set {
            state.withLock { state in
                if newValue == .stopping, state.phase != .stopping { state.stoppingSince = .now }
                state.phase = newValue
            }
        }
    }

    /// When the graceful shutdown began (the phase turned `stopping`); nil before.
    var stoppingSince: PushInstant? { state.withLock { $0.stoppingSince } }
}

/// The circuits whose gauges `/metrics` shows, kept from one scrape to the next.
final class CircuitGaugeKeys: Sendable {
    private let keys = Mutex<Set<DeliveryCircuits.Key>>([])

    /// Keeps `current` and returns the keys of the last scrape that are gone.
    func replace(with current: Set<DeliveryCircuits.Key>) -> Set<DeliveryCircuits.Key> {
        keys.withLock { keys in
            defer { keys = current }
            return keys.subtracting(current)
        }
    }
}

/// Totals kept elsewhere (the store's, the send-path lookups') as Prometheus counters: each
/// scrape adds what grew since the last one.
final class ScrapedTotals: Sendable {
    private let reported = Mutex<[String: Int]>([:])

    /// How much `total` grew since the last call for `key` (never negative).
    func growth(_ key: String, total: Int) -> Int {
        reported.withLock { reported in
            defer { reported[key] = max(reported[key] ?? 0, total) }
            return max(0, total - (reported[key] ?? 0))
        }
    }
}

/// The open routes (`/healthz`, `/readyz`, `/openapi.yaml`) and the operator's `/metrics`.
struct HealthHandlers: Sendable {
    let router: Herald.Router
    let phase: ServerPhaseState
    let metrics: PrometheusCollectorRegistry
    let openAPIDocument: [UInt8]
    /// The job runner whose load `/metrics` shows (``updateJobGauges()``).
    let runner: JobRunner?
    /// The circuits whose gauges `/metrics` shows now.
    let circuitGauges = CircuitGaugeKeys()
    /// The store whose unanswered calls `/metrics` counts (a PostgreSQL store; nil otherwise).
    let storeCalls: (any UnansweredCallCounting)?
    let scrapedTotals = ScrapedTotals()

    struct Liveness: ResponseEncodable {
        var status = "ok"
    }

    struct Readiness: ResponseEncodable {
        var status = "ready"
        var tenants: Int
    }

    func healthz(_ request: Request, context: some RequestContext) -> Liveness {
        Liveness()
    }

    func readyz(_ request: Request, context: some RequestContext) throws(APIError) -> Readiness {
        switch phase.phase {
        case .ready: return Readiness(tenants: router.tenantIDs.count)
        case .starting: throw APIError.unavailable("not_ready", "Herald is starting")
        case .stopping: throw APIError.unavailable("shutting_down", "Herald is shutting down")
        }
    }

    func openAPI(_ request: Request, context: some RequestContext) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/yaml"
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: openAPIDocument)))
    }

    /// `GET /metrics` (admin): the Prometheus text of ``metrics``, with the delivery circuits
    /// refreshed at each scrape.
    func metricsText(_ request: Request, context: some RequestContext) -> Response {
        updateCircuitGauges()
        updateJobGauges()
        updateStoreMetrics()
        updateProxyMetrics()
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: metrics.emitToBuffer())))
    }

    /// `herald_delivery_circuit_state` (0 closed, 1 half-open, 2 open) and
    /// `herald_delivery_circuit_openings`, by tenant and endpoint.
    /// A circuit that is gone (its tenant removed) has its gauges unregistered at the next scrape
    /// instead of keeping their last value.
    private func updateCircuitGauges() {
        let statuses = router.circuits.statuses(now: router.configuration.clock.now)
        let current = Set(statuses.map(\.key))
        let gone = circuitGauges.replace(with: current)
        for key in gone {
            let labels = [("tenant", key.tenant.rawValue), ("endpoint", key.endpoint)]
            metrics.unregisterGauge(metrics.makeGauge(descriptor: Self.circuitState, labels: labels))
            metrics.unregisterGauge(metrics.makeGauge(descriptor: Self.circuitOpenings, labels: labels))
        }
        for status in statuses {
            let labels = [("tenant", status.key.tenant.rawValue), ("endpoint", status.key.endpoint)]
            let state: Double
            switch status.state {
            case "open": state = 2
            case "half-open": state = 1
            default: state = 0
            }
            metrics.makeGauge(descriptor: Self.circuitState, labels: labels).set(state)
            metrics.makeGauge(descriptor: Self.circuitOpenings, labels: labels).set(Double(status.openings))
        }
    }

    /// The job runner's load now, all jobs of this instance together: `herald_jobs_active`,
    /// `herald_jobs_send_tasks`, `herald_jobs_items_in_flight` (sends under way) and
    /// `herald_jobs_claimed_items` (claimed items held in memory) — where a batch stands, and
    /// whether it waits on its sends or on the store.
    private func updateJobGauges() {
        guard let runner else { return }
        let statistics = runner.statistics
        for (name, unit, help, value) in [
            ("jobs", "active", "Batch jobs this instance works on now", statistics.activeJobs),
            ("jobs_send", "tasks", "The job runner's send tasks alive now (one per job whose items are sent by callback)", statistics.sendTasks),
            ("jobs_items", "in_flight", "Batch items being sent now (a tenant permit held)", statistics.itemsInFlight),
            ("jobs_claimed", "items", "Claimed batch items held in memory now", statistics.claimedItemsHeld),
        ] {
            let descriptor = MetricNameDescriptor(
                namespace: "herald", subsystem: nil, metricName: name, unitName: unit, helpText: help)
            metrics.makeGauge(descriptor: descriptor).set(Double(value))
        }
    }

    /// A shared store that stops answering, as the API and the sends see it:
    /// `herald_store_calls_unanswered_total{reason="timed_out"|"unavailable"}` (calls that waited
    /// out `call_timeout` or found PostgreSQL unreachable), `herald_store_lookups_skipping` (1
    /// while sends skip their store lookups) and `herald_store_lookups_skipped_total`. Only on
    /// PostgreSQL: SQLite's calls are local.
    private func updateStoreMetrics() {
        if let storeCalls {
            let counts = storeCalls.unansweredCalls
            let descriptor = MetricNameDescriptor(
                namespace: "herald", subsystem: "store", metricName: "calls_unanswered", unitName: "total",
                helpText: "Store calls that ended without an answer: timed out (call_timeout) or the server unreachable")
            for (reason, total) in [("timed_out", counts.timedOut), ("unavailable", counts.unavailable)] {
                metrics.makeCounter(descriptor: descriptor, labels: [("reason", reason)])
                    .increment(by: Int64(scrapedTotals.growth("calls_unanswered/\(reason)", total: total)))
            }
        }
        if let lookups = router.configuration.sendPathLookups {
            metrics.makeGauge(
                descriptor: MetricNameDescriptor(
                    namespace: "herald", subsystem: "store", metricName: "lookups", unitName: "skipping",
                    helpText: "1 while sends skip their store lookups (the store did not answer one), else 0")
            ).set(Double(lookups.isSkipping ? 1 : 0))
            metrics.makeCounter(
                descriptor: MetricNameDescriptor(
                    namespace: "herald", subsystem: "store", metricName: "lookups_skipped", unitName: "total",
                    helpText: "Send-path store lookups skipped because the store did not answer")
            ).increment(by: Int64(scrapedTotals.growth("lookups_skipped", total: lookups.skippedLookups)))
        }
    }

    /// `herald_proxy_failures_total{tenant, kind}`: sends that failed because the tenant's
    /// outbound proxy did (unreachable, authenticationRequired, refused, targetUnreachable,
    /// timedOut, protocolError).
    private func updateProxyMetrics() {
        let descriptor = MetricNameDescriptor(
            namespace: "herald", subsystem: "proxy", metricName: "failures", unitName: "total",
            helpText: "Sends that failed because the tenant's outbound proxy did, by kind")
        for tenant in router.tenantIDs {
            guard let failures = router.runtime(for: tenant)?.transport.status.proxyFailures, !failures.isEmpty else { continue }
            for (kind, total) in failures {
                metrics.makeCounter(descriptor: descriptor, labels: [("tenant", tenant.rawValue), ("kind", kind)])
                    .increment(by: Int64(scrapedTotals.growth("proxy/\(tenant.rawValue)/\(kind)", total: total)))
            }
        }
    }

    private static var circuitState: MetricNameDescriptor {
        MetricNameDescriptor(
            namespace: "herald", subsystem: "delivery", metricName: "circuit", unitName: "state",
            helpText: "A tenant's circuit to an APNs endpoint: 0 closed, 1 half-open (probing), 2 open")
    }
    private static var circuitOpenings: MetricNameDescriptor {
        MetricNameDescriptor(
            namespace: "herald", subsystem: "delivery", metricName: "circuit", unitName: "openings",
            helpText: "How many times a tenant's circuit to an APNs endpoint opened")
    }
}
