package main

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kvfence/kvfence/engine/boltengine"
)

// keysOf returns m's keys, sorted.
func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Ensure that the README's restore runbook works on the CLI as written: a
// backup of a stopped receiver, writes after it, the database lost and the
// backup restored, verify-chain reporting the anchor ahead of the restored
// head, an admission and a recovery, and verify-chain ok; and that backup
// and restore refuse to replace a file, and a backup under another key.
func TestBackup_RestoreRunbook(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	pub := c.path("receiver.key.pub")
	b := c.path("b1.kvbak")
	out := c.json(0, "backup", "--db", c.env[envDB], "--anchor", c.env[envAnchor], "--pub", pub, "--out", b)
	backedUp := out["seq"].(float64)
	if out["file"] != b || out["receiver"] != "lab-receiver" || backedUp < 1 {
		t.Fatalf("backup: %v", out)
	}
	c.must(ExitUsage, "backup", "--pub", pub, "--out", b)
	// A stopped receiver's recorded key is compared with --pub first.
	c.must(ExitError, "backup", "--pub", c.path("recovery.key.pub"), "--out", c.path("b2.kvbak"))
	if _, err := os.Stat(c.path("b2.kvbak")); !os.IsNotExist(err) {
		t.Fatalf("a backup that did not verify was written: %v", err)
	}
	// Acknowledged writes after the backup, which the restore loses.
	c.must(0, "hold", "--scope", fixtureScope, "--reason", "after the backup")
	c.must(0, "scope", "create", "--scope", "later")
	if err := os.Rename(c.env[envDB], c.path("lost.db")); err != nil {
		t.Fatal(err)
	}
	c.must(ExitUsage, "restore", "--in", b, "--db", c.path("lost.db"), "--pub", pub)
	// A backup file altered at rest is refused as evidence (exit 4), and
	// nothing is written.
	raw, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 1
	if err := os.WriteFile(c.path("altered.kvbak"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	c.must(ExitIntegrity, "restore", "--in", c.path("altered.kvbak"), "--pub", pub)
	if _, err := os.Stat(c.env[envDB]); !os.IsNotExist(err) {
		t.Fatalf("a backup that did not verify was restored: %v", err)
	}
	out = c.json(0, "restore", "--in", b, "--pub", pub)
	if out["file"] != c.env[envDB] || out["seq"] != backedUp {
		t.Fatalf("restore: %v", out)
	}
	v := c.json(ExitIntegrity, "verify-chain", "--pub", pub)
	if v["problem"] != "rollback_detected" || v["head_seq"] != backedUp || v["anchor_seq"].(float64) <= backedUp {
		t.Fatalf("verify-chain after the restore: %v", v)
	}
	// The lost entries are those after the restored head, up to the
	// anchor's seq; the database put aside still holds them.
	ev := c.must(0, "observe", "events", "--db", c.path("lost.db"), "--anchor", "", "--since", jsonNum(backedUp+1), "--json")
	if n := strings.Count(ev.stdout, `"seq"`); float64(n) != v["anchor_seq"].(float64)-backedUp {
		t.Fatalf("%d lost entries listed, want %v:\n%s", n, v["anchor_seq"].(float64)-backedUp, ev.stdout)
	}
	c.must(0, "admission", "new", "--recovery-key", c.path("recovery.key"), "--reason", "restored b1", "--out", c.path("r.adm"))
	c.must(0, "recover", "--admission", c.path("r.adm"), "--recovery-pub", c.path("recovery.key.pub"))
	if v := c.json(0, "verify-chain", "--pub", pub); v["ok"] != true {
		t.Fatalf("verify-chain after the recovery: %v", v)
	}
}

// Ensure that verify-chain --server answers in the offline --json shape
// with its exit code, that backup --server writes a backup that restores,
// and that the flags that do not go with --server are refused.
func TestVerifyChain_Server(t *testing.T) {
	c := newCLI(t)
	c.receiver()
	pub := c.path("receiver.key.pub")
	offline := c.json(0, "verify-chain", "--pub", pub)
	e, err := boltengine.OpenFile(c.env[envDB], boltengine.FileOptions{Timeout: time.Second, CheckPages: true})
	if err != nil {
		t.Fatal(err)
	}
	url := c.serveEngine(e)
	env := c.env
	c.env = map[string]string{}
	defer func() { c.env = env }()
	online := c.json(0, "verify-chain", "--server", url)
	if got, want := strings.Join(keysOf(online), ","), strings.Join(keysOf(offline), ","); got != want {
		t.Fatalf("--server keys %s, offline %s", got, want)
	}
	for _, k := range []string{"ok", "head", "head_seq", "anchor_seq", "anchor_head", "entries"} {
		if online[k] != offline[k] {
			t.Errorf("%s: --server %v, offline %v", k, online[k], offline[k])
		}
	}
	b := c.path("served.kvbak")
	if out := c.json(0, "backup", "--server", url, "--pub", pub, "--out", b); out["seq"] != offline["head_seq"] {
		t.Fatalf("backup --server: %v", out)
	}
	c.must(0, "restore", "--in", b, "--db", c.path("copy.db"), "--pub", pub)
	if out := c.json(ExitError, "backup", "--server", url, "--pub", pub, "--out", c.path("big"), "--max-size", "1000"); out["error"].(map[string]any)["code"] != "backup_too_large" {
		t.Fatalf("backup over --max-size: %v", out)
	}
	for _, args := range [][]string{
		{"verify-chain", "--server", url, "--archive", b},
		{"verify-chain", "--server", url, "--max-age", "1h"},
		{"verify-chain", "--server", url, "--pub", pub},
		{"backup", "--server", url, "--pub", pub},
		{"backup", "--server", url, "--out", c.path("x")},
		{"backup", "--server", url, "--pub", pub, "--out", c.path("x"), "--db", env[envDB]},
	} {
		c.must(ExitUsage, args...)
	}
}

// Ensure that verify-chain --server exits as verify-chain does on the
// report the receiver sends: 4 for a problem, 6 for a damaged anchor slot
// beside a sound chain.
func TestVerifyChain_ServerExitCodes(t *testing.T) {
	const hash = "0101010101010101010101010101010101010101010101010101010101010101"
	for _, tt := range []struct {
		name, body string
		want       int
	}{
		{"problem", `{"ok":false,"problem":"fork_detected","entries":2,"head":"` + hash + `","head_seq":2,"anchor_seq":2,` +
			`"anchor_head":"` + hash + `","detail":"another hash","anchor_damage":null,"base_seq":0,"base_hash":"","archived_entries":0}`, ExitIntegrity},
		{"escapes in the detail", `{"ok":false,"problem":"fork_detected","entries":2,"head":"` + hash + `","head_seq":2,"anchor_seq":2,` +
			`"anchor_head":"` + hash + `","detail":"\u001b[2Jcleared","anchor_damage":null,"base_seq":0,"base_hash":"","archived_entries":0}`, ExitIntegrity},
		{"damaged slot", `{"ok":true,"problem":"ok","entries":2,"head":"` + hash + `","head_seq":2,"anchor_seq":2,` +
			`"anchor_head":"` + hash + `","detail":"","anchor_damage":{"slot":1,"problem":"bad_checksum","claimed_generation":null,` +
			`"current_generation":4,"newer":false,"detail":"x"},"base_seq":0,"base_hash":"","archived_entries":0}`, ExitWarning},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCLI(t)
			sock := filepath.Join(socketDir(t), "admin.sock")
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, tt.body)
			}))
			srv.Listener.Close()
			srv.Listener = l
			srv.Config.ErrorLog = log.New(io.Discard, "", 0)
			srv.Start()
			defer srv.Close()
			r := c.must(tt.want, "verify-chain", "--server", "unix://"+sock)
			if !strings.Contains(r.stderr, "kvfence verify-chain") {
				t.Errorf("stderr: %s", r.stderr)
			}
			if strings.ContainsRune(r.stdout+r.stderr, 0x1b) {
				t.Errorf("a terminal escape from the server reached the terminal:\n%s\n%s", r.stdout, r.stderr)
			}
		})
	}
}
