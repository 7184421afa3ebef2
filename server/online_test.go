package server_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvfence/kvfence/backup"
	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/api"
	"github.com/kvfence/kvfence/internal/pki"
	"github.com/kvfence/kvfence/kvfence"
	"github.com/kvfence/kvfence/server"
)

// apiClient returns a client of the env's server presenting a certificate
// with id.
func (e *env) apiClient(id string) *client.Client {
	e.t.Helper()
	cert, err := pki.Issue(e.ca, pki.Options{Name: "client", URIs: []string{id}, Client: true})
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := client.New(e.srv.URL, &tls.Config{RootCAs: e.ca.Pool(), Certificates: []tls.Certificate{cert.TLS()},
		MinVersion: tls.VersionTLS13})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// Ensure that while workers submit over the API and the operator holds and
// activates, the served receiver verifies itself whole every time, and
// every backup it sends is consistent: Save verifies it (the chain ending
// at its checkpoint, the state the checkpoint commits to), and the
// restored database verifies against its checkpoint again.
func TestOnline_ConsistentUnderConcurrentSubmits(t *testing.T) {
	e := newEnv(t)
	op := e.apiClient(operator)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	var failed atomic.Value
	// The operator's side: activate a grant for worker A, hold, again.
	envs := make(chan []byte, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(envs)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			req := request(t, fmt.Sprintf("a-%d", i))
			g, err := e.r.Admin().Activate(ctx, kvfence.ActivateRequest{Scope: scope, Executor: workerA, Claim: "c", Request: req})
			var env []byte
			if err == nil {
				env, err = kvfence.EncodeEnvelope(&kvfence.Envelope{V: 1, Scope: scope, Epoch: g.Epoch, Grant: g.ID,
					Executor: workerA, Claim: "c", Request: req})
			}
			if err != nil {
				failed.Store(err)
				return
			}
			select {
			case envs <- env:
			default:
			}
			if _, err := e.r.Admin().Hold(ctx, kvfence.HoldRequest{Scopes: []string{scope}, Reason: "next"}); err != nil {
				failed.Store(err)
				return
			}
			writes.Add(2)
		}
	}()
	// Workers submit whatever envelope they last got, over mTLS: applied,
	// already applied or denied, each an audit entry.
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := e.client(workerA)
			var env []byte
			for {
				select {
				case <-stop:
					return
				case got, ok := <-envs:
					if !ok {
						return
					}
					env = got
				default:
				}
				if env == nil {
					continue
				}
				resp, err := do(c, http.MethodPost, e.srv.URL+api.PathSubmit, api.ContentCBOR, env)
				if err != nil || (resp.status != http.StatusOK && resp.status != http.StatusForbidden) {
					failed.Store(fmt.Errorf("submit: %v %d %s", err, resp.status, resp.raw))
					return
				}
				writes.Add(1)
			}
		}()
	}
	dir := t.TempDir()
	var backups int
	for i := 0; i < 8 || writes.Load() < 50; i++ {
		if i > 2000 {
			break
		}
		rep, err := op.VerifyChain(ctx)
		if err != nil || !rep.OK {
			close(stop)
			wg.Wait()
			t.Fatalf("verify %d: %+v %v", i, rep, err)
		}
		if i%2 == 0 {
			out := filepath.Join(dir, fmt.Sprintf("b%d.kvbak", i))
			res, err := op.Backup(ctx, backup.SaveOptions{Out: out, PublicKey: e.r.PublicKey()})
			if err != nil {
				close(stop)
				wg.Wait()
				t.Fatalf("backup %d: %v", i, err)
			}
			db := filepath.Join(dir, fmt.Sprintf("r%d.db", i))
			if _, err := backup.Restore(ctx, out, backup.RestoreOptions{DB: db, PublicKey: e.r.PublicKey()}); err != nil {
				t.Fatalf("restore %d: %v", i, err)
			}
			if _, err := backup.Check(db, res.Checkpoint, e.r.PublicKey()); err != nil {
				t.Fatalf("restored %d: %v", i, err)
			}
			backups++
		}
	}
	close(stop)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	if writes.Load() < 50 || backups < 4 {
		t.Fatalf("%d writes, %d backups: too few to say anything", writes.Load(), backups)
	}
}

// Ensure that only an administrator verifies or backs up: a worker gets
// 403 forbidden from both, and no backup bytes.
func TestOnline_AdminOnly(t *testing.T) {
	e := newEnv(t)
	w := e.client(workerA)
	for _, path := range []string{api.PathVerifyChain, api.PathBackup} {
		resp := e.must(w, http.MethodGet, path, "", nil)
		if resp.status != http.StatusForbidden || resp.errorCode() != api.CodeForbidden {
			t.Errorf("%s as a worker: %d %s", path, resp.status, resp.raw)
		}
		resp = e.must(e.client(operator), http.MethodPost, path, api.ContentJSON, []byte("{}"))
		if resp.status != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %d %s", path, resp.status, resp.raw)
		}
	}
	resp := e.must(e.client(operator), http.MethodGet, api.PathVerifyChain+"?x=1", "", nil)
	if resp.status != http.StatusBadRequest {
		t.Errorf("an unknown query parameter: %d %s", resp.status, resp.raw)
	}
	if _, err := e.apiClient(workerA).VerifyChain(context.Background()); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("client as a worker: %v", err)
	}
}

// Ensure that a verification or a backup that outlasts the server's
// WriteTimeout is still answered: the handlers move the write deadline
// ahead of each write (server.StreamStall) rather than inherit the one the
// request started with.
func TestOnline_AnswerOutlivesWriteTimeout(t *testing.T) {
	e := newEnv(t)
	me := uint32(os.Getuid())
	dir, err := os.MkdirTemp("", "kvf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "admin.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	h := e.handler(server.UnixPeer{UIDs: []uint32{me}}, server.UnixIdentity(me))
	// The work takes longer than the write timeout, as a long chain's
	// verification or a large backup does.
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		h.ServeHTTP(w, r)
	})
	srv := httptest.NewUnstartedServer(slow)
	srv.Listener.Close()
	srv.Listener = l
	srv.Config.ConnContext = server.ConnContext
	srv.Config.WriteTimeout = 5 * time.Millisecond
	srv.Config.ErrorLog = slogDiscard()
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := client.New("unix://"+sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := context.Background()
	if rep, err := c.VerifyChain(ctx); err != nil || !rep.OK {
		t.Fatalf("VerifyChain: %+v %v", rep, err)
	}
	if _, err := c.Backup(ctx, backup.SaveOptions{Out: filepath.Join(t.TempDir(), "b"), PublicKey: e.r.PublicKey()}); err != nil {
		t.Fatalf("Backup: %v", err)
	}
}
