package kubetarget

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/kubeclient"
	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that no answer to an update that a server (or what sits between
// it and the receiver) can shape makes Apply report a conflict or a
// missing object for a write that may have landed, or success for one
// whose object did not come back: a truncated, oversized or compressed-
// oversized success, a redirect, a protocol switch and a success that is
// no object are all errors that are neither sentinel nor *StatusError (the
// receiver records them unknown); a final 409 after an informational
// answer is the conflict it says.
func TestApplyAnswersTheServerShapes(t *testing.T) {
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	zw.Write([]byte(`{"kind":"ConfigMap","data":{"a":"`))
	zw.Write(bytes.Repeat([]byte("x"), MaxResponseBody+10))
	zw.Close()
	for _, c := range []struct {
		name     string
		raw      string
		conflict bool
	}{
		{name: "200 truncated", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"kind\":\"ConfigMap\""},
		{name: "200 oversized", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + strings.Repeat(" ", MaxResponseBody+1) + "{}"},
		{name: "200 compressed past the bound", raw: fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n", bomb.Len()) + bomb.String()},
		{name: "200 a Status, not the object", raw: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 39\r\n\r\n{\"kind\":\"Status\",\"status\":\"Success\"}   "},
		{name: "204 no content", raw: "HTTP/1.1 204 No Content\r\n\r\n"},
		{name: "307 redirect", raw: "HTTP/1.1 307 Temporary Redirect\r\nLocation: /api/v1/namespaces/prod/configmaps/y\r\nContent-Length: 0\r\n\r\n"},
		{name: "101 switching protocols", raw: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"},
		{name: "103 then 409", raw: "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", conflict: true},
		{name: "409 truncated", raw: "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", conflict: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var puts atomic.Int32
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					io.WriteString(w, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"prod","resourceVersion":"9","uid":"u0","labels":{"kvfence.dev/scope":"s"}},"data":{"a":"1"}}`)
					return
				}
				puts.Add(1)
				io.Copy(io.Discard, r.Body)
				conn, buf, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				buf.WriteString(c.raw)
				buf.Flush()
				conn.Close()
			}))
			defer srv.Close()
			ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
			d, err := New(Options{Config: &kubeclient.Config{Host: srv.URL, CAData: ca}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := d.Apply(ctx, fakeInput)
			var se *StatusError
			switch {
			case c.conflict && !errors.Is(err, kvfence.ErrRemoteConflict):
				t.Errorf("Apply = %v; want the conflict the final answer says", err)
			case !c.conflict && (err == nil || errors.Is(err, kvfence.ErrRemoteConflict) || errors.Is(err, kvfence.ErrRemoteNotFound)):
				t.Errorf("Apply = %+v, %v; want an error that is neither conflict nor not-found", st, err)
			case !c.conflict && errors.As(err, &se) && se.Code >= 200 && se.Code < 300:
				t.Errorf("Apply = %v: a success reported as a refusal", err)
			}
			if n := puts.Load(); n != 1 {
				t.Errorf("%d updates sent; want 1", n)
			}
		})
	}
}
