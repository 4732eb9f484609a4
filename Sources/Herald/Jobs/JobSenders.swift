import HeraldCore
import HeraldStore
import Logging

/// What a job's two kinds of senders share (``JobSendTasks``, ``JobCallbackSender``): each
/// takes an item from the job's feed, a slot of its commit groups (``OutcomeGroups``) and a
/// tenant permit, sends it with ``BatchItemDelivery``, and hands the attempt's step to the writer.
enum JobSenders {
    /// A claimed item that is not new: a due retry (`retrying`), which a claim returns whatever
    /// its index (a new item is `pending`). The feeder waits for a due retry's change to be
    /// committed before it claims again.
    static func isDueRetry(_ item: JobItem) -> Bool { isDueRetry(item.state) }

    /// The rule itself, on an item's state alone (read in place, where passing the item would copy it).
    static func isDueRetry(_ state: JobItemState) -> Bool { state != .pending }

    /// Hands an attempt's step to the writer (or frees its slot).
    /// - Returns: false when the job's sends stop (the feed is stopped).
    static func hand(
        _ step: consuming BatchItemDelivery.Step, watched: Bool, to outcomes: OutcomeGroups, feed: JobFeed
    ) -> Bool {
        switch consume step {
        case .write(let change):
            outcomes.add(change, watched: watched)
            return true
        case .notOurs:
            outcomes.cancel(watched: watched)
            return true
        case .leftPending:
            outcomes.cancel(watched: watched)
            feed.stop(.stopping)
            return false
        case .pause:
            outcomes.cancel(watched: watched)
            feed.stop(.pause)
            return false
        }
    }
}

/// A job's sends through the `async` pipeline: send tasks, each taking the feed's next item, then
/// under a slot of the job's commit groups and a tenant permit sending it and handing its
/// outcome to the writer, until the feed runs out or stops. A task does not wait for its item's
/// outcome to be written.
struct JobSendTasks: Sendable {
    let job: Job
    let delivery: BatchItemDelivery
    let state: JobRunnerState

    /// Runs `tasks` send tasks; returns when they all ended.
    func send(_ feed: JobFeed, outcomes: OutcomeGroups, permits pool: PermitPool, tasks: Int) async {
        await withDiscardingTaskGroup { sends in
            for _ in 0..<tasks {
                sends.addTask { await work(feed, outcomes: outcomes, permits: pool) }
            }
        }
    }

    /// One send task.
    nonisolated(nonsending) private func work(_ feed: JobFeed, outcomes: OutcomeGroups, permits pool: PermitPool) async {
        state.adjust { $0.sendTasks += 1 } peak: { $0.peakSendTasks = max($0.peakSendTasks, $0.sendTasks) }
        defer { state.adjust { $0.sendTasks -= 1 } peak: { _ in } }
        while let item = await feed.next() {
            // The feeder waits for a due retry's change to be committed before it claims again.
            let retry = JobSenders.isDueRetry(item)
            defer { state.handBack(feed) }
            guard await state.reserveCommitSlot(outcomes) else {
                feed.stop(.pause)
                return
            }
            await pool.acquire()
            guard !state.isStopping else {
                feed.stop(.stopping)
                pool.release()
                outcomes.cancel(watched: retry)
                return
            }
            // Stopped meanwhile (a failed write, a paused tenant): the item stays pending.
            guard feed.stopReason == nil else {
                pool.release()
                outcomes.cancel(watched: retry)
                return
            }
            state.adjust { $0.itemsInFlight += 1 } peak: { $0.peakItemsInFlight = max($0.peakItemsInFlight, $0.itemsInFlight) }
            let step = await delivery.deliver(item, of: job, marks: feed.marks, routes: feed.routes)
            state.adjust { $0.itemsInFlight -= 1 } peak: { _ in }
            pool.release()
            guard JobSenders.hand(step, watched: retry, to: outcomes, feed: feed) else { return }
        }
    }
}

/// A job's sends without a task each: one driving task takes the feed's items, a slot of the
/// job's commit groups and a tenant permit each, as ``JobSendTasks`` does, and starts each send
/// with ``BatchItemDelivery/start(_:of:routes:leaseChecked:completion:)``; the send's end
/// (on a connection's event loop) frees the permit, hands the step to the writer and the item
/// back to the feed — for all the sends that end in one pass of that loop together
/// (``LoopTickGathering``). The task waits only for an item, a slot or permits; it takes up to
/// ``permitsTakenAhead(ofPool:)`` permits at a time, and gives back those it has not used before
/// it waits for anything else. On a shared store it first reads the leases of the item the feed
/// gave and of those ready behind it (``LeaseCheckedItems``): one that is not its claimant's any
/// more is given up unsent, and a failed read pauses the job. An item that needs the `async` form
/// (its tenant reloaded to at-most-once meanwhile) is sent by a child task, under the same permit.
struct JobCallbackSender: Sendable {
    let job: Job
    let delivery: BatchItemDelivery
    let store: any PushStore
    let configuration: JobRunnerConfiguration
    let state: JobRunnerState
    let logger: Logger

    /// How many permits a job's driving task takes at once when it must wait for them: an eighth
    /// of the tenant's (at least one). It is then woken once for that many ended sends, not once
    /// or twice for each, and starts that many in one turn; meanwhile at least seven eighths of
    /// the tenant's permits' sends stay on the wire.
    static func permitsTakenAhead(ofPool permits: Int) -> Int { max(1, permits / 8) }

