import Foundation
import Testing

/// What a durability test takes from the environment when it is run at full size by hand: how
/// many tokens its batch holds and which `herald` binary its children run. Without the variables
/// the tests run at the size CI runs them, on the debug build next to the tests.
enum FullSizeRun {
    /// `variable` as a whole number within `range`, else `standard`. A value that is set but not
    /// such a number is recorded as the test's issue (the run goes on at `standard`).
    static func count(_ variable: String, standard: Int, range: ClosedRange<Int>) -> Int {
        guard let raw = ProcessInfo.processInfo.environment[variable], !raw.isEmpty else { return standard }
        guard let count = Int(raw), range.contains(count) else {
            Issue.record("\(variable) must be a whole number from \(range.lowerBound) to \(range.upperBound), not \(raw)")
            return standard
        }
        return count
    }

    /// The `herald` binary named by `variable` (nil when it is not an executable file), else the
    /// debug build next to the tests.
    static func binary(_ variable: String) -> String? {
        if let path = ProcessInfo.processInfo.environment[variable], !path.isEmpty {
            return FileManager.default.isExecutableFile(atPath: path) ? path : nil
        }
        return CrashResumeTests.heraldBinary
    }
}
