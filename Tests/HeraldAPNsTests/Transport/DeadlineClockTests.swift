import HeraldCore
import NIOCore
import Testing

@testable import HeraldAPNs

@Suite("A send's deadline on the connection's clock")
struct DeadlineClockTests {
    @Test("a push instant is the NIO deadline of the same moment: both read the monotonic clock")
    func sameClock() {
        for _ in 0..<100 {
            let before = NIODeadline.now()
            let instant = PushInstant.now
            let after = NIODeadline.now()
            let deadline = TenantTransport.nioDeadline(instant)
            #expect(before <= deadline && deadline <= after, "\(before) \(deadline) \(after)")
        }
    }

    @Test("a deadline 30 s ahead is 30 s ahead for the connection too")
    func ahead() {
        let deadline = TenantTransport.nioDeadline(PushInstant.now.advanced(by: .seconds(30)))
        let remaining = deadline - NIODeadline.now()
        #expect(remaining <= .seconds(30) && remaining > .seconds(29))
    }
}
