package responder

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"time"
)

// Session is a long-lived TCP connection to a responder: after its line the responder
// echoes, so each Echo proves the established connection still carries data both ways.
type Session struct {
	conn   net.Conn
	reader *bufio.Reader
	Reply  Line
	seq    int
}

// Dial opens a session. Like Probe, it must be called on an OS thread in the source
// network namespace; the session may be used from any goroutine afterwards.
func Dial(ctx context.Context, target Target, timeout time.Duration) (*Session, error) {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, network(target), target.addrPort().String())
	if err != nil {
		return nil, err
	}
	s := &Session{conn: conn, reader: bufio.NewReader(conn)}
	conn.SetDeadline(time.Now().Add(timeout))
	line, err := s.reader.ReadString('\n')
	if err == nil {
		s.Reply, err = ParseLine(line)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("session to %s: read the responder line: %w", target, err)
	}
	return s, nil
}

// Echo sends one line and waits for it to come back.
func (s *Session) Echo(timeout time.Duration) error {
	s.seq++
	msg := fmt.Sprintf("echo %d\n", s.seq)
	s.conn.SetDeadline(time.Now().Add(timeout))
	if _, err := s.conn.Write([]byte(msg)); err != nil {
		return fmt.Errorf("echo %d: write: %w", s.seq, err)
	}
	got, err := s.reader.ReadString('\n')
	if err != nil {
		return fmt.Errorf("echo %d: read: %w", s.seq, err)
	}
	if got != msg {
		return fmt.Errorf("echo %d: got %q back", s.seq, got)
	}
	return nil
}

// Close ends the session.
func (s *Session) Close() error { return s.conn.Close() }
