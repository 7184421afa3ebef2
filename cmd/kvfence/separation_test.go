package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Ensure that status and verify-chain report, as text and JSON, whether
// the anchor file is on the database's file system and owned by its uid,
// that init warns when it is, and that the facts are null where they do
// not apply (no --anchor). Where /dev/shm is another file system than the
// test's directory, an anchor there is reported on another device.
func TestAnchorSeparationFacts(t *testing.T) {
	c := newCLI(t)
	c.must(0, "keygen", "--out", c.path("receiver.key"))
	c.must(0, "keygen", "--out", c.path("recovery.key"))
	c.env[envKey] = c.path("receiver.key")
	r := c.must(0, "init", "--id", "r", "--db", c.path("r.db"), "--anchor", c.path("r.anchor"),
		"--recovery-pub", c.path("recovery.key.pub"))
	if !strings.Contains(r.stderr, "same file system (device)") || !strings.Contains(r.stderr, "one uid owns both") {
		t.Errorf("init with the anchor beside the database did not warn: %s", r)
	}
	flags := []string{"--db", c.path("r.db"), "--anchor", c.path("r.anchor")}
	for _, args := range [][]string{{"status"}, {"verify-chain", "--pub", c.path("receiver.key.pub")}} {
		out := c.json(0, append(append([]string{}, args...), flags...)...)
		if out["anchor_same_device"] != true || out["anchor_same_owner"] != true {
			t.Errorf("%s: %v", args[0], out)
		}
		text := c.must(0, append(append([]string{}, args...), flags...)...).stdout
		if !strings.Contains(text, "anchor same device  yes") || !strings.Contains(text, "anchor same owner   yes") {
			t.Errorf("%s text:\n%s", args[0], text)
		}
	}
	out := c.json(0, "status", "--db", c.path("r.db"), "--anchor", "")
	if v, ok := out["anchor_same_device"]; !ok || v != nil || out["anchor_same_owner"] != nil {
		t.Errorf("status without an anchor: %v", out)
	}

	shm, err := os.MkdirTemp("/dev/shm", "kvf")
	if err != nil {
		t.Log("no /dev/shm: the other-device case is covered by internal/separation's TestCompare")
		return
	}
	defer os.RemoveAll(shm)
	var a, b syscall.Stat_t
	if syscall.Stat(c.path("."), &a) != nil || syscall.Stat(shm, &b) != nil || a.Dev == b.Dev {
		t.Log("/dev/shm is on the test directory's device: the other-device case is covered by TestCompare")
		return
	}
	anchor := filepath.Join(shm, "r2.anchor")
	r = c.must(0, "init", "--id", "r2", "--db", c.path("r2.db"), "--anchor", anchor, "--recovery-pub", c.path("recovery.key.pub"))
	if strings.Contains(r.stderr, "same file system") || !strings.Contains(r.stderr, "one uid owns both") {
		t.Errorf("init with the anchor on another file system: %s", r)
	}
	out = c.json(0, "verify-chain", "--db", c.path("r2.db"), "--anchor", anchor, "--pub", c.path("receiver.key.pub"))
	if out["anchor_same_device"] != false || out["anchor_same_owner"] != true {
		t.Errorf("verify-chain with the anchor on /dev/shm: %v", out)
	}
}
