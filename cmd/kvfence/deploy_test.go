package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	deployUnit = "../../deploy/systemd/kvfence.service"
	deployEnv  = "../../deploy/systemd/kvfence.env"
)

// unitFile is a systemd unit: each section's settings, every value of a
// setting in file order (a setting may be given more than once).
type unitFile map[string]map[string][]string

// parseUnit reads a unit file as systemd does for the parts used here:
// sections, KEY=VALUE lines, # and ; comments and backslash continuations.
// Anything else is an error, so that a typo is not silently ignored.
func parseUnit(path string) (unitFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	u := unitFile{}
	var section, pending string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if pending != "" {
			line, pending = pending+" "+line, ""
		}
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			pending = strings.TrimSuffix(line, `\`)
			continue
		}
		if line[0] == '[' {
			if !strings.HasSuffix(line, "]") {
				return nil, fmt.Errorf("%s:%d: bad section %q", path, n, line)
			}
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			return nil, fmt.Errorf("%s:%d: not KEY=VALUE in a section: %q", path, n, line)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		u[section][k] = append(u[section][k], v)
	}
	return u, sc.Err()
}

// last is the effective value of a setting: its last assignment.
func (u unitFile) last(section, key string) (string, bool) {
	v := u[section][key]
	if len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

// TestDeployUnitHardening checks each setting the systemd unit and
// deploy/systemd/README.md promise.
func TestDeployUnitHardening(t *testing.T) {
	u, err := parseUnit(deployUnit)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ key, want string }{
		{"User", "kvfence"},
		{"Group", "kvfence"},
		{"ProtectSystem", "strict"},
		{"ProtectHome", "yes"},
		{"PrivateTmp", "yes"},
		{"NoNewPrivileges", "yes"},
		{"CapabilityBoundingSet", ""},
		{"AmbientCapabilities", ""},
		{"RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"},
		{"LockPersonality", "yes"},
		{"MemoryDenyWriteExecute", "yes"},
		{"SystemCallFilter", "@system-service"},
		{"KillSignal", "SIGTERM"},
		{"Restart", "on-failure"},
		{"EnvironmentFile", "/etc/kvfence/kvfence.env"},
		{"ReadWritePaths", "/var/lib/kvfence-anchor"},
		{"UMask", "0077"},
	} {
		// Every assignment counts: a later "CapabilityBoundingSet=CAP_X"
		// would add to the empty set, not replace it.
		got, ok := u["Service"][tc.key]
		if !ok {
			t.Errorf("[Service] has no %s=, want %s=%s", tc.key, tc.key, tc.want)
			continue
		}
		for _, v := range got {
			if v != tc.want {
				t.Errorf("[Service] %s=%s, want %s=%s", tc.key, v, tc.key, tc.want)
			}
		}
	}
	// The stop timeout must cover serve's drain with room to close.
	const margin = 10 * time.Second
	stop, ok := u.last("Service", "TimeoutStopSec")
	if !ok {
		t.Errorf("[Service] has no TimeoutStopSec")
	} else if d, err := time.ParseDuration(stop); err != nil {
		t.Errorf("TimeoutStopSec=%s: %v (write it as Go and systemd both read it, e.g. 45s)", stop, err)
	} else if d < serveDrainTimeout+margin {
		t.Errorf("TimeoutStopSec=%s: want at least serve's %s drain plus %s", stop, serveDrainTimeout, margin)
	}
}

// TestDeployUnitCommand checks that the unit's command line and example
// environment file are ones serve accepts: ExecStart runs "serve" with
// only flags serve has, every variable in the environment file is a serve
// flag's, and its anchor is in the directory ReadWritePaths opens.
func TestDeployUnitCommand(t *testing.T) {
	u, err := parseUnit(deployUnit)
	if err != nil {
		t.Fatal(err)
	}
	fs, _, _ := newServeFlags()
	exec, _ := u.last("Service", "ExecStart")
	argv := strings.Fields(exec)
	if len(argv) < 2 || filepath.Base(argv[0]) != "kvfence" || argv[1] != "serve" {
		t.Fatalf("ExecStart=%s: want kvfence serve", exec)
	}
	for _, a := range argv[2:] {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && fs.Lookup(name) == nil {
			t.Errorf("ExecStart: serve has no flag %s", a)
		}
	}
	vars := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { vars[envName(f.Name)] = f.Name })
	data, err := os.ReadFile(deployEnv)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("%s: not NAME=VALUE: %q", deployEnv, line)
			continue
		}
		if _, ok := vars[k]; !ok {
			t.Errorf("%s: %s is no serve flag's variable", deployEnv, k)
		}
		env[k] = v
	}
	// Under systemd the log goes to journald and on to log shippers,
	// which parse JSON lines without a pattern.
	if env["KVFENCE_LOG_FORMAT"] != "json" {
		t.Errorf("%s: KVFENCE_LOG_FORMAT=%q, want json", deployEnv, env["KVFENCE_LOG_FORMAT"])
	}
	for _, k := range []string{"KVFENCE_LISTEN", "KVFENCE_TLS_CERT", "KVFENCE_TLS_KEY", "KVFENCE_CLIENT_CA",
		envDB, envAnchor, envKey} {
		if env[k] == "" {
			t.Errorf("%s: no %s, which serve requires", deployEnv, k)
		}
	}
	rw := u["Service"]["ReadWritePaths"]
	if dir := filepath.Dir(env[envAnchor]); !slices.Contains(rw, dir) {
		t.Errorf("%s=%s: its directory is not in ReadWritePaths %v", envAnchor, env[envAnchor], rw)
	}
}
