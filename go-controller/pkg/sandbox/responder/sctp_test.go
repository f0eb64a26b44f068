package responder

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
)

func TestCRC32cKnownValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want uint32
	}{
		{"check value", []byte("123456789"), 0xe3069283},
		{"RFC 3720 B.4 32 zeros", make([]byte, 32), 0x8a9136aa},
		{"RFC 3720 B.4 32 ones", bytes.Repeat([]byte{0xff}, 32), 0x62a8ab43},
	} {
		if got := crc32c(tc.data); got != tc.want {
			t.Errorf("%s: crc32c = %#08x, want %#08x", tc.name, got, tc.want)
		}
	}
}

// mustHex decodes a hex string, ignoring spaces.
func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInitVector checks the encoding and the checksum byte order against an
// INIT whose checksum was computed by an independent bit-by-bit CRC32c and
// stored least significant byte first (as Linux and Wireshark do).
func TestInitVector(t *testing.T) {
	want := mustHex(t, "9c40 1388 00000000 18d6196e"+ // 40000 -> 5000, tag 0, crc 0x6e19d618
		"01 00 0014 deadbeef 00010000 0001 0001 01020304") // INIT, no parameters
	init := initChunk{Tag: 0xdeadbeef, Window: 65536, OutStreams: 1, InStreams: 1, TSN: 0x01020304}
	p := sctpPacket{SrcPort: 40000, DstPort: 5000, Chunks: []sctpChunk{{Type: chunkInit, Value: init.marshal()}}}
	if got := p.marshal(); !bytes.Equal(got, want) {
		t.Fatalf("marshal:\n got %x\nwant %x", got, want)
	}
	req, got, err := parseInitRequest(want)
	if err != nil {
		t.Fatalf("parseInitRequest: %v", err)
	}
	if req.SrcPort != 40000 || req.DstPort != 5000 || got.Tag != 0xdeadbeef || got.TSN != 0x01020304 {
		t.Errorf("parsed %+v %+v", req, got)
	}
}

// TestInitWithParameterVector is the INIT of Scapy's SCTP regression tests
// (all-zero fields and one IPv4 Address parameter, checksum 40 2c 0b 5f).
func TestInitWithParameterVector(t *testing.T) {
	want := mustHex(t, "0000 0000 00000000 402c0b5f"+
		"01 00 001c 00000000 00000000 0000 0000 00000000 0005 0008 7f000001")
	init := initChunk{Params: []sctpParam{{Type: 5, Value: []byte{127, 0, 0, 1}}}}
	p := sctpPacket{Chunks: []sctpChunk{{Type: chunkInit, Value: init.marshal()}}}
	if got := p.marshal(); !bytes.Equal(got, want) {
		t.Fatalf("marshal:\n got %x\nwant %x", got, want)
	}
	parsed, err := parseSCTP(want)
	if err != nil {
		t.Fatalf("parseSCTP: %v", err)
	}
	c, err := parseInit(parsed.Chunks[0].Value)
	if err != nil {
		t.Fatalf("parseInit: %v", err)
	}
	if v, ok := c.param(5); !ok || !bytes.Equal(v, []byte{127, 0, 0, 1}) {
		t.Errorf("IPv4 Address parameter = %v, %v", v, ok)
	}
}

func TestParseSCTPRejects(t *testing.T) {
	good := newInit(40000, 80, 7).marshal()
	badSum := bytes.Clone(good)
	badSum[20]++ // a byte of the INIT, so the checksum no longer matches
	longChunk := bytes.Clone(good)
	longChunk[15] = 0xff // chunk length beyond the packet
	longChunk = fixChecksum(longChunk)
	for name, b := range map[string][]byte{
		"short":          good[:8],
		"bad checksum":   badSum,
		"chunk too long": longChunk,
		"chunk header":   fixChecksum(append(bytes.Clone(good), 1, 0)),
	} {
		if _, err := parseSCTP(b); err == nil {
			t.Errorf("%s: parseSCTP accepted %x", name, b)
		}
	}
}

