import Foundation
@testable import Herald
import HeraldCore
import HeraldStore
import Logging
import Testing

@Suite("Batch item routes")
struct BatchItemRouteTests {
    static func job(_ tenant: String, environment: APNsEnvironment?) throws -> Job {
        Job(
            id: try JobID("route-job"), tenant: Fixtures.tenantID(tenant), state: .running, environment: environment,
            itemCount: 10, createdAt: Date(), updatedAt: Date())
    }

    @Test("a job's route is resolved once per tenant runtime, and again after the runtime is swapped")
    func routeFollowsTheRuntime() async throws {
        let router = try Fixtures.router()
        var tenant = Fixtures.tenant("route", defaultEnvironment: .production)
        tenant.delivery.maxRetryDuration = .seconds(60)
        tenant.delivery.circuit.failureThreshold = 7
        await router.install([tenant])
        let job = try Self.job("route", environment: nil)
        let routes = BatchItemDelivery.Routes(logger: Logger(label: "test.routes"))

        let first = try #require(router.runtime(for: job.tenant))
        let route = routes.route(for: first, job: job)
        #expect(route.runtime === first)
        #expect(route.policy == tenant.delivery)
        #expect(route.circuitKey == DeliveryCircuits.Key(tenant: job.tenant, endpoint: APNsEndpoint.production.url))
        #expect(routes.route(for: first, job: job).runtime === first)

        // A reload changes the policy and the default environment: the next item sees both.
        tenant.delivery.maxRetryDuration = .seconds(5)
        tenant.endpoints.defaultEnvironment = .development
        try await router.replace(tenant: tenant)
        let second = try #require(router.runtime(for: job.tenant))
        #expect(second !== first)
        let next = routes.route(for: second, job: job)
        #expect(next.runtime === second)
        #expect(next.policy.maxRetryDuration == .seconds(5))
        #expect(next.circuitKey == DeliveryCircuits.Key(tenant: job.tenant, endpoint: APNsEndpoint.development.url))

        // A job that names its environment keeps it; one without an endpoint there has no circuit.
        let production = try Self.job("route", environment: .production)
        #expect(BatchItemDelivery.Route(runtime: second, job: production, logger: routes.logger).circuitKey?.endpoint == APNsEndpoint.production.url)
        tenant.endpoints.production = nil
        try await router.replace(tenant: tenant)
        let third = try #require(router.runtime(for: job.tenant))
        #expect(BatchItemDelivery.Route(runtime: third, job: production, logger: routes.logger).circuitKey == nil)
        await router.shutdown()
    }
}
