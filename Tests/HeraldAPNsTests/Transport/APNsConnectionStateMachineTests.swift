import NIOCore
import Testing

@testable import HeraldAPNs

@Suite("APNsConnectionStateMachine")
struct APNsConnectionStateMachineTests {
    let t0 = NIODeadline.uptimeNanoseconds(1_000_000_000)

    func readyMachine(maxStreams: Int? = 1, configuration: APNsConnectionStateMachine.Configuration = .init()) -> APNsConnectionStateMachine {
        var machine = APNsConnectionStateMachine(configuration: configuration, now: t0)
        _ = machine.settingsReceived(maxConcurrentStreams: maxStreams, now: t0)
        return machine
    }

    @Test("one stream until the first token is accepted, then many")
    func streamLimitOneThenMany() {
        var machine = APNsConnectionStateMachine(now: t0)
        #expect(machine.openStream(now: t0) == .refuse(.notReady))
        #expect(machine.settingsReceived(maxConcurrentStreams: 1, now: t0) == .ready(maxStreams: 1))
        #expect(machine.openStream(now: t0) == .open(1))
        #expect(machine.openStream(now: t0) == .refuse(.noSpareStream))
        #expect(machine.streamClosed(now: t0) == .none)
        #expect(machine.settingsReceived(maxConcurrentStreams: 500, now: t0) == .maxStreamsChanged(500))
        #expect(machine.spareStreams == 500)
        #expect(machine.openStream(now: t0) == .open(3))
        #expect(machine.openStream(now: t0) == .open(5))
        #expect(machine.spareStreams == 498)
        #expect(machine.settingsReceived(maxConcurrentStreams: 500, now: t0) == .none)
        #expect(machine.settingsReceived(maxConcurrentStreams: nil, now: t0) == .none)
    }

    @Test("no MAX_CONCURRENT_STREAMS means unlimited, capped by the ceiling")
    func ceiling() {
        var configuration = APNsConnectionStateMachine.Configuration()
        configuration.streamCeiling = 64
        var machine = APNsConnectionStateMachine(configuration: configuration, now: t0)
        #expect(machine.settingsReceived(maxConcurrentStreams: nil, now: t0) == .ready(maxStreams: 64))
        #expect(machine.settingsReceived(maxConcurrentStreams: 100_000, now: t0) == .none)
        #expect(machine.settingsReceived(maxConcurrentStreams: 10, now: t0) == .maxStreamsChanged(10))
    }

    @Test("a limit drop stops new streams until enough close")
    func limitDrop() {
        var machine = readyMachine(maxStreams: 10)
        for _ in 0..<6 { _ = machine.openStream(now: t0) }
        #expect(machine.settingsReceived(maxConcurrentStreams: 2, now: t0) == .maxStreamsChanged(2))
        #expect(machine.openStream(now: t0) == .refuse(.noSpareStream))
        for _ in 0..<4 { _ = machine.streamClosed(now: t0) }
        #expect(machine.openStreams == 2)
        #expect(machine.openStream(now: t0) == .refuse(.noSpareStream))
        _ = machine.streamClosed(now: t0)
        #expect(machine.openStream(now: t0) == .open(13))
    }

    @Test("GOAWAY: no new streams, those at or below last-stream-id finish, then close")
    func goAwayDrains() {
        var machine = readyMachine(maxStreams: 10)
        for _ in 0..<5 { _ = machine.openStream(now: t0) }  // 1, 3, 5, 7, 9
        let action = machine.goAwayReceived(lastStreamID: 5, streamsAbove: 2, now: t0)
        #expect(action == .drain(refuseAbove: 5, closeNow: false))
        #expect(machine.state == .draining(lastStreamID: 5, openStreams: 3))
        #expect(machine.openStream(now: t0) == .refuse(.draining))
        #expect(machine.streamClosed(now: t0) == .none)
        #expect(machine.streamClosed(now: t0) == .none)
        #expect(machine.streamClosed(now: t0) == .closeConnection)
        #expect(machine.isClosed)
    }

    @Test("GOAWAY with nothing left below last-stream-id closes at once")
    func goAwayCloseNow() {
        var machine = readyMachine(maxStreams: 10)
        _ = machine.openStream(now: t0)
        _ = machine.openStream(now: t0)
        #expect(machine.goAwayReceived(lastStreamID: 0, streamsAbove: 2, now: t0) == .drain(refuseAbove: 0, closeNow: true))
        #expect(machine.isClosed)
    }

