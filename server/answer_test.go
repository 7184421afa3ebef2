package server_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that a submit answer, written by hand on the hot path, is byte
// for byte the JSON encoding of its decision, with its media type and its
// length declared, for a denial and for an application.
func TestSubmit_AnswerBytes(t *testing.T) {
	e := newEnv(t)
	_, envB := activate(t, e.r, workerB, "b1")
	for _, tc := range []struct {
		id      string
		status  int
		outcome kvfence.Outcome
	}{{workerA, http.StatusForbidden, kvfence.Denied}, {workerB, http.StatusOK, kvfence.Applied}} {
		c := e.client(tc.id)
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+api.PathSubmit, bytes.NewReader(envB))
		req.Header.Set("Content-Type", api.ContentCBOR)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var got api.Submit
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("%s: %v: %q", tc.id, err, raw)
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		enc.Encode(got)
		switch {
		case resp.StatusCode != tc.status || got.Outcome != string(tc.outcome):
			t.Errorf("%s: %d %s, want %d %s", tc.id, resp.StatusCode, raw, tc.status, tc.outcome)
		case !bytes.Equal(raw, want.Bytes()):
			t.Errorf("%s: answer\n%q\nis not its JSON encoding\n%q", tc.id, raw, want.Bytes())
		case resp.Header.Get("Content-Type") != api.ContentJSON:
			t.Errorf("%s: Content-Type %q", tc.id, resp.Header.Get("Content-Type"))
		case resp.Header.Get("Content-Length") != strconv.Itoa(len(raw)):
			t.Errorf("%s: Content-Length %q for %d bytes", tc.id, resp.Header.Get("Content-Length"), len(raw))
		}
		if tc.outcome == kvfence.Denied && got.Detail == "" {
			t.Errorf("%s: a denial without its detail: %s", tc.id, raw)
		}
	}
}

// Ensure that a body shorter than its declared length is answered 400 and
// never decided, and that a media type with parameters is still accepted.
func TestSubmit_DeclaredLength(t *testing.T) {
	e := newEnv(t)
	_, envA := activate(t, e.r, workerA, "a1")
	head := e.r.Head()
	cert, err := pki.Issue(e.ca, pki.Options{Name: "client", URIs: []string{workerA}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", strings.TrimPrefix(e.srv.URL, "https://"), &tls.Config{RootCAs: e.ca.Pool(),
		Certificates: []tls.Certificate{cert.TLS()}, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	short := envA[:len(envA)/2]
	conn.Write([]byte("POST " + api.PathSubmit + " HTTP/1.1\r\nHost: receiver\r\nContent-Type: " + api.ContentCBOR +
		"\r\nContent-Length: " + strconv.Itoa(len(envA)) + "\r\n\r\n"))
	conn.Write(short)
	conn.CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), api.CodeBadRequest) {
		t.Fatalf("a short body: %d %s, want 400 %s", resp.StatusCode, raw, api.CodeBadRequest)
	}
	if e.r.Head() != head {
		t.Fatal("a short body was recorded")
	}
	r := e.must(e.client(workerA), http.MethodPost, api.PathSubmit, api.ContentCBOR+"; foo=bar", envA)
	if r.status != http.StatusOK || r.body["outcome"] != "applied" {
		t.Fatalf("with a media type parameter: %d %s", r.status, r.raw)
	}
}
