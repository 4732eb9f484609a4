import Foundation

/// Base64url without padding (RFC 4648 5, as JWS uses it: RFC 7515 2): provider tokens, API
/// keys and session ids.
public enum Base64URL {
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        let standard = Data(bytes).base64EncodedData()
        var out: [UInt8] = []
        out.reserveCapacity(standard.count)
        for byte in standard {
            switch byte {
            case UInt8(ascii: "+"): out.append(UInt8(ascii: "-"))
            case UInt8(ascii: "/"): out.append(UInt8(ascii: "_"))
            case UInt8(ascii: "="): continue
            default: out.append(byte)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
