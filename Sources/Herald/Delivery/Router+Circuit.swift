import HeraldCore

extension Router {
    /// A single send (the API's `POST /v1/notifications`) through the tenant's circuit to the
    /// endpoint, as batch items go (``DeliveryCircuits``): its outcome feeds the circuit, so a
    /// run of transient failures on single sends opens it too; while it is open the send is
    /// refused at once with ``HeraldCore/PushError/circuitOpen(tenant:endpoint:retryAfter:)``
    /// (nothing is written to APNs), and after the probe interval one send goes as the probe.
    /// A single send keeps its own deadline: it is not deferred or retried here.
    nonisolated(nonsending) public func sendThroughCircuit(
        tenant: TenantID, notification: HeraldCore.Notification, environment: APNsEnvironment? = nil
    ) async throws -> PushResult {
        guard let runtime = runtime(for: tenant) else { throw PushError.unknownTenant(tenant.rawValue) }
        let tenantConfiguration = runtime.configuration
        let policy = tenantConfiguration.delivery.circuit
        guard
            let endpoint = tenantConfiguration.endpoints.endpoint(
                for: environment ?? tenantConfiguration.endpoints.defaultEnvironment)
        else {
            // No endpoint for it: the send refuses it with its own error.
            return try await send(tenant: tenant, notification: notification, environment: environment)
        }
        let key = DeliveryCircuits.Key(tenant: tenant, endpoint: endpoint.url)
        let clock = configuration.clock
        var probe = false
        switch circuits.admit(key, policy: policy, now: clock.now) {
        case .send: break
        case .probe: probe = true
        case .wait(let until):
            // Taken and answered at once without the wire: in the tenant's usage as refused.
            let refusal = PushError.circuitOpen(
                tenant: tenant, endpoint: endpoint.url, retryAfter: max(.zero, clock.now.duration(to: until)))
            runtime.usage.addSingleSend(.failure(refusal), at: clock.date)
            throw refusal
        }
        let logger = configuration.logger
        do {
            let result = try await send(tenant: tenant, notification: notification, environment: environment)
            circuits.record(
                key, outcome: DeliveryOutcome(result.response), probe: probe, policy: policy, now: clock.now, logger: logger)
            return result
        } catch is CancellationError {
            circuits.record(
                key, outcome: .deferred(reason: "Cancelled"), probe: probe, policy: policy, now: clock.now, logger: logger)
            throw CancellationError()
        } catch {
            circuits.record(key, outcome: DeliveryOutcome(error), probe: probe, policy: policy, now: clock.now, logger: logger)
            throw error
        }
    }
}
