/// PEM text helpers: demo files start with a comment line before the PEM block.
public enum SandboxPEM {
    /// The first line of every demo key or certificate file the sandbox writes.
    public static let demoHeader =
        "# DEMO KEY for the local APNsSandbox only - never use it with Apple or in production"

    /// The PEM blocks of `text`, without any text before, between or after them
    /// (swift-crypto and swift-certificates expect the text to start with `-----BEGIN`).
    public static func blocks(in text: String) -> [String] {
        var blocks: [String] = []
        var current: [Substring] = []
        var inside = false
        for line in text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r" }) {
            let trimmed = line.drop(while: { $0 == " " || $0 == "\t" })
            if !inside, trimmed.hasPrefix("-----BEGIN ") {
                inside = true
                current = [trimmed]
            } else if inside {
                current.append(trimmed)
                if trimmed.hasPrefix("-----END ") {
                    blocks.append(current.joined(separator: "\n"))
                    inside = false
                    current = []
                }
            }
        }
        return blocks
    }

    /// The first PEM block of `text`, or the text itself when it holds none.
    public static func firstBlock(in text: String) -> String {
        blocks(in: text).first ?? text
    }

    /// `pem` with the demo comment line in front.
    public static func withDemoHeader(_ pem: String) -> String {
        demoHeader + "\n" + (pem.hasSuffix("\n") ? pem : pem + "\n")
    }
}
