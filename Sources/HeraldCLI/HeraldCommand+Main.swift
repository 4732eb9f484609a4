import ArgumentParser
import Foundation

extension HeraldCommand {
    /// Runs the command line with Herald's exit codes: a usage or validation error (an unknown
    /// option, a bad value) exits 2 like every other local error, not ArgumentParser's 64.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            if exitCode(for: error) == .validationFailure {
                let message = fullMessage(for: error)
                if !message.isEmpty {
                    FileHandle.standardError.write(Data((message + "\n").utf8))
                }
                Foundation.exit(ExitStatus.invalid.rawValue)
            }
            HeraldCommand.exit(withError: error)
        }
    }
}
