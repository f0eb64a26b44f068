package responder

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The subset of SCTP (RFC 9260) the responder and the probe speak over raw
// sockets: an INIT, answered by an INIT-ACK whose State Cookie carries the
// responder line, or by an ABORT when nothing serves the port.
const (
	ipProtoSCTP = 132 // IANA protocol number of SCTP

	sctpHeaderLen  = 12 // source port, destination port, verification tag, checksum
	chunkHeaderLen = 4  // type, flags, length
	initFixedLen   = 16 // initiate tag, a_rwnd, streams, initial TSN
	paramHeaderLen = 4  // type, length

	chunkInit    = 1
	chunkInitAck = 2
	chunkAbort   = 6

	paramStateCookie = 7

	// abortFlagT is the T bit of an ABORT: set when the verification tag is
	// the one the receiver sent (reflected), clear when it is the receiver's own.
	abortFlagT = 0x01
)

// sctpPacket is an SCTP common header and its chunks. The checksum is
// computed by marshal and verified by parseSCTP.
type sctpPacket struct {
	SrcPort uint16
	DstPort uint16
	Tag     uint32 // verification tag
	Chunks  []sctpChunk
}

// sctpChunk is one chunk; Value excludes the chunk header and the padding.
type sctpChunk struct {
	Type  uint8
	Flags uint8
	Value []byte
}

// initChunk is the value of an INIT or an INIT-ACK chunk, which share a layout.
type initChunk struct {
	Tag        uint32 // initiate tag
	Window     uint32 // advertised receiver window credit (a_rwnd)
	OutStreams uint16
	InStreams  uint16
	TSN        uint32 // initial TSN
	Params     []sctpParam
}

// sctpParam is one variable-length parameter (TLV) of an INIT or INIT-ACK.
type sctpParam struct {
	Type  uint16
	Value []byte
}

// crc32c is the CRC32c (Castagnoli) of the concatenation of parts.
func crc32c(parts ...[]byte) uint32 {
	table := crc32.MakeTable(crc32.Castagnoli) // cached by the crc32 package
	var crc uint32
	for _, p := range parts {
		crc = crc32.Update(crc, table, p)
	}
	return crc
}

// sctpChecksum is the checksum of an SCTP packet: the CRC32c of the packet
// with its checksum field taken as zero (RFC 9260 Appendix A).
func sctpChecksum(pkt []byte) uint32 {
	var zero [4]byte
	return crc32c(pkt[:8], zero[:], pkt[sctpHeaderLen:])
}

// pad4 rounds n up to a multiple of 4, the alignment of chunks and parameters.
func pad4(n int) int {
	return (n + 3) &^ 3
}

// marshal encodes the packet and fills in its checksum. The CRC32c is stored
// least significant byte first, which is what Linux (cpu_to_le32) and
// Wireshark use; this is the reflected-CRC convention of RFC 9260 Appendix A.
func (p sctpPacket) marshal() []byte {
	b := make([]byte, sctpHeaderLen, sctpHeaderLen+64)
	binary.BigEndian.PutUint16(b[0:], p.SrcPort)
	binary.BigEndian.PutUint16(b[2:], p.DstPort)
	binary.BigEndian.PutUint32(b[4:], p.Tag)
	for _, c := range p.Chunks {
		b = append(b, c.Type, c.Flags, 0, 0)
		binary.BigEndian.PutUint16(b[len(b)-2:], uint16(chunkHeaderLen+len(c.Value)))
		b = append(b, c.Value...)
		b = append(b, make([]byte, pad4(len(c.Value))-len(c.Value))...)
	}
	binary.LittleEndian.PutUint32(b[8:], sctpChecksum(b))
	return b
}

