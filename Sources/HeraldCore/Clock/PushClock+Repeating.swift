extension PushClock {
    /// Calls `body` every `interval` on this clock until the task is cancelled: the periodic work
    /// of a long-running service (a rescan, a heartbeat, a flush), timed on the clock the service
    /// was given, so that a test steps it instead of waiting.
    ///
    /// Each wait begins when the last call ended: calls never overlap, and a slow one delays the
    /// next instead of piling up behind it.
    ///
    /// ```swift
    /// await clock.repeating(every: .seconds(5), startingNow: true) { await heartbeat.beat() }
    /// ```
    /// - Parameter startingNow: true: the first call at once; false: after one interval.
    public func repeating(every interval: Duration, startingNow: Bool = false, _ body: () async -> Void) async {
        if startingNow, !Task.isCancelled { await body() }
        while !Task.isCancelled {
            do {
                try await sleep(until: now.advanced(by: interval))
            } catch {
                return
            }
            await body()
        }
    }
}
