import Testing
import Yams

@testable import HeraldConfig

/// A plain scalar's type where its first characters settle it is read without Yams' resolver;
/// everywhere it answers, it answers as the resolver does.
@Suite("YAML scalar types")
struct YAMLScalarTypeTests {
    static let texts = [
        "", "a", "abc", "com.acme.app", "Yes", "yes", "no", "NO", "on", "Off", "true", "False", "null", "Null", "NULL", "~",
        "nil", "x1", "Zed", "é", "123", "1", "0", "00", "007", "08", "0x1F", "0o17", "0b101", "1_000", "12:30", "1.5", "1e3",
        "1E+3", "-5", "+5", "-0", ".5", ".inf", "-.inf", ".nan", "2026-11-30", "2026-11-30T10:00:00Z", "<<", "=", "123abc",
        "1 2", "999999999999999999", "9999999999999999999", "99999999999999999999999",
    ]

    @Test("where the quick reading answers, it agrees with Yams' default resolver and its integer")
    func quickTypingAgreesWithTheResolver() {
        var answered = 0
        for text in Self.texts {
            let node = Node(text)
            guard let quick = Node.evidentTag(of: text) else { continue }
            answered += 1
            #expect(quick == Resolver.default.resolveTag(of: node), "\(text)")
            if quick == .int {
                #expect(Node.evidentInteger(text) == node.int, "\(text)")
            }
            #expect(node.tagName == Resolver.default.resolveTag(of: node), "\(text)")
            #expect(node.wholeNumber == node.int, "\(text)")
        }
        #expect(answered >= 8, "the quick reading answered only \(answered) texts")
        // Where it does not answer, the resolver does, through the same property.
        for text in ["Yes", "1.5", "0x1F", "12:30", ".inf", "2026-11-30"] {
            #expect(Node(text).tagName == Resolver.default.resolveTag(of: Node(text)), "\(text)")
        }
    }
}
