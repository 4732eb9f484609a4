import GRDB

extension Row {
    /// The first row of `statement`, read in place by `read`: GRDB's `Row.fetchOne` copies
    /// every column of the row (values and names) before the caller reads it, which costs more
    /// than the lookup on the job's hot reads (a job's reference for every commit group, a chunk
    /// for every claim). The row is only valid inside `read`.
    static func readFirst<T>(
        _ statement: Statement, arguments: StatementArguments, _ read: (Row) throws -> T
    ) throws -> T? {
        let cursor = try Row.fetchCursor(statement, arguments: arguments)
        return try withExtendedLifetime(cursor) {
            guard let row = try cursor.next() else { return nil }
            return try read(row)
        }
    }
}
