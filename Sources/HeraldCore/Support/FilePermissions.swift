import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Checks on the permission bits of files that hold secrets or customer data.
public enum FilePermissions {
    /// The file's permission bits as octal text (`0644`) when group or others have any access to
    /// it; nil when only its owner has (or it cannot be looked at).
    ///
    /// ```swift
    /// if let mode = FilePermissions.groupOrOthersMode("tenants/keys/acme.p8") { warn(mode) }
    /// ```
    public static func groupOrOthersMode(_ path: String) -> String? {
        // The link itself, not what it points to, as Foundation's file attributes read it.
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        let permissions = Int(info.st_mode) & 0o777
        guard permissions & 0o077 != 0 else { return nil }
        return "0" + String(permissions, radix: 8)
    }
}
