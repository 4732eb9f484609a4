import ArgumentParser

// Placeholder: replaced by the real `herald send` implementation.
struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "send", abstract: "(being built)")
    func run() async throws { throw ValidationError("herald send is not built yet") }
}
