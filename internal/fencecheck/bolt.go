package fencecheck

import (
	"crypto/ed25519"
	"crypto/rand"
	"path/filepath"
	"testing"

	"github.com/kvfence/kvfence/audit"
	"github.com/kvfence/kvfence/kvfence"
)

// Bolt opens fresh bbolt receivers for Config.Open, each in its own
// tb.TempDir() with a new key and a file anchor.
type Bolt struct {
	// Open opens the initialised database; nil means kvfence.Open. A test
	// of the kvfence package passes its opener of a defective receiver.
	Open func(path string, opts *kvfence.Options) (*kvfence.Receiver, error)
	// Anchor, if set, wraps the anchor store the receiver writes after
	// each commit, to make some writes fail.
	Anchor func(audit.AnchorStore) audit.AnchorStore
}

// Opener returns the Config.Open of b.
func (b Bolt) Opener() func(tb testing.TB) *kvfence.Receiver {
	return func(tb testing.TB) *kvfence.Receiver {
		tb.Helper()
		dir := tb.TempDir()
		path := filepath.Join(dir, "receiver.db")
		var anchor audit.AnchorStore = audit.FileAnchor{Path: filepath.Join(dir, "receiver.anchor")}
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			tb.Fatal(err)
		}
		if err := kvfence.Init(path, &kvfence.InitOptions{ReceiverID: "fencecheck", Key: key, Anchor: anchor}); err != nil {
			tb.Fatal(err)
		}
		if b.Anchor != nil {
			anchor = b.Anchor(anchor)
		}
		open := b.Open
		if open == nil {
			open = kvfence.Open
		}
		r, err := open(path, &kvfence.Options{Key: key, Anchor: anchor, Warn: func(msg string) { tb.Log(msg) }})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { r.Close() })
		return r
	}
}
