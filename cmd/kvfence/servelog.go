package main

import (
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
)

// logFormat is --log-format: text (slog's key=value lines) or json (one
// JSON object a line).
type logFormat string

func (f *logFormat) String() string { return string(*f) }

func (f *logFormat) Set(v string) error {
	switch v {
	case "text", "json":
		*f = logFormat(v)
		return nil
	}
	return fmt.Errorf("%q: want text or json", v)
}

// logLevel is --log-level. Only the four names are taken, not slog's
// "info+2" forms, so that what an operator writes is what it reads.
type logLevel struct{ l slog.Level }

var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn,
	"error": slog.LevelError}

func (l *logLevel) String() string {
	for name, lv := range logLevels {
		if lv == l.l {
			return name
		}
	}
	return l.l.String()
}

func (l *logLevel) Set(v string) error {
	lv, ok := logLevels[v]
	if !ok {
		return fmt.Errorf("%q: want debug, info, warn or error", v)
	}
	l.l = lv
	return nil
}

// newServeLogger returns serve's logger on w in format, from level up.
func newServeLogger(w io.Writer, format logFormat, level logLevel) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level.l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// buildVersion returns the module version and VCS revision recorded in
// the binary, for kvfence_build_info.
func buildVersion() (version, revision string) {
	v := versionOf(debug.ReadBuildInfo())
	if v.VCSRevision != nil {
		revision = *v.VCSRevision
	}
	return v.Version, revision
}
