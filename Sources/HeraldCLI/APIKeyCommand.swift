import ArgumentParser
import Foundation
import HeraldServer

/// `herald apikey`: tenant API keys.
struct APIKeyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apikey",
        abstract: "Make tenant API keys (tenant files hold only their SHA-256).",
        subcommands: [New.self, Hash.self])

    /// `herald apikey new [--name NAME]`
    struct New: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "new", abstract: "Print a fresh random API key and the lines to paste into the tenant's YAML.")

        @Option(name: .long, help: "The key's name in the tenant file (shown in the admin API and logs).")
        var name: String = "default"

        func run() throws {
            let key = APIKeys.generate()
            print(
                """
                API key (give it to the tenant now; Herald keeps only its hash and cannot show it again):

                  \(key)

                Add to the tenant's YAML file:

                api_keys:
                  - name: \(name)
                    sha256: \(APIKeys.sha256Hex(of: key))
                """)
        }
    }

    /// `herald apikey hash [KEY]`
    struct Hash: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "hash", abstract: "Print the SHA-256 of an existing key (read from standard input when not given).")

        @Argument(help: "The key. Prefer standard input: arguments end up in shell history.")
        var key: String?

        func run() throws {
            var text = key
            if text == nil {
                text = readLine(strippingNewline: true)
            }
            guard let text, !text.isEmpty else { throw ValidationError("no key given") }
            print(APIKeys.sha256Hex(of: text))
        }
    }
}