    @Test("a second GOAWAY can only lower the last stream id")
    func secondGoAway() {
        var machine = readyMachine(maxStreams: 10)
        for _ in 0..<4 { _ = machine.openStream(now: t0) }  // 1, 3, 5, 7
        #expect(machine.goAwayReceived(lastStreamID: Int32.max, streamsAbove: 0, now: t0) == .drain(refuseAbove: Int32.max, closeNow: false))
        #expect(machine.goAwayReceived(lastStreamID: 3, streamsAbove: 2, now: t0) == .drain(refuseAbove: 3, closeNow: false))
        #expect(machine.state == .draining(lastStreamID: 3, openStreams: 2))
    }

    @Test("PING after the idle interval, close when it is not answered")
    func pingHealthCheck() {
        var configuration = APNsConnectionStateMachine.Configuration()
        configuration.pingInterval = .seconds(60)
        configuration.pingTimeout = .seconds(10)
        configuration.idleTimeout = nil
        var machine = readyMachine(configuration: configuration)
        #expect(machine.tick(now: t0 + .seconds(59)) == .none)
        guard case .sendPing(let first) = machine.tick(now: t0 + .seconds(60)) else {
            Issue.record("expected a PING")
            return
        }
        #expect(machine.tick(now: t0 + .seconds(65)) == .none)
        machine.pingAckReceived(data: first, now: t0 + .seconds(66))
        #expect(machine.tick(now: t0 + .seconds(80)) == .none)
        guard case .sendPing(let second) = machine.tick(now: t0 + .seconds(126)) else {
            Issue.record("expected a second PING")
            return
        }
        #expect(second != first)
        machine.frameReceived(now: t0 + .seconds(130))  // other frames do not answer a PING
        #expect(machine.tick(now: t0 + .seconds(136)) == .closePingTimedOut)
        #expect(machine.isClosed)
    }

    @Test("an idle connection closes after the idle timeout; one with streams does not")
    func idleTimeout() {
        var configuration = APNsConnectionStateMachine.Configuration()
        configuration.pingInterval = nil
        configuration.idleTimeout = .seconds(100)
        var busy = readyMachine(maxStreams: 10, configuration: configuration)
        _ = busy.openStream(now: t0)
        #expect(busy.tick(now: t0 + .seconds(200)) == .none)
        _ = busy.streamClosed(now: t0 + .seconds(200))
        #expect(busy.tick(now: t0 + .seconds(299)) == .none)
        #expect(busy.tick(now: t0 + .seconds(300)) == .closeIdle)

        var idle = readyMachine(configuration: configuration)
        #expect(idle.tick(now: t0 + .seconds(100)) == .closeIdle)
        #expect(idle.openStream(now: t0 + .seconds(100)) == .refuse(.closed))
    }

    @Test("a handshake that does not finish in time closes")
    func startTimeout() {
        var configuration = APNsConnectionStateMachine.Configuration()
        configuration.startTimeout = .seconds(5)
        var machine = APNsConnectionStateMachine(configuration: configuration, now: t0)
        #expect(machine.tick(now: t0 + .seconds(4)) == .none)
        #expect(machine.tick(now: t0 + .seconds(5)) == .closeStartTimedOut)
        #expect(machine.wasReady == false)
    }

    @Test("drain finishes open streams, then closes; close is at once")
    func drainAndClose() {
        var machine = readyMachine(maxStreams: 10)
        _ = machine.openStream(now: t0)
        _ = machine.openStream(now: t0)
        #expect(machine.drainRequested() == .draining(closeNow: false))
        #expect(machine.state == .draining(lastStreamID: 3, openStreams: 2))
        #expect(machine.openStream(now: t0) == .refuse(.draining))
        #expect(machine.streamClosed(now: t0) == .none)
        #expect(machine.streamClosed(now: t0) == .closeConnection)

        var idle = readyMachine()
        #expect(idle.drainRequested() == .draining(closeNow: true))

        var open = readyMachine(maxStreams: 10)
        _ = open.openStream(now: t0)
        #expect(open.closeRequested() == .closeChannel)
        #expect(open.closeRequested() == .none)
        #expect(open.openStream(now: t0) == .refuse(.closed))
    }
}
