import ArgumentParser

// Placeholder: replaced by the real `herald sandbox` implementation.
struct SandboxCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "sandbox", abstract: "(being built)")
    func run() async throws { throw ValidationError("herald sandbox is not built yet") }
}
