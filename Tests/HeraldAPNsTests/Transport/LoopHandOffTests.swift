import EventLoopExecutors
import Testing

@Suite("Work handed to an event loop")
struct LoopHandOffTests {
    /// Only the first element appended while no run is scheduled asks for one; a run takes
    /// everything queued before it, in order, and the next append asks for a run again.
    @Test func oneRunIsScheduledForWhatArrivesBeforeIt() {
        let handOff = LoopHandOff<Int>()
        let asked = [1, 2, 3].map { handOff.append($0) }
        #expect(asked == [true, false, false])
        var ran: [Int] = []
        handOff.runQueued { ran.append($0) }
        #expect(ran == [1, 2, 3])
        let askedAgain = handOff.append(4)
        #expect(askedAgain)
        ran = []
        handOff.runQueued { ran.append($0) }
        #expect(ran == [4])
    }

    /// An element appended while a run goes through the queue waits for the next run, which
    /// the append asks for; the run in progress does not take it.
    @Test func anElementAppendedDuringARunWaitsForTheNext() {
        let handOff = LoopHandOff<Int>()
        let asked = handOff.append(0)
        #expect(asked)
        var askedDuringRun: [Bool] = []
        var ran: [Int] = []
        handOff.runQueued { element in
            ran.append(element)
            askedDuringRun.append(handOff.append(element + 10))
            askedDuringRun.append(handOff.append(element + 20))
        }
        #expect(ran == [0])
        #expect(askedDuringRun == [true, false])
        ran = []
        handOff.runQueued { ran.append($0) }
        #expect(ran == [10, 20])
        ran = []
        handOff.runQueued { ran.append($0) }
        #expect(ran.isEmpty)
    }
}
