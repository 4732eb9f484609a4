import Foundation
import HeraldAPNs
import HeraldCore

extension ReloadCoordinator {
    enum Validation {
        case valid(TenantRuntime)
        /// What is wrong, naming the file and field, never secret material.
        case invalid(String)
    }

    /// ``validate(_:)`` for each tenant, in their order, spread over the cores: at most two
    /// validations a core run at once (parsing keys and building a TLS context are CPU work of
    /// their own per tenant).
    func validateAll(_ tenants: [TenantConfiguration]) async -> [Validation] {
        if tenants.count == 1 { return [await validate(tenants[0])] }
        let width = max(1, 2 * ProcessInfo.processInfo.activeProcessorCount)
        var results = [Validation?](repeating: nil, count: tenants.count)
        await withTaskGroup(of: (Int, Validation).self) { group in
            var next = 0
            while next < tenants.count, next < width {
                let (index, tenant) = (next, tenants[next])
                group.addTask { (index, await self.validate(tenant)) }
                next += 1
            }
            for await (index, validation) in group {
                results[index] = validation
                if next < tenants.count {
                    let (index, tenant) = (next, tenants[next])
                    group.addTask { (index, await self.validate(tenant)) }
                    next += 1
                }
            }
        }
        return zip(tenants, results).map { tenant, result in
            result ?? .invalid("\(tenant.sourceFile): internal error: the tenant was not validated")
        }
    }

    /// Checks a new or changed tenant configuration in full and builds its runtime, touching
    /// nothing that runs: the credential loads (a token key is a P-256 key its ES256 signer
    /// takes, so its first token, signed at the first send, cannot fail; a certificate is valid
    /// now and covers every topic), the TLS context builds with the trust roots and the client
    /// identity, and every plugin builds from its options. Opens no connection and signs nothing;
    /// the key or certificate is read once, by the runtime's transport.
    ///
    /// - Returns: the runtime, ready to swap in, or the error (file and field named, no secret).
    func validate(_ tenant: TenantConfiguration) async -> Validation {
        let runtime: TenantRuntime
        do {
            runtime = try router.makeRuntime(for: tenant)
        } catch let error as PluginConfigurationError {
            return .invalid(error.description)
        } catch {
            let text = "\(error)"
            return .invalid(text.hasPrefix(tenant.sourceFile) ? text : "\(tenant.sourceFile): \(text)")
        }
        guard configuration.verifyCredentials else { return .valid(runtime) }
        do {
            if let transport = runtime.transport as? TenantTransport {
                // Its credential loaded with it (a key or certificate that does not fails above).
                try transport.validate()
            } else {
                // A transport of another kind (a bench's, a test's): the credential as APNs'
                // transport would load it.
                let probe = try CredentialProviders.make(for: tenant, clock: configuration.credentialClock)
                try TenantTransport.validate(tenant: tenant, credentials: probe)
            }
        } catch {
            let text = "\(error)"
            return .invalid(text.hasPrefix(tenant.sourceFile) ? text : "\(tenant.sourceFile): \(text)")
        }
        return .valid(runtime)
    }
}
