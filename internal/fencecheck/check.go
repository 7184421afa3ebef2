package fencecheck

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/anishathalye/porcupine"
)

// DefaultTimeout bounds one check when CheckOptions.Timeout is zero. A
// history of a few hundred calls is decided in milliseconds; a check that
// takes seconds means a history too large or too concurrent to decide, and
// it is reported as porcupine.Unknown, never as linearizable.
const DefaultTimeout = 10 * time.Second

// CheckOptions configures Check.
type CheckOptions struct {
	// Timeout bounds the search; zero means DefaultTimeout.
	Timeout time.Duration
	// Dir, if set, receives porcupine's HTML visualization of a history
	// that was not found linearizable.
	Dir string
	// Name is the visualization's file name without its extension; empty
	// means "history".
	Name string
}

// Report describes one check.
type Report struct {
	// Result is porcupine.Ok (linearizable), porcupine.Illegal (not), or
	// porcupine.Unknown (the check ran out of time).
	Result porcupine.CheckResult
	// Ops is the number of calls checked, Unknown how many of them had an
	// unknown outcome, and Partitions the number of scopes they touched.
	Ops, Unknown, Partitions int
	// Duration is the time the check took, without the visualization.
	Duration time.Duration
	// Visualization is the HTML report's path, when one was written.
	Visualization string
}

// String summarises the report in one line.
func (r Report) String() string {
	s := fmt.Sprintf("%s: %d calls (%d of unknown outcome) in %d scopes, checked in %s",
		r.Result, r.Ops, r.Unknown, r.Partitions, r.Duration.Round(time.Microsecond))
	if r.Visualization != "" {
		s += "; visualization: " + r.Visualization
	}
	return s
}

// Check decides whether history is linearizable with respect to model.
// When it is not, or when the check runs out of time, and opts.Dir is set,
// it writes porcupine's visualization there. The error reports only a
// visualization that could not be written.
func Check(model porcupine.Model, history []porcupine.Operation, opts CheckOptions) (Report, error) {
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	rep := Report{Ops: len(history), Partitions: len(model.Partition(history))}
	for _, op := range history {
		if op.Output.(Output).Unknown {
			rep.Unknown++
		}
	}
	start := time.Now()
	rep.Result = porcupine.CheckOperationsTimeout(model, history, timeout)
	rep.Duration = time.Since(start)
	if rep.Result == porcupine.Ok || opts.Dir == "" {
		return rep, nil
	}
	// Run again, keeping what the visualization needs; the first run did
	// without it because it costs memory on every step.
	_, info := porcupine.CheckOperationsVerbose(model, history, timeout)
	name := opts.Name
	if name == "" {
		name = "history"
	}
	path := filepath.Join(opts.Dir, name+".html")
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return rep, err
	}
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return rep, fmt.Errorf("fencecheck: writing the visualization: %w", err)
	}
	rep.Visualization = path
	return rep, nil
}
