import Foundation
import HeraldCore
import HeraldStore

extension JobItemResult {
    /// The stored outcome of a notification that APNs answered (success or rejection).
    public init(_ result: borrowing PushResult, finishedAt: Date, attempts: Int = 0) {
        self.init(
            state: result.isSuccess ? .sent : .failed, status: result.status, reason: result.reason?.wireValue,
            message: nil, apnsID: result.notificationID, apnsTimestamp: result.response.timestamp,
            finishedAt: finishedAt, attempts: attempts, uniqueID: result.response.uniqueID)
    }

    /// The stored outcome of a notification that got no APNs answer: refused by Herald (reason is
    /// Herald's code, e.g. `TopicDisallowed`, `RateLimited`) or lost on the way (`TransportFailed`).
    public init(failure error: any Error, apnsID: NotificationID?, finishedAt: Date) {
        if let error = error as? PushError {
            self.init(
                state: .failed, status: nil, reason: error.code.description, message: error.message, apnsID: apnsID,
                finishedAt: finishedAt)
        } else {
            self.init(
                state: .failed, status: nil, reason: "Error", message: "\(error)", apnsID: apnsID,
                finishedAt: finishedAt)
        }
    }
}
