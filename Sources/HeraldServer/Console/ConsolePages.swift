import Foundation
import HTTPTypes
import Hummingbird
import Mustache
import NIOCore

/// The console's templates (`Resources/console/*.mustache`, rendered with swift-mustache, which
/// HTML-escapes every `{{value}}`) and its stylesheet, read and parsed once per process: they are
/// part of the build.
struct ConsolePages: Sendable {
    let library: MustacheLibrary
    let stylesheet: [UInt8]
    /// The console's own script: draws the usage chart with the chart library.
    let chartScript: [UInt8]
    /// Chart.js, from Debian's libjs-chart.js (``chartLibraryPath``); nil when it is not installed.
    let chartLibrary: [UInt8]?

    /// Where Debian's libjs-chart.js puts Chart.js.
    static let chartLibraryPath = "/usr/share/javascript/chart.js/chart.min.js"

    /// The templates shipped with Herald.
    static func load() async throws -> ConsolePages {
        try await shipped.value
    }

    private static let shipped = Task { try await read() }

    private static func read() async throws -> ConsolePages {
        guard let directory = Bundle.module.url(forResource: "console", withExtension: nil) else {
            throw ConsoleError(status: .internalServerError, message: "the console's templates are missing from the build")
        }
        let library = try await MustacheLibrary(directory: directory.path)
        let css = (try? Data(contentsOf: directory.appendingPathComponent("console.css"))).map { Array($0) } ?? []
        let script = (try? Data(contentsOf: directory.appendingPathComponent("usage-chart.js"))).map { Array($0) } ?? []
        let chart = FileManager.default.contents(atPath: chartLibraryPath).map { Array($0) }
        return ConsolePages(library: library, stylesheet: css, chartScript: script, chartLibrary: chart)
    }

    /// An HTML page; never cached, never framed, no inline script, forms posted only to the console.
    ///
    /// Every template renders its model inside `{{#page}}`, within a frame that says who is
    /// logged in (``AdminActor/current``) and whether that role may change anything
    /// (`canOperate`): the forms a viewer may not use are not shown.
    func render(_ template: String, _ model: Any, status: HTTPResponse.Status = .ok) -> Response {
        let actor = AdminActor.current
        let frame = ConsoleFrame(
            page: model, viewer: actor.map { ConsoleFrame.Viewer(account: $0.account, role: $0.role.rawValue) },
            canOperate: actor?.may(.operate) ?? false)
        let html = library.render(frame, withTemplate: template) ?? "<!doctype html><title>Herald console</title><p>page unavailable</p>"
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        Self.addSecurityHeaders(&headers)
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: html)))
    }

    func css() -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/css; charset=utf-8"
        headers[.cacheControl] = "max-age=300"
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: stylesheet)))
    }

    /// A script of the console's own origin (no inline script runs: the policy allows none).
    func script(_ bytes: [UInt8]?) -> Response {
        guard let bytes else { return Response(status: .notFound) }
        var headers = HTTPFields()
        headers[.contentType] = "text/javascript; charset=utf-8"
        headers[.cacheControl] = "max-age=300"
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    static func addSecurityHeaders(_ headers: inout HTTPFields) {
        headers[.cacheControl] = "no-store"
        // Scripts only from the console's own files (the usage chart); none inline.
        headers[.contentSecurityPolicy] =
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        headers[HTTPField.Name("X-Frame-Options")!] = "DENY"
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        // Not `no-referrer`: with it, browsers send `Origin: null` on the console's own form posts,
        // which the Origin check refuses. `same-origin` sends no referrer to any other site.
        headers[HTTPField.Name("Referrer-Policy")!] = "same-origin"
    }

    /// 303 See Other to `location` (after a form was handled).
    static func redirect(_ location: String) -> Response {
        var headers = HTTPFields()
        headers[.location] = location
        addSecurityHeaders(&headers)
        return Response(status: .seeOther, headers: headers)
    }
}

// MARK: Page models (what the templates read; every string is escaped when rendered)

// Every page has `title`, `csrf` (the session's CSRF token, shown in every form; nil on the
// login page, which then shows no navigation), `notice` and `error`: what `head.mustache` reads.

/// What every page renders within: the page's own model, and who is looking at it.
struct ConsoleFrame {
    struct Viewer {
        var account: String
        var role: String
    }

    var page: Any
    var viewer: Viewer?
    var canOperate: Bool
}

/// `/console/audit`: the newest audit entries, optionally of one tenant.
struct AuditPage {
    struct Entry {
        var at: String
        var account: String
        var action: String
        var tenant: String?
        var object: String?
        var details: String
        var source: String?
    }

    var title = "Audit log"
    var csrf: String?
    var notice: String? = nil
    var error: String? = nil
    var tenant: String?
    var entries: [Entry]
}

struct LoginPage {
    var title = "Log in"
    var csrf: String? = nil
    var notice: String? = nil
    var error: String?
    /// The login form's own CSRF token (a double-submitted cookie: there is no session yet).
    var loginCSRF: String
}

