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

    /// The bytes of base64url text, padded or not; nil when it is not base64url.
    public static func decode(_ input: some Collection<UInt8>) -> [UInt8]? {
        var text = [UInt8]()
        text.reserveCapacity(input.count + 3)
        for byte in input {
            switch byte {
            case UInt8(ascii: "-"): text.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): text.append(UInt8(ascii: "/"))
            case UInt8(ascii: "="): continue
            default: text.append(byte)
            }
        }
        while text.count % 4 != 0 { text.append(UInt8(ascii: "=")) }
        return Data(base64Encoded: Data(text)).map { Array($0) }
    }
}