// parseSCTP decodes an SCTP packet (starting at the common header) and
// verifies its checksum.
func parseSCTP(b []byte) (sctpPacket, error) {
	if len(b) < sctpHeaderLen {
		return sctpPacket{}, fmt.Errorf("sctp packet of %d bytes is shorter than its header", len(b))
	}
	if got, want := binary.LittleEndian.Uint32(b[8:]), sctpChecksum(b); got != want {
		return sctpPacket{}, fmt.Errorf("sctp checksum %#08x, want %#08x", got, want)
	}
	p := sctpPacket{
		SrcPort: binary.BigEndian.Uint16(b[0:]),
		DstPort: binary.BigEndian.Uint16(b[2:]),
		Tag:     binary.BigEndian.Uint32(b[4:]),
	}
	for rest := b[sctpHeaderLen:]; len(rest) > 0; {
		c, n, err := parseChunk(rest)
		if err != nil {
			return sctpPacket{}, err
		}
		p.Chunks = append(p.Chunks, c)
		rest = rest[n:]
	}
	return p, nil
}

// parseChunk decodes the chunk at the start of b and returns it with the
// number of bytes it takes, padding included.
func parseChunk(b []byte) (sctpChunk, int, error) {
	if len(b) < chunkHeaderLen {
		return sctpChunk{}, 0, fmt.Errorf("truncated sctp chunk header (%d bytes)", len(b))
	}
	n := int(binary.BigEndian.Uint16(b[2:]))
	if n < chunkHeaderLen || n > len(b) {
		return sctpChunk{}, 0, fmt.Errorf("sctp chunk type %d: bad length %d (%d bytes left)", b[0], n, len(b))
	}
	c := sctpChunk{Type: b[0], Flags: b[1], Value: b[chunkHeaderLen:n]}
	return c, min(pad4(n), len(b)), nil
}

// marshal encodes an INIT or INIT-ACK chunk value.
func (c initChunk) marshal() []byte {
	b := make([]byte, initFixedLen, initFixedLen+32)
	binary.BigEndian.PutUint32(b[0:], c.Tag)
	binary.BigEndian.PutUint32(b[4:], c.Window)
	binary.BigEndian.PutUint16(b[8:], c.OutStreams)
	binary.BigEndian.PutUint16(b[10:], c.InStreams)
	binary.BigEndian.PutUint32(b[12:], c.TSN)
	for i, p := range c.Params {
		b = append(b, 0, 0, 0, 0)
		binary.BigEndian.PutUint16(b[len(b)-4:], p.Type)
		binary.BigEndian.PutUint16(b[len(b)-2:], uint16(paramHeaderLen+len(p.Value)))
		b = append(b, p.Value...)
		if i < len(c.Params)-1 { // the chunk's own padding covers the last one
			b = append(b, make([]byte, pad4(len(p.Value))-len(p.Value))...)
		}
	}
	return b
}

// parseInit decodes an INIT or INIT-ACK chunk value.
func parseInit(v []byte) (initChunk, error) {
	if len(v) < initFixedLen {
		return initChunk{}, fmt.Errorf("init chunk of %d bytes is shorter than its fixed part", len(v))
	}
	c := initChunk{
		Tag:        binary.BigEndian.Uint32(v[0:]),
		Window:     binary.BigEndian.Uint32(v[4:]),
		OutStreams: binary.BigEndian.Uint16(v[8:]),
		InStreams:  binary.BigEndian.Uint16(v[10:]),
		TSN:        binary.BigEndian.Uint32(v[12:]),
	}
	for rest := v[initFixedLen:]; len(rest) > 0; {
		if len(rest) < paramHeaderLen {
			return initChunk{}, errors.New("truncated init parameter header")
		}
		n := int(binary.BigEndian.Uint16(rest[2:]))
		if n < paramHeaderLen || n > len(rest) {
			return initChunk{}, fmt.Errorf("init parameter: bad length %d (%d bytes left)", n, len(rest))
		}
		c.Params = append(c.Params, sctpParam{
			Type:  binary.BigEndian.Uint16(rest),
			Value: rest[paramHeaderLen:n],
		})
		rest = rest[min(pad4(n), len(rest)):]
	}
	return c, nil
}

// param returns the value of the first parameter of the given type.
func (c initChunk) param(typ uint16) ([]byte, bool) {
	for _, p := range c.Params {
		if p.Type == typ {
			return p.Value, true
		}
	}
	return nil, false
}