// fixChecksum recomputes the checksum of a hand-modified packet.
func fixChecksum(b []byte) []byte {
	sum := sctpChecksum(b)
	b[8], b[9], b[10], b[11] = byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24)
	return b
}

func TestInitAckCarriesCookie(t *testing.T) {
	const tag = 0x11223344
	req, init, err := parseInitRequest(newInit(40000, 5000, tag).marshal())
	if err != nil {
		t.Fatalf("parseInitRequest: %v", err)
	}
	line := Line{Identity: "ns/pod", Port: Port{5000, SCTP}, Peer: netip.MustParseAddrPort("10.0.0.1:40000")}
	ackBytes := newInitAck(req, init, line.Marshal()).marshal()
	if len(ackBytes)%4 != 0 {
		t.Errorf("INIT-ACK of %d bytes is not padded to 4", len(ackBytes))
	}
	ack, _ := parseSCTP(ackBytes)
	if ack.Tag != tag || ack.SrcPort != 5000 || ack.DstPort != 40000 || ack.Chunks[0].Type != chunkInitAck {
		t.Errorf("INIT-ACK header = %+v", ack)
	}
	if got, want := len(ack.Chunks[0].Value), initFixedLen+paramHeaderLen+len(line.Marshal()); got != want {
		t.Errorf("INIT-ACK chunk value length = %d, want %d (chunk length excludes the padding)", got, want)
	}
	reply, ok := parseInitReply(ackBytes, 40000, 5000, tag)
	if !ok || reply.Aborted || !bytes.Equal(reply.Cookie, line.Marshal()) {
		t.Fatalf("parseInitReply = %+v, %v", reply, ok)
	}
	if _, ok := parseInitReply(ackBytes, 40000, 5000, tag+1); ok {
		t.Error("INIT-ACK accepted with another verification tag")
	}
	if _, ok := parseInitReply(ackBytes, 40001, 5000, tag); ok {
		t.Error("INIT-ACK accepted for another local port")
	}
	if _, _, err := parseInitRequest(ackBytes); err == nil {
		t.Error("a responder would answer an INIT-ACK")
	}
}

func TestAbortRefusesInit(t *testing.T) {
	const tag = 0x55667788
	req, init, _ := parseInitRequest(newInit(40000, 9, tag).marshal())
	b := newAbort(req, init).marshal()
	p, err := parseSCTP(b)
	if err != nil {
		t.Fatal(err)
	}
	// RFC 9260 8.4 (3): answering an INIT, the tag is its initiate tag, T clear.
	if p.Tag != tag || p.Chunks[0].Type != chunkAbort || p.Chunks[0].Flags&abortFlagT != 0 {
		t.Errorf("ABORT = %+v", p)
	}
	if reply, ok := parseInitReply(b, 40000, 9, tag); !ok || !reply.Aborted {
		t.Errorf("parseInitReply(ABORT) = %+v, %v", reply, ok)
	}
	reflected := sctpPacket{SrcPort: 9, DstPort: 40000, Chunks: []sctpChunk{{Type: chunkAbort, Flags: abortFlagT}}}
	if reply, ok := parseInitReply(reflected.marshal(), 40000, 9, tag); !ok || !reply.Aborted {
		t.Errorf("ABORT with the reflected tag 0 and T set: %+v, %v", reply, ok)
	}
	if _, ok := parseInitReply(newAbort(req, initChunk{Tag: tag + 1}).marshal(), 40000, 9, tag); ok {
		t.Error("ABORT accepted with another tag")
	}
}

func TestParseIPv4(t *testing.T) {
	hdr := mustHex(t, "46000000 00000000 40840000 0a000001 0a000002 00000000") // IHL 6: one option word
	pkt, err := parseIPv4(append(hdr, 1, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if pkt.Src != netip.MustParseAddr("10.0.0.1") || pkt.Dst != netip.MustParseAddr("10.0.0.2") ||
		!bytes.Equal(pkt.Payload, []byte{1, 2, 3}) {
		t.Errorf("parseIPv4 = %+v", pkt)
	}
	if _, err := parseIPv4(hdr[:10]); err == nil {
		t.Error("parseIPv4 accepted a truncated header")
	}
}
