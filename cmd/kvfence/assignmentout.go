package main

import (
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/internal/dirsync"
)

// assignmentFile is an --assignment-out file created before the grant it
// will hold exists: commit fills it, abandon removes it if it was not.
type assignmentFile struct {
	f    *os.File
	path string
	done bool
}

// createAssignmentFile creates path 0600, refusing an existing file or
// symbolic link (O_EXCL).
func createAssignmentFile(path string) (*assignmentFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	return &assignmentFile{f: f, path: path}, nil
}

// commit writes a, syncs the file and its directory, so that the worker's
// hand-off survives a crash once activate has answered.
func (o *assignmentFile) commit(a client.Assignment) error {
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return err
	}
	if _, err := o.f.Write(append(b, '\n')); err != nil {
		return err
	}
	if err := o.f.Sync(); err != nil {
		return err
	}
	if err := o.f.Close(); err != nil {
		return err
	}
	o.f = nil
	if err := dirsync.Sync(filepath.Dir(o.path)); err != nil {
		return err
	}
	o.done = true
	return nil
}

// abandon removes the file unless commit completed.
func (o *assignmentFile) abandon() {
	if o.done {
		return
	}
	if o.f != nil {
		o.f.Close()
	}
	os.Remove(o.path)
}