struct TenantsPage {
    struct Row {
        var id: String
        /// ok, warning (expiring credential, recent failures) or failing (last reload failed, pool errors).
        var health: String
        var auth: String
        var credential: String
        var pool: String
        var lastError: String?
        var sends: Int
        var failures: Int
    }
    struct Failure {
        var file: String
        var message: String
    }
    var title = "Tenants"
    var csrf: String?
    var notice: String?
    var error: String?
    var tenants: [Row]
    var failures: [Failure]
    /// Stored, not computed: templates see stored properties only (through Mirror).
    var hasFailures: Bool
}

struct TenantPage {
    struct Endpoint {
        var environment: String
        var url: String
        var isDefault: Bool
    }
    struct APIKey {
        var name: String
        var tenantID: String
    }
    struct JobRow {
        var id: String
        var tenantID: String
        var state: String
        var created: String
        var items: Int
        var sent: Int
        var failed: Int
        var pending: Int
        /// A cancelled job's items that will not be sent.
        var cancelled: Int
        var percent: Int
        /// Not finished or cancelled yet: the row has a cancel button.
        var cancellable: Bool
    }
    struct InvalidToken {
        var token: String
        var topic: String
        var environment: String
        var reason: String
        var recorded: String
    }
    struct SendResult {
        var status: Int
        var reason: String?
        var apnsID: String
        var environment: String
        var attempts: Int
    }
    struct NewKey {
        var name: String
        var key: String
    }
    /// The settings form, filled with what runs (or with what was typed, when it was refused).
    struct Edit {
        var topics: String
        var production: String
        var development: String
        var developmentIsDefault: Bool
        var caFile: String
        var connections: String
        var maxQueued: String
        var plugins: String
        /// The webhook's URL (its secret is never shown: an empty secret field keeps it).
        var webhookURL: String
        /// The tenant's proxy as its file sets it in short (`none`, or its address); empty: the
        /// server's.
        var proxy: String
    }
    struct Tenant {
        var id: String
        var file: String
        var teamID: String
        var auth: String
        var isToken: Bool
        var keyID: String
        /// A tenant with several token keys: their IDs (the rotation names the one it replaces).
        var otherKeyIDs: [String]
        var severalKeys: Bool
        var credential: String
        var topics: [String]
        var endpoints: [Endpoint]
        var defaultEnvironment: String
        var pool: String
        var plugins: [String]
        var delivery: String
        /// The webhook's URL and where the file sets it; nil: none.
        var webhook: String?
        /// The tenant's outbound proxy, never its credentials.
        var proxy: String
        var lastError: String?
        var sends: Int
        var failures: Int
        var apiKeys: [APIKey]
        var jobs: [JobRow]
        var invalidTokens: [InvalidToken]
        var sendResult: SendResult?
        var newKey: NewKey?
        var edit: Edit
        var usage: Usage?
        var channels: Channels
        var broadcastResult: BroadcastResult?
    }
    /// A tenant's broadcast channels as the store keeps them.
    struct Channels {
        var rows: [ChannelRow]
        var hasRows: Bool
        /// "com.acme.app in development: 3 of 10000", one per app and environment.
        var counts: [String]
        /// More than the rows shown are kept.
        var more: Bool
        /// The bundle IDs the tenant may broadcast to (the creation form's choice).
        var bundles: [String]
        /// The store could not be read.
        var problem: String?
    }
    struct ChannelRow {
        var tenantID: String
        var id: String
        var bundleID: String
        var environment: String
        var storagePolicy: String
        var label: String?
        var created: String
    }
    struct BroadcastResult {
        var status: Int
        var reason: String?
        var requestID: String
        var uniqueID: String?
        var channel: String
        var environment: String
        var attempts: Int
    }
    /// The last 7 days' sends per hour (`GET /admin/usage`'s counts): the chart's series as JSON
    /// in a data attribute, and the totals as text for readers without the chart.
    struct Usage {
        /// `{"hours": [ISO 8601…], "delivered": […], "failed": […]}`, 168 hours, oldest first.
        var series: String
        var delivered: Int64
        var failed: Int64
        var batchItems: Int64
        /// Whether the chart library is there (Debian's libjs-chart.js); without it, the totals only.
        var chart: Bool
    }
    var title: String
    var csrf: String?
    var notice: String?
    var error: String?
    var tenant: Tenant
}

struct OnboardPage {
    /// What was typed, shown again when the form is refused (never the uploaded files).
    struct Form {
        var id = ""
        var teamID = ""
        var topics = ""
        var production = ""
        var development = ""
        var caFile = ""
        var plugins = ""
        var keyID = ""
        var apiKeyName = "default"
        var webhookURL = ""
    }
    struct Created {
        var tenant: String
        var name: String
        var key: String
    }
    var title = "Onboard a tenant"
    var csrf: String?
    var notice: String?
    var error: String?
    var form = Form()
    var created: Created?
}

/// A page with only a message (not found, refused).
struct MessagePage {
    var title: String
    var csrf: String?
    var notice: String?
    var error: String?
}
