package serving

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

// serve runs h with timeouts t behind Limit(l) on a loopback port and returns its address.
func serve(t *testing.T, h http.Handler, tm Timeouts, l Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := tm.Server(h)
	go func() { _ = srv.Serve(Limit(ln, l, logrus.New())) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func ok() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
}

// closedByServer reports whether the server closes c (EOF or reset) within d.
func closedByServer(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	if ne, isNet := err.(net.Error); isNet && ne.Timeout() {
		return false
	}
	return err != nil
}

func get(t *testing.T, addr string) (string, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.Status + " " + string(b), err
}

// The attack: one client opens connections and sends nothing (slowloris). Past PerHost
// its connections are closed at once; the ones it holds are dropped after ReadHeader;
// then a well-behaved client is served again.
func TestConnectionFloodFromOneClientIsBounded(t *testing.T) {
	tm := Timeouts{ReadHeader: 500 * time.Millisecond, Read: time.Second, Write: time.Second, Idle: time.Second}
	addr := serve(t, ok(), tm, Limits{Total: 64, PerHost: 4})
	var held []net.Conn
	for i := 0; i < 4; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	time.Sleep(100 * time.Millisecond) // let the server accept them
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if !closedByServer(extra, 300*time.Millisecond) {
		t.Errorf("a 5th idle connection from one client was kept (PerHost 4)")
	}
	for i, c := range held {
		if !closedByServer(c, 3*time.Second) {
			t.Errorf("idle connection %d outlived the header timeout", i)
		}
	}
	if got, err := get(t, addr); err != nil || got != "200 OK ok" {
		t.Errorf("after the flood: %q %v, want 200 OK ok", got, err)
	}
}

// The total bound holds whatever the client addresses (unix sockets count as one here,
// so Total is what refuses).
func TestTotalBound(t *testing.T) {
	tm := Timeouts{ReadHeader: 5 * time.Second, Read: 5 * time.Second, Write: 5 * time.Second, Idle: 5 * time.Second}
	addr := serve(t, ok(), tm, Limits{Total: 2})
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := get(t, addr); err == nil {
		t.Errorf("a 3rd connection was served with Total 2")
	}
}

// A client that sends headers forever, or a body slowly, is cut off.
func TestSlowRequestIsCutOff(t *testing.T) {
	tm := Timeouts{ReadHeader: 300 * time.Millisecond, Read: 600 * time.Millisecond, Write: time.Second, Idle: time.Second}
	addr := serve(t, ok(), tm, Limits{Total: 8, PerHost: 8})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n")
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := io.WriteString(c, "X-Slow: 1\r\n"); err != nil {
			return // cut off
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("a client trickling headers for 5 s was still connected (ReadHeader 300ms)")
}

func TestLoopbackOnly(t *testing.T) {
	h := LoopbackOnly(ok())
	for remote, want := range map[string]int{
		"127.0.0.1:4000": http.StatusOK, "[::1]:4000": http.StatusOK, "[::ffff:127.0.0.1]:4000": http.StatusOK,
		"10.244.1.7:4000": http.StatusForbidden, "[fd00::7]:4000": http.StatusForbidden, "@": http.StatusForbidden,
	} {
		r := httptest.NewRequest(http.MethodGet, "/status", nil)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("from %s: %d, want %d", remote, w.Code, want)
		}
	}
}

func TestIsLoopbackAddress(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:9092": true, "[::1]:9092": true, "localhost:9092": true,
		":9092": false, "0.0.0.0:9092": false, "10.0.0.1:9092": false, "bad": false} {
		if got := IsLoopbackAddress(addr); got != want {
			t.Errorf("IsLoopbackAddress(%q) = %v", addr, got)
		}
	}
}
