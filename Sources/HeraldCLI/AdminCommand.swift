import ArgumentParser
import Foundation
import HeraldConfig
import HeraldPostgres
import HeraldProcess
import HeraldServer
import HeraldStore
import Logging

// `herald admin accounts|tokens`: admin accounts and their tokens, through a running
// `herald serve`'s admin API (as the account or break-glass token in the admin token variable),
// or with --store on the store itself: how the first owner is made before anyone can call the API.

/// `herald admin`
struct AdminCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admin",
        abstract: "Admin accounts (owner, operator, viewer) and their API tokens.",
        discussion: """
            Through the admin API by default: the variable api.admin_token_env names (HERALD_ADMIN_TOKEN) holds the \
            caller's credential, an account token (hat_…) or the break-glass admin token. With --store, the command \
            opens the store of the server configuration itself (SQLite while herald serve is stopped; PostgreSQL at \
            any time): how the first owner account and its token are made. Every change is written to the audit log.
            """,
        subcommands: [Accounts.self, Tokens.self])

    struct Accounts: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "accounts", abstract: "List, create, change and delete admin accounts.",
            subcommands: [List.self, Create.self, SetRole.self, SetPassword.self, Delete.self])
    }

    struct Tokens: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "tokens", abstract: "List, create and revoke an admin account's tokens.",
            subcommands: [List.self, Create.self, Revoke.self])
    }
}

extension AdminCommand.Accounts {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "The admin accounts.")
        @OptionGroup var api: AdminAPIOptions

        func run() async throws {
            try await api.call(.GET, "/admin/accounts", command: "admin accounts list")
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create", abstract: "Create an admin account; with --store, also print its first token (once).")
        @OptionGroup var api: AdminAPIOptions
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "The account's name: 1 to 64 of a-z 0-9 . _ -, starting with a letter or digit.") var name: String
        @Option(name: .long, help: "owner, operator or viewer.") var role: String

        func run() async throws {
            guard store.store else {
                try await api.call(.POST, "/admin/accounts", body: ["name": name, "role": role], command: "admin accounts create")
                return
            }
            guard AdminAccount.validName(name) else {
                throw ValidationError("the name must be 1 to 64 of a-z 0-9 . _ -, starting with a letter or digit")
            }
            guard let parsed = AdminRole(rawValue: role) else { throw ValidationError("--role must be owner, operator or viewer") }
            try await store.withDirectory(api) { directory in
                let now = Date()
                guard try await directory.createAdminAccount(AdminAccount(name: name, role: parsed, createdAt: now)) else {
                    throw AdminStoreError(message: "an admin account named \(name) exists")
                }
                try await directory.appendAudit(
                    AuditEntry(
                        at: now, account: AuditEntry.storeDirect, action: AuditAction.accountCreate.rawValue, object: name,
                        details: ["role": parsed.rawValue]))
                try await AdminStoreOption.printNewToken(directory, account: name, name: "first", days: nil)
            }
        }
    }

    struct SetRole: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "set-role", abstract: "Change an account's role.")
        @OptionGroup var api: AdminAPIOptions
        @Argument(help: "The account's name.") var name: String
        @Option(name: .long, help: "owner, operator or viewer.") var role: String

        func run() async throws {
            try await api.call(
                .PATCH, "/admin/accounts/\(TenantsPath.escape(name))", body: ["role": role], command: "admin accounts set-role")
        }
    }

    struct SetPassword: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-password",
            abstract: "Set an account's console password (read from an environment variable, never an argument).")
        @OptionGroup var api: AdminAPIOptions
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "The account's name.") var name: String
        @Option(name: .customLong("password-env"), help: "The environment variable that holds the new password.")
        var passwordVariable: String

        func run() async throws {
            guard let password = ProcessInfo.processInfo.environment[passwordVariable], !password.isEmpty else {
                throw ValidationError("\(passwordVariable) is not set")
            }
            guard store.store else {
                try await api.call(
                    .PUT, "/admin/accounts/\(TenantsPath.escape(name))/password", body: ["password": password],
                    command: "admin accounts set-password")
                return
            }
            if let refusal = AdminPasswords.refusal(password) { throw ValidationError("the password \(refusal)") }
            let hash = try await AdminPasswords(cost: try store.settings(api).api.passwordCost).hash(password)
            try await store.withDirectory(api) { directory in
                guard try await directory.setAdminPassword(hash: hash, account: name) else {
                    throw AdminStoreError(message: "there is no admin account named \(name)")
                }
                try await directory.appendAudit(
                    AuditEntry(at: Date(), account: AuditEntry.storeDirect, action: AuditAction.passwordSet.rawValue, object: name))
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "delete", abstract: "Delete an account and its tokens.")
        @OptionGroup var api: AdminAPIOptions
        @Argument(help: "The account's name.") var name: String

        func run() async throws {
            try await api.call(.DELETE, "/admin/accounts/\(TenantsPath.escape(name))", command: "admin accounts delete")
        }
    }
}

