package responder

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// openSCTP opens the IPv4 and IPv6 raw SCTP sockets shared by all SCTP ports
// and serves them; it does nothing if no SCTP port is served. Raw sockets
// cannot tell whether another program serves a port: ports are only checked
// against each other.
func (r *Responder) openSCTP() error {
	ports := map[uint16]Port{}
	for _, p := range r.ports {
		if p.Protocol == SCTP {
			ports[p.Number] = p
		}
	}
	if len(ports) == 0 {
		return nil
	}
	for _, v6 := range []bool{false, true} {
		s, err := openRawSCTP(v6)
		if v6 && errors.Is(err, syscall.EAFNOSUPPORT) {
			continue // a kernel booted without IPv6
		}
		if err != nil {
			return fmt.Errorf("serve sctp ports: %w", err)
		}
		r.sockets = append(r.sockets, s)
		r.wg.Add(1)
		go r.serveSCTP(s, ports)
	}
	return nil
}

// serveSCTP answers the INITs a raw socket receives until it is closed. The
// socket receives every SCTP packet to the namespace: INITs to other ports
// are refused with an ABORT, and everything else (including the INIT-ACKs
// answering a probe run from this namespace) is ignored.
func (r *Responder) serveSCTP(s *rawSocket, ports map[uint16]Port) {
	defer r.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		pkt, err := s.recv(buf)
		if err != nil {
			if r.closing() {
				return
			}
			if !errors.Is(err, errMalformed) {
				r.backoff()
			}
			continue
		}
		reply, ok := r.answerSCTP(pkt, ports)
		if !ok {
			continue
		}
		if err := s.send(reply.marshal(), pkt.Src, pkt.Dst, pkt.Ifindex); err != nil {
			s.send(reply.marshal(), pkt.Src, netip.Addr{}, pkt.Ifindex)
		}
	}
}

// answerSCTP returns the answer to a received packet, if it is an INIT to a
// unicast address: an INIT-ACK whose State Cookie is the responder line for
// a served port, an ABORT for any other port.
func (r *Responder) answerSCTP(pkt rawPacket, ports map[uint16]Port) (sctpPacket, bool) {
	if !pkt.Src.IsValid() || pkt.Dst.IsMulticast() {
		return sctpPacket{}, false
	}
	req, init, err := parseInitRequest(pkt.Payload)
	if err != nil {
		return sctpPacket{}, false
	}
	p, ok := ports[req.DstPort]
	if !ok {
		return newAbort(req, init), true
	}
	line := Line{Identity: r.identity, Port: p, Peer: netip.AddrPortFrom(pkt.Src, req.SrcPort)}
	return newInitAck(req, init, line.Marshal()), true
}
