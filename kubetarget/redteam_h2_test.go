package kubetarget

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/kubeclient"
	"github.com/kvfence/kvfence/kvfence"
)

// h2Server is an HTTP/2 API server for prod/x written frame by frame, so
// that it can reset a stream after it has applied the update on it.
type h2Server struct {
	mu   sync.Mutex
	puts int
}

func (s *h2Server) serve(t *testing.T, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go s.conn(t, c)
	}
}

func (s *h2Server) conn(t *testing.T, c net.Conn) {
	defer c.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	dec := hpack.NewDecoder(4096, nil)
	var encBuf bytes.Buffer
	enc := hpack.NewEncoder(&encBuf)
	methods := map[uint32]string{}
	respond := func(id uint32, code int, body string) {
		encBuf.Reset()
		enc.WriteField(hpack.HeaderField{Name: ":status", Value: strconv.Itoa(code)})
		enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/json"})
		enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: encBuf.Bytes(), EndHeaders: true})
		fr.WriteData(id, true, []byte(body))
	}
	handle := func(id uint32) {
		switch methods[id] {
		case "GET":
			respond(id, 200, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"prod","resourceVersion":"9","uid":"u0","labels":{"kvfence.dev/scope":"s"}},"data":{"a":"1"}}`)
		case "PUT":
			s.mu.Lock()
			s.puts++
			n := s.puts
			s.mu.Unlock()
			if n == 1 {
				// The update is applied (the object is now at 10), and
				// then the stream is reset.
				fr.WriteRSTStream(id, http2.ErrCodeProtocol)
				return
			}
			respond(id, 409, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the object has been modified","code":409}`)
		}
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.HeadersFrame:
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Error(err)
				return
			}
			for _, hf := range fields {
				if hf.Name == ":method" {
					methods[f.StreamID] = hf.Value
				}
			}
			if f.StreamEnded() {
				handle(f.StreamID)
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				handle(f.StreamID)
			}
		}
	}
}

// Ensure that an update the server reset after applying it is not sent
// again: Go's HTTP/2 transport replays a request whose stream the peer
// reset with PROTOCOL_ERROR when it can rewind the body, and the replay,
// against an object the first update moved on, answers 409, so that a
// write that landed would be recorded a conflict.
func TestApplyNotReplayedAfterStreamReset(t *testing.T) {
	ca, err := pki.NewCA("h2-test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := pki.Issue(ca, pki.Options{Name: "api", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{srvCert.TLS()}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := &h2Server{}
	go s.serve(t, ln)
	d, err := New(Options{Config: &kubeclient.Config{Host: "https://" + ln.Addr().String(), CAData: ca.CertPEM(), BearerToken: "tok"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = d.Apply(ctx, fakeInput)
	s.mu.Lock()
	puts := s.puts
	s.mu.Unlock()
	if puts != 1 {
		t.Errorf("the update was sent %d times; want once", puts)
	}
	if err == nil || errors.Is(err, kvfence.ErrRemoteConflict) || errors.Is(err, kvfence.ErrRemoteNotFound) {
		t.Errorf("Apply = %v, after the server applied the update and reset its stream; want an outcome neither conflict nor not-found (unknown)", err)
	}
}

// Ensure that the server's message cannot break a log line with the
// Unicode line and paragraph separators, which log viewers and JSON
// consumers in browsers take for line ends as they do "\n".
func TestStatusMessageLineSeparators(t *testing.T) {
	for _, in := range []string{"a\u2028b", "a\u2029b", "a\u0085b"} {
		if got := kubeclient.Printable(in); got != "a?b" {
			t.Errorf("kubeclient.Printable(%+q) = %+q; want \"a?b\"", in, got)
		}
	}
}
