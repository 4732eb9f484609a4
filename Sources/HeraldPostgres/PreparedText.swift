import Logging
import PostgresNIO

/// The text of a statement the store prepares once a connection: its name, its SQL and its
/// parameters' types (given, so that the server does not infer one the bindings do not match).
/// The statements that run for every claim or commit group are prepared: planning each one again
/// cost the server about as much as running it.
protocol PreparedText {
    static var name: String { get }
    static var sql: String { get }
    static var types: [PostgresDataType] { get }
}

/// A call of the statement `Text` with its parameters, in order; its rows are returned as they
/// come, for the caller to decode as it decodes an unprepared query's.
struct Prepared<Text: PreparedText>: PostgresPreparedStatement {
    static var name: String { Text.name }
    static var sql: String { Text.sql }
    static var bindingDataTypes: [PostgresDataType] { Text.types }
    typealias Row = PostgresRow

    private let bindings: PostgresBindings

    init<each Value: PostgresDynamicTypeEncodable>(_ values: repeat each Value) {
        var bindings = PostgresBindings()
        repeat bindings.append(each values)
        self.bindings = bindings
    }

    func makeBindings() -> PostgresBindings { bindings }

    func decodeRow(_ row: PostgresRow) -> PostgresRow { row }
}

extension PostgresConnection {
    /// The rows of `Text` with `values`, prepared once on this connection.
    func prepared<Text: PreparedText, each Value: PostgresDynamicTypeEncodable>(
        _ text: Text.Type, _ values: repeat each Value, logger: Logger, file: String = #fileID, line: Int = #line
    ) async throws -> [PostgresRow] {
        try await rows(Prepared<Text>(repeat each values), logger: logger, file: file, line: line)
    }
}
