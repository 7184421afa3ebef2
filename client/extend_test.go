package client_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/kvfence"
)

// Ensure that POST /v1/grant/extend extends the active grant for an
// administrator, recording the administrator as the entry's actor; that a
// worker, even the grant's executor, is forbidden; and that the refusals
// cross the wire as kvfence's sentinels with their status, so that
// errors.Is works on the client as it does embedded.
func TestClient_ExtendGrant(t *testing.T) {
	s := serve(t)
	ctx := context.Background()
	op, w := s.client(operator), s.client(workerA)
	if _, err := op.CreateScope(ctx, scope); err != nil {
		t.Fatal(err)
	}
	if _, err := op.CreateTarget(ctx, scope, scope, []byte(`{"data":{"retention_days":"30"}}`)); err != nil {
		t.Fatal(err)
	}
	act, err := op.Activate(ctx, kvfence.ActivateRequest{Scope: scope, Executor: workerA, Claim: "c1", Request: request(t, "a1")})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := w.ExtendGrant(ctx, kvfence.ExtendRequest{Grant: act.ID, TTL: time.Hour}); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("worker's extension = %v, want ErrForbidden", err)
	}
	before := time.Now()
	g, err := op.ExtendGrant(ctx, kvfence.ExtendRequest{Grant: act.ID, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if g.ID != act.ID || g.NotAfter.Before(before.Add(time.Hour)) || g.NotAfter.After(time.Now().Add(time.Hour)) || g.CreatedAt.IsZero() {
		t.Fatalf("extended grant %+v", g)
	}
	stored, _, err := op.Grant(ctx, act.ID)
	if err != nil || !stored.NotAfter.Equal(g.NotAfter) {
		t.Fatalf("stored grant ends %s (%v), the extension answered %s", stored.NotAfter, err, g.NotAfter)
	}
	var last kvfence.Event
	if err := op.Events(ctx, s.r.Head().Seq, func(e kvfence.Event) bool { last = e; return true }); err != nil {
		t.Fatal(err)
	}
	if last.Kind != kvfence.KindGrantExtended || last.Grant != act.ID || last.Actor != operator {
		t.Fatalf("last entry %+v, want the extension by %s", last.Entry, operator)
	}

	for _, tc := range []struct {
		name   string
		req    kvfence.ExtendRequest
		want   error
		status int
	}{
		{"past the maximum", kvfence.ExtendRequest{Grant: act.ID, TTL: 25 * time.Hour}, kvfence.ErrTTLTooLong, http.StatusBadRequest},
		{"not later", kvfence.ExtendRequest{Grant: act.ID, TTL: time.Minute}, kvfence.ErrInvalidWindow, http.StatusBadRequest},
		{"unknown grant", kvfence.ExtendRequest{Grant: "00000000000000000000000000000000", TTL: time.Hour}, kvfence.ErrGrantNotActive, http.StatusConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := op.ExtendGrant(ctx, tc.req)
			var ce *client.Error
			if !errors.Is(err, tc.want) || !errors.As(err, &ce) || ce.Status != tc.status {
				t.Fatalf("ExtendGrant = %v, want %v with status %d", err, tc.want, tc.status)
			}
		})
	}

	// A ttl that is not positive is refused before anything is sent.
	if _, err := op.ExtendGrant(ctx, kvfence.ExtendRequest{Grant: act.ID, TTL: 0}); !errors.Is(err, kvfence.ErrInvalidWindow) {
		t.Fatalf("zero ttl = %v, want ErrInvalidWindow", err)
	}
	if _, err := op.Hold(ctx, kvfence.HoldRequest{Scopes: []string{scope}, Reason: "lease lost"}); err != nil {
		t.Fatal(err)
	}
	_, err = op.ExtendGrant(ctx, kvfence.ExtendRequest{Grant: act.ID, TTL: 2 * time.Hour})
	var ce *client.Error
	if !errors.Is(err, kvfence.ErrGrantNotActive) || !errors.As(err, &ce) || ce.Status != http.StatusConflict || ce.Code != "grant_not_active" {
		t.Fatalf("extension after the hold = %v, want grant_not_active (409)", err)
	}
	if res, err := w.SubmitAssignment(ctx, act.Assignment()); err != nil || res.Reason != kvfence.ReasonReceiverHeld {
		t.Fatalf("submit after the hold = %+v, %v", res, err)
	}
}

// Ensure that the route reads its body strictly and refuses a ttl that is
// not a positive duration before the receiver sees it.
func TestServer_ExtendGrantBadBody(t *testing.T) {
	s := serve(t)
	hc := s.httpClient(operator)
	for _, body := range []string{
		`{"grant":"00000000000000000000000000000000","ttl":"0s"}`,
		`{"grant":"00000000000000000000000000000000","ttl":"-1m"}`,
		`{"grant":"00000000000000000000000000000000","ttl":"soon"}`,
		`{"grant":"00000000000000000000000000000000"}`,
		`{"grant":"00000000000000000000000000000000","ttl":"1h","Grant":"x"}`,
		`{"grant":"00000000000000000000000000000000","ttl":"1h","extra":1}`,
	} {
		resp, err := hc.Post(s.srv.URL+api.PathGrantExtend, api.ContentJSON, bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		var e api.Error
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest || e.Error.Code != api.CodeBadRequest {
			t.Errorf("%s: status %d, %+v (%v), want 400 bad_request", body, resp.StatusCode, e, err)
		}
	}
	resp, err := hc.Get(s.srv.URL + api.PathGrantExtend)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d, want 405", resp.StatusCode)
	}
}

// httpClient returns a plain HTTP client whose certificate carries id, for
// requests the Go client would never send.
func (s *served) httpClient(id string) *http.Client {
	s.t.Helper()
	cert, err := pki.Issue(s.ca, pki.Options{Name: id, URIs: []string{id}, Client: true})
	if err != nil {
		s.t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.ca.Pool(), Certificates: []tls.Certificate{cert.TLS()},
		MinVersion: tls.VersionTLS13}}
	s.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}
