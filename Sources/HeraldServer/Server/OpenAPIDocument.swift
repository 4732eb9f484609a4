import Foundation

/// The API's OpenAPI 3.1 description, `Resources/openapi.yaml`, served at `/openapi.yaml`.
public enum OpenAPIDocument {
    /// The document's text.
    public static let text: String = {
        guard let url = Bundle.module.url(forResource: "openapi", withExtension: "yaml"),
            let text = try? String(contentsOf: url, encoding: .utf8)
        else { return "openapi: 3.1.0\ninfo: {title: Herald API, version: unavailable}\npaths: {}\n" }
        return text
    }()

    static var bytes: [UInt8] { Array(text.utf8) }
}
