import Foundation

/// Checks on the permission bits of files that hold secrets or customer data.
public enum FilePermissions {
    /// The file's permission bits as octal text (`0644`) when group or others have any access to
    /// it; nil when only its owner has (or it cannot be looked at).
    ///
    /// ```swift
    /// if let mode = FilePermissions.groupOrOthersMode("tenants/keys/acme.p8") { warn(mode) }
    /// ```
    public static func groupOrOthersMode(_ path: String) -> String? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
            let permissions = (attributes[.posixPermissions] as? NSNumber)?.intValue,
            permissions & 0o077 != 0
        else { return nil }
        return "0" + String(permissions & 0o777, radix: 8)
    }
}
