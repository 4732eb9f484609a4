/// A small, fast, seedable random number generator (SplitMix64): the same seed gives the same
/// sequence. For jitter, fault injection and apns-ids, which must be unique, not secret; never
/// for secrets. The one copy for every module (the transport's backoff, the sandbox's faults,
/// ``NotificationIDGenerator``).
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { self.state = seed }

    /// Seeded from the system's generator.
    public init() {
        var system = SystemRandomNumberGenerator()
        self.state = system.next()
    }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A uniform value in [0, 1).
    public mutating func nextUnit() -> Double {
        Double(next() >> 11) * (1.0 / 9_007_199_254_740_992.0)
    }
}
