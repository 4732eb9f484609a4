import ArgumentParser

/// `herald`: the multi-tenant APNs provider platform's command line.
@main
struct HeraldCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald",
        abstract: "Herald: a multi-tenant Apple Push Notification service provider platform.",
        subcommands: [
            TenantsCommand.self,
            AdminCommand.self,
            SendCommand.self,
            BenchCommand.self,
            BenchTenantsCommand.self,
            BenchStoreCommand.self,
            BenchJobsCommand.self,
            SandboxCommand.self,
            ServeCommand.self,
            APIKeyCommand.self,
        ]
    )
}

/// Exit codes shared by the subcommands.
enum ExitStatus {
    /// APNs (or the sandbox) rejected the notification.
    static let rejected = ExitCode(1)
    /// Local validation or configuration error: nothing was sent.
    static let invalid = ExitCode(2)
}
