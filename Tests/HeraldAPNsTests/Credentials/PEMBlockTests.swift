import Crypto
import Testing

@testable import HeraldAPNs

@Suite("PEM blocks")
struct PEMBlockTests {
    @Test func aKeyBlockAmongOtherLinesGivesItsDERWithAnyLineEnding() throws {
        let key = P256.Signing.PrivateKey()
        for ending in ["\n", "\r\n"] {
            let text = "# a test key\n" + key.pemRepresentation.replacingOccurrences(of: "\n", with: ending) + ending + "trailing words"
            let blocks = PEMBlock.all(in: text)
            #expect(blocks.count == 1)
            let block = try #require(blocks.first)
            #expect(block.label == "PRIVATE KEY")
            #expect(!block.isEncrypted)
            #expect(block.der == Array(key.derRepresentation))
        }
    }

    @Test func aBlockWithHeaderLinesOrBadBase64HasNoDER() {
        let legacy = "-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\nAAAA\n-----END EC PRIVATE KEY-----\n"
        let block = PEMBlock.all(in: legacy).first
        #expect(block?.isEncrypted == true)
        #expect(block?.der == nil)
        #expect(PEMBlock.all(in: "-----BEGIN PRIVATE KEY-----\n%%%%\n-----END PRIVATE KEY-----\n").first?.der == nil)
    }

    @Test func anUnterminatedOrUnlabelledBlockIsNoBlock() {
        #expect(PEMBlock.all(in: "-----BEGIN PRIVATE KEY-----\nAAAA\n").isEmpty)
        #expect(PEMBlock.all(in: "-----BEGIN -----\nAAAA\n-----END -----\n").isEmpty)
        #expect(PEMBlock.all(in: "-----BEGIN ").isEmpty)
        #expect(PEMBlock.all(in: "").isEmpty)
    }
}
