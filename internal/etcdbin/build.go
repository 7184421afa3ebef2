package etcdbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kvfence/kvfence/internal/testbin"
)

// Command is the import path of the standalone etcd command that Binary
// builds: etcd's own main, from the etcd module version that go.mod
// requires.
const Command = "github.com/kvfence/kvfence/cmd/kvfence-etcd"

// cacheSubdir is where built binaries go under the user's cache
// directory, one subdirectory per build key.
const cacheSubdir = "kvfence/etcd"

// builds counts the builds that ran in this process, for the test that
// parallel callers build once.
var builds atomic.Int64

// built remembers the cached binary for the rest of the process, so that
// a test binary asks go list only once.
var built struct {
	sync.Mutex
	path string
}

// Binary returns the etcd binary to run: $KVFENCE_ETCD_BIN if it is set,
// else kvfence-etcd built from the module (Command) into the user's cache
// directory, once per etcd module version, Go version and source of the
// command: the first caller builds it (about a minute and a half on a
// cold Go build cache) and everyone after, in this process or another,
// reuses it.
func Binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("%w: %s=%s: %v; %s", ErrNoBinary, EnvBinary, p, err, InstallHint)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("%w: %s=%s is not an executable file; %s", ErrNoBinary, EnvBinary, p, InstallHint)
		}
		return p, nil
	}
	built.Lock()
	defer built.Unlock()
	if built.path != "" {
		return built.path, nil
	}
	root, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%w: no cache directory to build %s into: %v; %s", ErrNoBinary, Command, err, InstallHint)
	}
	p, err := buildCached(filepath.Join(root, cacheSubdir))
	if err != nil {
		return "", err
	}
	built.path = p
	return p, nil
}

// buildCached returns the binary under dir for the current build key,
// building it first if it is not there. A lock file serializes builders
// across processes (parallel test binaries); the binary appears under
// its final name only complete, by rename.
func buildCached(dir string) (string, error) {
	goCmd, err := goCommand()
	if err != nil {
		return "", err
	}
	key, err := buildKey(goCmd)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoBinary, err)
	}
	// Two flavors share a key: with the race detector and without. A
	// caller builds the flavor of its own test binary, whose dependencies
	// (etcd's client, gRPC) are then already compiled. A race caller takes
	// the plain one if it is there (it runs faster, and any build of the
	// command serves as etcd); a plain caller does not take the race one,
	// which would slow every cluster test of a -short run.
	flags := testbin.BuildFlags()
	exe := ""
	if runtime.GOOS == "windows" {
		exe = ".exe"
	}
	out, cached := flavor(dir, "kvfence-etcd-"+key, exe, len(flags) > 0)
	if cached {
		return out, nil
	}
	name := strings.TrimSuffix(filepath.Base(out), exe)
	// One lock for every build a test runs: parallel builders of this
	// binary wait and reuse it, and a build of the kvfence binary
	// (internal/testbin), which shares most dependencies, does not
	// compile them a second time alongside.
	unlock, err := testbin.BuildLock()
	if err != nil {
		return "", fmt.Errorf("%w: locking the build: %v", ErrNoBinary, err)
	}
	defer unlock()
	if fi, err := os.Stat(out); err == nil && fi.Mode().IsRegular() {
		return out, nil
	}
	f, err := os.CreateTemp(dir, name+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoBinary, err)
	}
	tmp := f.Name()
	f.Close()
	cmd := exec.Command(goCmd, append(append([]string{"build", "-o", tmp}, flags...), Command)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("%w: go build %s: %v\n%s", ErrNoBinary, Command, err, b)
	}
	builds.Add(1)
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("%w: %v", ErrNoBinary, err)
	}
	return out, nil
}

// flavor returns the path in dir of the etcd binary named name (plus exe)
// that a caller uses, race saying whether its test binary has the race
// detector, and whether that binary is already there: a race caller
// takes a plain binary in the cache, and otherwise the race one; a plain
// caller only ever the plain one.
func flavor(dir, name, exe string, race bool) (path string, cached bool) {
	exists := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.Mode().IsRegular()
	}
	plain := filepath.Join(dir, name+exe)
	if !race || exists(plain) {
		return plain, exists(plain)
	}
	path = filepath.Join(dir, name+"-race"+exe)
	return path, exists(path)
}

// buildKey names a build by everything that changes the binary: the Go
// toolchain and target, the module graph (the etcd version among it) and
// the command's own source files.
func buildKey(goCmd string) (string, error) {
	h := sha256.New()
	for _, args := range [][]string{
		{"env", "GOVERSION", "GOOS", "GOARCH", "GOFLAGS", "CGO_ENABLED"},
		{"list", "-m", "all"},
		// The command's own packages, which the module list does not
		// cover: it and what it imports from this module.
		{"list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", Command},
	} {
		b, err := exec.Command(goCmd, args...).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				b = ee.Stderr
			}
			return "", fmt.Errorf("%w: go %s: %v\n%s", ErrNoBinary, strings.Join(args, " "), err, b)
		}
		h.Write(b)
		if args[1] == "-deps" {
			for _, dir := range strings.Fields(string(b)) {
				if err := hashSources(h, dir); err != nil {
					return "", err
				}
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// hashSources adds the name and content of every Go file in dir to h.
func hashSources(h interface{ Write([]byte) (int, error) }, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("%w: no Go files of %s in %q", ErrNoBinary, Command, dir)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNoBinary, err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(b))
		h.Write(b)
	}
	return nil
}

// goCommand finds the go command on PATH, or else under $GOROOT/bin: a
// test binary carries no compiler of its own.
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
	return "", fmt.Errorf("%w: no go command on PATH or under $GOROOT/bin to build %s; %s", ErrNoBinary, Command, InstallHint)
}
