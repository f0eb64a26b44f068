package responder

import (
	"errors"
	"fmt"
	"math/rand/v2"
)

// Values a stateless endpoint advertises in its INIT or INIT-ACK. Nothing
// after the handshake is ever sent, so they only have to be valid.
const (
	sctpWindow  = 65536
	sctpStreams = 1
)

// sctpReply is what a probe made of a packet answering its INIT.
type sctpReply struct {
	Aborted bool   // an ABORT: nothing serves the port
	Cookie  []byte // the State Cookie of an INIT-ACK
}

// randomTag returns a random non-zero verification tag or TSN.
func randomTag() uint32 {
	for {
		if v := rand.Uint32(); v != 0 {
			return v
		}
	}
}

// newInit builds the INIT a probe sends from srcPort to dstPort; tag is the
// probe's initiate tag, which every answer must carry.
func newInit(srcPort, dstPort uint16, tag uint32) sctpPacket {
	init := initChunk{
		Tag: tag, Window: sctpWindow, OutStreams: sctpStreams, InStreams: sctpStreams, TSN: randomTag(),
	}
	return sctpPacket{
		SrcPort: srcPort,
		DstPort: dstPort,
		Tag:     0, // an INIT carries verification tag 0
		Chunks:  []sctpChunk{{Type: chunkInit, Value: init.marshal()}},
	}
}

// parseInitRequest decodes a packet a responder received and returns it and
// its INIT chunk if it is a valid INIT; anything else is an error.
func parseInitRequest(b []byte) (sctpPacket, initChunk, error) {
	p, err := parseSCTP(b)
	if err != nil {
		return sctpPacket{}, initChunk{}, err
	}
	if len(p.Chunks) != 1 || p.Chunks[0].Type != chunkInit {
		return sctpPacket{}, initChunk{}, errors.New("not an INIT packet")
	}
	if p.Tag != 0 {
		return sctpPacket{}, initChunk{}, fmt.Errorf("INIT with verification tag %#x, want 0", p.Tag)
	}
	init, err := parseInit(p.Chunks[0].Value)
	if err != nil {
		return sctpPacket{}, initChunk{}, err
	}
	if init.Tag == 0 || init.OutStreams == 0 || init.InStreams == 0 {
		return sctpPacket{}, initChunk{}, errors.New("INIT with a zero initiate tag or stream count")
	}
	return p, init, nil
}

// newInitAck builds the INIT-ACK answering req (whose INIT chunk is init),
// with the given State Cookie. Its verification tag is the INIT's initiate tag.
func newInitAck(req sctpPacket, init initChunk, cookie []byte) sctpPacket {
	ack := initChunk{
		Tag: randomTag(), Window: sctpWindow, OutStreams: sctpStreams, InStreams: sctpStreams, TSN: randomTag(),
		Params: []sctpParam{{Type: paramStateCookie, Value: cookie}},
	}
	return sctpPacket{
		SrcPort: req.DstPort,
		DstPort: req.SrcPort,
		Tag:     init.Tag,
		Chunks:  []sctpChunk{{Type: chunkInitAck, Value: ack.marshal()}},
	}
}

// newAbort builds the ABORT refusing req. As RFC 9260 section 8.4 (item 3)
// and Linux (sctp_make_abort) do for an INIT, the verification tag is the
// INIT's initiate tag and the T bit is clear.
func newAbort(req sctpPacket, init initChunk) sctpPacket {
	return sctpPacket{
		SrcPort: req.DstPort,
		DstPort: req.SrcPort,
		Tag:     init.Tag,
		Chunks:  []sctpChunk{{Type: chunkAbort}},
	}
}

// parseInitReply decodes a packet a probe received. It reports ok=false for
// anything that does not answer the INIT sent from localPort to remotePort
// with initiate tag tag: other traffic, bad checksums, other probes' replies.
func parseInitReply(b []byte, localPort, remotePort uint16, tag uint32) (sctpReply, bool) {
	p, err := parseSCTP(b)
	if err != nil || p.SrcPort != remotePort || p.DstPort != localPort || len(p.Chunks) == 0 {
		return sctpReply{}, false
	}
	c := p.Chunks[0]
	switch c.Type {
	case chunkAbort:
		// Tag is ours with T clear, or the INIT's 0 reflected with T set.
		reflected := c.Flags&abortFlagT != 0
		if (!reflected && p.Tag == tag) || (reflected && p.Tag == 0) {
			return sctpReply{Aborted: true}, true
		}
	case chunkInitAck:
		if p.Tag != tag {
			return sctpReply{}, false
		}
		ack, err := parseInit(c.Value)
		if err != nil {
			return sctpReply{}, false
		}
		cookie, _ := ack.param(paramStateCookie)
		return sctpReply{Cookie: cookie}, true
	}
	return sctpReply{}, false
}