extension AdminCommand.Tokens {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "An account's tokens (never the tokens themselves).")
        @OptionGroup var api: AdminAPIOptions
        @Argument(help: "The account's name.") var account: String

        func run() async throws {
            try await api.call(.GET, "/admin/accounts/\(TenantsPath.escape(account))/tokens", command: "admin tokens list")
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "create", abstract: "A new token for an account; prints it (once).")
        @OptionGroup var api: AdminAPIOptions
        @OptionGroup var store: AdminStoreOption
        @Argument(help: "The account's name.") var account: String
        @Option(name: .long, help: "What the token is for (1 to 64 printable characters).") var name: String
        @Option(name: .customLong("expires-in-days"), help: "Days until it stops working (1 to 3650; default: never).")
        var expiresInDays: Int?

        func run() async throws {
            if let days = expiresInDays, !(1...3650).contains(days) { throw ValidationError("--expires-in-days must be 1 to 3650") }
            guard store.store else {
                var body: [String: Any] = ["name": name]
                if let expiresInDays { body["expires_in_days"] = expiresInDays }
                try await api.call(
                    .POST, "/admin/accounts/\(TenantsPath.escape(account))/tokens", body: body, command: "admin tokens create")
                return
            }
            try await store.withDirectory(api) { directory in
                try await AdminStoreOption.printNewToken(directory, account: account, name: name, days: expiresInDays)
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "revoke", abstract: "Revoke a token by its id (at_…).")
        @OptionGroup var api: AdminAPIOptions
        @Argument(help: "The account's name.") var account: String
        @Argument(help: "The token's id.") var id: String

        func run() async throws {
            try await api.call(
                .DELETE, "/admin/accounts/\(TenantsPath.escape(account))/tokens/\(TenantsPath.escape(id))",
                command: "admin tokens revoke")
        }
    }
}

/// `--store`: work on the server configuration's store itself instead of the admin API.
struct AdminStoreOption: ParsableArguments {
    @Flag(name: .long, help: "Open the store itself (SQLite: herald serve must be stopped) instead of calling the admin API.")
    var store = false

    /// Opens the store `api`'s configuration names, runs `body` on it, closes it.
    /// The server configuration the store is named in (`--config`, else `config/herald.yaml` if present).
    func settings(_ api: AdminAPIOptions) throws -> ServerConfiguration {
        do {
            return try ServerConfiguration.load(
                file: api.configFile ?? ServerConfiguration.defaultFile, required: api.configFile != nil)
        } catch {
            throw ValidationError(error.description)
        }
    }

    func withDirectory(_ api: AdminAPIOptions, _ body: (any AdminDirectory) async throws -> Void) async throws {
        let settings = try settings(api)
        var logger = Logger(label: "herald.admin")
        logger.logLevel = .warning
        do {
            switch settings.storage {
            case .sqlite:
                let directory = (settings.storagePath as NSString).deletingLastPathComponent
                if !directory.isEmpty { try SQLitePushStore.createPrivateDirectory(directory) }
                // One process per SQLite file: refused while herald serve holds it.
                let lock = try StoreLock(databasePath: settings.storagePath)
                defer { _ = lock }
                try await body(try SQLitePushStore(path: settings.storagePath))
            case .postgres(let postgres):
                let opened = try await HeraldProcess.openPostgres(postgres, logger: logger)
                do {
                    try await body(opened)
                } catch {
                    await opened.close()
                    throw error
                }
                await opened.close()
            }
        } catch let error as AdminStoreError {
            FileHandle.standardError.write(Data("herald admin: \(error.message)\n".utf8))
            throw ExitStatus.rejected
        } catch {
            FileHandle.standardError.write(Data("herald admin: \(error)\n".utf8))
            throw ExitStatus.invalid
        }
    }

    /// Makes a token for `account`, audits it, prints it as the API's answer does.
    static func printNewToken(_ directory: any AdminDirectory, account: String, name: String, days: Int?) async throws {
        guard (1...64).contains(name.unicodeScalars.count), name.unicodeScalars.allSatisfy({ (0x20...0x7e).contains($0.value) })
        else { throw AdminStoreError(message: "--name must be 1 to 64 printable ASCII characters") }
        let now = Date()
        let (secret, id) = AdminTokens.generate()
        let record = AdminTokenRecord(
            id: id, account: account, name: name, createdAt: now, expiresAt: days.map { now.addingTimeInterval(Double($0) * 86_400) })
        do {
            try await directory.addAdminToken(record, sha256: APIKeys.sha256Hex(of: secret))
        } catch let error as StoreError where error.isNotFound {
            throw AdminStoreError(message: "there is no admin account named \(account)")
        }
        var details = ["name": name]
        if let days { details["expires_in_days"] = String(days) }
        try await directory.appendAudit(
            AuditEntry(
                at: now, account: AuditEntry.storeDirect, action: AuditAction.tokenCreate.rawValue, object: "\(account)/\(id)",
                details: details))
        let answer: [String: Any] = ["account": account, "token": ["id": id, "name": name], "secret": secret]
        let data = try JSONSerialization.data(withJSONObject: answer, options: [.sortedKeys])
        print(String(decoding: data, as: UTF8.self))
    }
}

struct AdminStoreError: Error {
    var message: String
}