    /// A send that ended: its step, and whether its item was a due retry (watched by the writer).
    /// A tuple, which is taken apart without copying its step.
    typealias EndedSend = (step: BatchItemDelivery.Step, watched: Bool)

    /// Sends the feed's items; returns when the feed runs out or stops and every send started
    /// has ended.
    nonisolated(nonsending) func send(_ feed: JobFeed, outcomes: OutcomeGroups, permits pool: PermitPool) async {
        let (state, job, logger) = (self.state, self.job, self.logger)
        state.adjust { $0.sendTasks += 1 } peak: { $0.peakSendTasks = max($0.peakSendTasks, $0.sendTasks) }
        defer { state.adjust { $0.sendTasks -= 1 } peak: { _ in } }
        let started = SendsUnderWay()
        // The sends' ends, handled together per event-loop pass: the counters, the writer's
        // groups, the feed, the permits and the sends under way, each once for all of them.
        let ended = LoopTickGathering<EndedSend> { ended in
            let count = ended.count
            state.adjust { $0.itemsInFlight -= count } peak: { _ in }
            // Each moved out, not copied (a copy retains every string it holds), last first: the
            // sends of one pass end in no particular order.
            while let (step, watched) = ended.popLast() {
                _ = JobSenders.hand(step, watched: watched, to: outcomes, feed: feed)
            }
            state.handBack(feed, count: count)
            pool.release(count)
            started.end(count)
        }
        // A send's end, made once for each kind of item rather than once a send.
        let endFresh: @Sendable (consuming BatchItemDelivery.Step) -> Void = { ended.add((step: $0, watched: false)) }
        let endRetry: @Sendable (consuming BatchItemDelivery.Step) -> Void = { ended.add((step: $0, watched: true)) }
        let delivery = self.delivery
        // On a shared store each item's lease is checked before its send, a group at a time.
        var leases = configuration.exclusiveStore ? nil : LeaseCheckedItems(permits: pool.permits)
        // Permits taken ahead (``PermitPool/acquire(upTo:)``), each for a send still to start:
        // given back before any other wait, so that none idles while this task waits.
        let gathering = Self.permitsTakenAhead(ofPool: pool.permits)
        await withDiscardingTaskGroup { asyncSends in
            var ahead = 0
            func giveBackAhead() {
                pool.release(ahead)
                ahead = 0
            }
            sending: while true {
                let item: JobItem
                var lease = LeaseCheckedItems.Lease.ours
                if leases != nil {
                    if leases?.isEmpty == true {
                        // A store read follows: no permit is held across it.
                        giveBackAhead()
                        guard let first = await feed.next() else { break sending }
                        await leases?.check(first, from: feed, of: job, store: store, claimant: configuration.claimantName)
                    }
                    guard let next = leases?.removeFirst() else { break sending }
                    (item, lease) = next
                } else if let ready = feed.nextIfReady() {
                    item = ready
                } else {
                    giveBackAhead()
                    guard let next = await feed.next() else { break sending }
                    item = next
                }
                let retry = JobSenders.isDueRetry(item)
                var reserved = outcomes.reserveIfFree()
                if reserved == nil {
                    giveBackAhead()
                    reserved = await state.waitForCommitSlot(outcomes)
                }
                guard reserved == true else {
                    feed.stop(.pause)
                    state.handBack(feed)
                    break
                }
                switch lease {
                case .ours:
                    break
                case .notOurs:
                    // It got an outcome, or another claimant took its lease: not sent, not written.
                    _ = JobSenders.hand(.notOurs, watched: retry, to: outcomes, feed: feed)
                    state.handBack(feed)
                    continue
                case .unreadable(let error):
                    logger.storeFailure(
                        "cannot check a job item's lease before its send; it is not sent now", error: error,
                        metadata: ["herald.index": "\(item.index)"])
                    _ = JobSenders.hand(.pause, watched: retry, to: outcomes, feed: feed)
                    state.handBack(feed)
                    break sending
                }
                if ahead == 0 { ahead = await pool.acquire(upTo: gathering) }
                ahead -= 1
                // Stopping, or stopped meanwhile (a failed write, a paused tenant): the item stays pending.
                guard !state.isStopping, feed.stopReason == nil else {
                    if state.isStopping { feed.stop(.stopping) }
                    pool.release()
                    outcomes.cancel(watched: retry)
                    state.handBack(feed)
                    break
                }
                state.adjust { $0.itemsInFlight += 1 } peak: { $0.peakItemsInFlight = max($0.peakItemsInFlight, $0.itemsInFlight) }
                started.begin()
                let end = retry ? endRetry : endFresh
                if !delivery.start(item, of: job, routes: feed.routes, leaseChecked: leases != nil, completion: end) {
                    asyncSends.addTask {
                        end(await delivery.deliver(item, of: job, marks: feed.marks, routes: feed.routes))
                    }
                }
            }
            giveBackAhead()
        }
        // Checked but not started (the feed stopped): they stay as they are in the store.
        while leases?.removeFirst() != nil { state.handBack(feed) }
        await started.waitUntilNone()
    }
}
