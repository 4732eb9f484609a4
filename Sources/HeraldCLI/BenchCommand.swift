import ArgumentParser

// Placeholder: replaced by the real `herald bench` implementation.
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "bench", abstract: "(being built)")
    func run() async throws { throw ValidationError("herald bench is not built yet") }
}
