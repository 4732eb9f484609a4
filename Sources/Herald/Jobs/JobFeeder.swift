import Foundation
import HeraldCore
import HeraldStore
import Logging

/// A job's feeder (``JobRun``): claims the job's pending items one claim at a time into its
/// ``JobFeed``. The next claim is made as soon as no more than the senders' count (`lowWater`)
/// of the last one are left to hand out (the claim is back before they run dry), while the
/// others are on the wire — their indexes lie below the claim's hint, and the store never
/// returns a pending item below it (``PushStore/claimsFromIndexStrictly``) — once the due
/// retries of the last claim have their changes committed (by then they were all sent, so none
/// is left in the feed for the claim to return again). When the store may ignore the hint, and
/// when a claim finds nothing, it first waits until every item is handed out and handed back and
/// its change written, so that the claim sees every outcome and next attempt.
///
/// A due retry is claimed whatever its index (and whoever of this runner holds it), and it stays
/// a due retry in the store until its new outcome or next attempt is committed: handed back is
/// not enough (a claim made between the two would send it again). The claim's new items need no
/// wait: one answered with a next attempt becomes a due retry only when that change is
/// committed, after its send ended. When only retries not due yet are left, it waits for the
/// first (``DueRetryWait``), woken at once when the job's feed or the runner stops.
struct JobFeeder: Sendable {
    let job: Job
    let store: any PushStore
    let configuration: JobRunnerConfiguration
    let clock: any PushClock
    let state: JobRunnerState
    /// Sleeps until the job's first retry is due, when only retries not due yet are left.
    let retryWait: DueRetryWait
    let logger: Logger

    /// How a job's feeder ended.
    enum End: Sendable {
        /// No pending item is left for this runner (or only items leased elsewhere).
        case done
        /// The runner stops, or the feed stopped (its reason says why).
        case stopped
        /// A claim failed: the job pauses.
        case paused
        /// The job was cancelled (a claim found it so).
        case cancelled
    }

    /// Claims the job's pending items into `feed` until none is left for this runner, the feed
    /// stops or the runner stops.
    func feed(_ feed: JobFeed, outcomes: OutcomeGroups, lowWater: Int) async -> End {
        let claimant = configuration.claimantName
        let claimSize = max(1, configuration.claimSize)
        let leaseSeconds = configuration.lease.secondsValue
        // Pending items below this were claimed in this run: the next claim searches from here
        // (a pending item below, leased elsewhere and released, is found by the job's next run:
        // the job is not finished while it waits).
        var fromIndex = 0
        // True when no item is taken and every change is written (a claim sees every outcome).
        var settled = true
        while !state.isStopping {
            if !settled {
                if !store.claimsFromIndexStrictly {
                    guard await Self.settle(feed, outcomes) else { return .stopped }
                    settled = true
                } else {
                    guard await feed.waitUntilRemaining(atMost: lowWater) else { return .stopped }
                    // The last claim's due retries (watched) are due retries in the store until
                    // their changes are committed: the next claim would return them again.
                    guard await outcomes.waitUntilWatchedDurable() else { return .stopped }
                }
            }
            let now = clock.date
            let claimed: [JobItem]
            do {
                claimed = try await store.claimPendingItems(
                    tenant: job.tenant, job: job.id, limit: claimSize, claimant: claimant, now: now,
                    leaseUntil: now.addingTimeInterval(leaseSeconds), fromIndex: fromIndex)
            } catch {
                logger.storeFailure("cannot claim job items; the job pauses", error: error)
                return .paused
            }
            if claimed.isEmpty {
                if !settled {
                    // The items still on the wire may come back as due retries: claim again once
                    // their changes are written.
                    guard await Self.settle(feed, outcomes) else { return .stopped }
                    settled = true
                    continue
                }
                // A cancelled job claims nothing: end here rather than wait for its retries.
                if await isCancelled() { return .cancelled }
                // Items deferred to a later attempt: wait for the first to be due, then claim again.
                if await retryWait.wait(), !state.isStopping, feed.stopReason == nil { continue }
                return .done
            }
            // By position: an item is not copied (a copy retains every string and array it holds).
            var dueRetries = 0
            for position in claimed.indices {
                if JobSenders.isDueRetry(claimed[position].state) {
                    dueRetries += 1
                } else {
                    fromIndex = max(fromIndex, claimed[position].index + 1)
                }
            }
            outcomes.watch(dueRetries)
            state.adjust { $0.claimedItemsHeld += claimed.count } peak: {
                $0.peakClaimedItemsHeld = max($0.peakClaimedItemsHeld, $0.claimedItemsHeld)
            }
            feed.refill(consume claimed)
            settled = false
        }
        return .stopped
    }

    /// Waits until every item is handed out, the senders handed back every item they took and
    /// the writer wrote every change. False when the feed stopped or a write failed.
    private static func settle(_ feed: JobFeed, _ outcomes: OutcomeGroups) async -> Bool {
        guard await feed.waitUntilHandedOut(), await feed.waitUntilIdle() else { return false }
        return await outcomes.waitUntilDurable()
    }

    /// True when the job was cancelled in the store (read when a claim found nothing: a cancel
    /// made through another instance that did not reach this one ends the job here).
    private func isCancelled() async -> Bool {
        do {
            return try await store.job(tenant: job.tenant, id: job.id)?.state == .cancelled
        } catch {
            logger.storeFailure("cannot read the job's state", error: error)
            return false
        }
    }
}
