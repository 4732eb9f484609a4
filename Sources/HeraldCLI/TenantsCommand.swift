import ArgumentParser

// Placeholder: replaced by the real `herald tenants` implementation.
struct TenantsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "tenants", abstract: "(being built)")
    func run() async throws { throw ValidationError("herald tenants is not built yet") }
}
