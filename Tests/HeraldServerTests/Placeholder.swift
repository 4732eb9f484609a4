import Testing
@Test func placeholder() { #expect(Bool(true)) }
