// Package testbin builds the kvfence command for tests that must run it as a
// process of its own: the lab's worker processes, which exist only in the
// lab build, and the checks that the shipped binary has no defective mode;
// and it gives the environment of a test binary that runs itself again as
// a child. Only tests import it.
package testbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// Command is the import path of the kvfence command.
const Command = "github.com/kvfence/kvfence/cmd/kvfence"

// BuildFlags returns the go build flags of a binary a test runs: -race
// when the test binary has the race detector, since its dependencies are
// then already compiled with it (a cold run compiles them once, not twice)
// and the child is checked for races too.
func BuildFlags() []string {
	if Race {
		return []string{"-race"}
	}
	return nil
}

// NoSQLiteTag leaves the bench's SQLite rows out of a build
// (bench/row_sqlite.go).
const NoSQLiteTag = "kvfence_nosqlite"

// LabTag is the build tag of the lab build, the only one that contains the
// defective receivers the lab demonstrates.
const LabTag = "kvfencelab"

// Build compiles the kvfence command into dir with the given build tags
// (none for the binary as shipped) and returns the binary's path. It adds
// NoSQLiteTag (no test of a built binary runs the bench's SQLite rows, and
// they alone would double the build) and BuildFlags. It runs
// the go command found on PATH, or else under $GOROOT/bin, since a test
// binary does not carry a compiler of its own.
func Build(dir string, tags ...string) (string, error) {
	goCmd, err := goCommand()
	if err != nil {
		return "", err
	}
	name := "kvfence"
	if len(tags) > 0 {
		name += "-" + strings.Join(tags, "-")
	}
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	out := filepath.Join(dir, name)
	args := append([]string{"build", "-o", out, "-tags", strings.Join(append(slices.Clone(tags), NoSQLiteTag), ",")}, BuildFlags()...)
	unlock, err := BuildLock()
	if err != nil {
		return "", err
	}
	defer unlock()
	cmd := exec.Command(goCmd, append(args, Command)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testbin: go %s: %w\n%s", strings.Join(cmd.Args[1:], " "), err, b)
	}
	return out, nil
}

func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("testbin: no go command on PATH or under $GOROOT/bin, needed to build the kvfence binary")
}

// init turns off the race detector's exit delay for every process a test
// starts (the children inherit this process's environment): under -race a
// process otherwise sleeps a second before it exits, and the tests start
// hundreds of race-built processes (themselves, the kvfence binary, etcd).
func init() {
	if v := os.Getenv("GORACE"); !strings.Contains(v, "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(v+" atexit_sleep_ms=0"))
	}
}

// ChildEnv returns the environment for a test binary that runs itself
// again (os.Args[0]) as a helper process: this process's environment, in
// which init turned the race detector's exit delay off, with extra added.
func ChildEnv(extra ...string) []string {
	return append(os.Environ(), extra...)
}

// BuildLock takes the lock that every go build run from a test holds (the
// kvfence binaries here, etcd's in internal/etcdproc), waiting for it, and
// returns its release. Test binaries run in parallel, and two go builds at
// once compile the same dependencies twice, since the build cache is
// filled only as each finishes; one after the other, the second mostly
// links.
func BuildLock() (func(), error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "kvfence")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("testbin: build lock: %w", err)
	}
	unlock, err := lockFile(filepath.Join(dir, "go-build.lock"))
	if err != nil {
		return nil, fmt.Errorf("testbin: build lock: %w", err)
	}
	return unlock, nil
}
