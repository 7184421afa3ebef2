package main

import (
	"fmt"
	"io"

	"github.com/kvfence/kvfence/internal/separation"
)

// separationJSON are the file anchor's separation facts in the --json
// output of status and verify-chain: null when they do not apply (an etcd
// store or anchor, no --anchor, --server) or cannot be read.
type separationJSON struct {
	SameDevice *bool `json:"anchor_same_device"`
	SameOwner  *bool `json:"anchor_same_owner"`
}

// anchorSeparation returns the separation facts of --db and a file
// --anchor (separation.Of), or nil where they do not apply or cannot be
// read.
func (c *commonFlags) anchorSeparation() *separation.Facts {
	if c.db == "" || c.etcd.on() || c.anchor == "" || isEtcdAnchor(c.anchor) {
		return nil
	}
	f, err := separation.Of(c.db, c.anchor)
	if err != nil {
		return nil
	}
	return &f
}

// separationOf converts facts to their JSON shape.
func separationOf(f *separation.Facts) separationJSON {
	if f == nil {
		return separationJSON{}
	}
	return separationJSON{SameDevice: &f.SameDevice, SameOwner: &f.SameOwner}
}

// printSeparation writes the facts as rows of a table.
func printSeparation(w io.Writer, f *separation.Facts) {
	if f == nil {
		return
	}
	fmt.Fprintf(w, "anchor same device\t%s\n", yesNo(f.SameDevice))
	fmt.Fprintf(w, "anchor same owner\t%s\n", yesNo(f.SameOwner))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// separationWarnings says what each true fact means for the anchor.
func separationWarnings(f *separation.Facts) []string {
	if f == nil {
		return nil
	}
	var w []string
	if f.SameDevice {
		w = append(w, "the anchor file is on the same file system (device) as the database: a snapshot or backup of "+
			"that file system restores both together, and the anchor then vouches for the restored database; keep the "+
			"anchor on another volume, administered and backed up apart")
	}
	if f.SameOwner {
		w = append(w, "one uid owns both the anchor file and the database: whoever holds that account (or root) can put "+
			"an old anchor back beside an old database, so the anchor file guards only against restores made without "+
			"it; to guard against that account too, keep the anchor on an etcd cluster administered apart "+
			"(--anchor etcd://...)")
	}
	return w
}
