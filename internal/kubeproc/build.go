package kubeproc

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
	"time"

	"github.com/kvfence/kvfence/internal/testbin"
)

// Command is the import path of the API server that Binary builds.
const Command = "k8s.io/kubernetes/cmd/kube-apiserver"

// KubernetesVersion is the k8s.io/kubernetes module version that Binary
// builds; StagingVersion is the matching version of its staging modules
// (k8s.io/api, k8s.io/apiserver, …), which k8s.io/kubernetes requires at
// v0.0.0 and replaces with directories of its own tree.
const (
	KubernetesVersion = "v1.34.4"
	StagingVersion    = "v0.34.4"
)

// EnvBinary names the environment variable that overrides the
// kube-apiserver binary.
const EnvBinary = "KVFENCE_KUBE_APISERVER_BIN"

// InstallHint says how to get the kube-apiserver binary.
const InstallHint = "run the tests where the go command is on PATH and the Go module proxy is reachable (it builds " +
	Command + " " + KubernetesVersion + " in minutes, once), or set " + EnvBinary + " to the path of a kube-apiserver binary"

// ErrNoBinary means no kube-apiserver binary was found or built.
var ErrNoBinary = errors.New("kubeproc: no kube-apiserver binary")

// cacheSubdir is where builds go under the user's cache directory: one
// scratch module and one binary per build key.
const cacheSubdir = "kvfence/kube-apiserver"

// stagingModules are the k8s.io modules that k8s.io/kubernetes keeps in
// its staging tree and requires at v0.0.0: each is pinned to
// StagingVersion. sample-cli-plugin and sample-controller are left out:
// the proxy does not serve them, and kube-apiserver needs neither.
var stagingModules = []string{
	"api", "apiextensions-apiserver", "apimachinery", "apiserver",
	"cli-runtime", "client-go", "cloud-provider", "cluster-bootstrap",
	"code-generator", "component-base", "component-helpers",
	"controller-manager", "cri-api", "cri-client", "csi-translation-lib",
	"dynamic-resource-allocation", "endpointslice", "externaljwt", "kms",
	"kube-aggregator", "kube-controller-manager", "kube-proxy",
	"kube-scheduler", "kubectl", "kubelet", "metrics", "mount-utils",
	"pod-security-admission", "sample-apiserver",
}

// scratchGoMod returns the go.mod of the module that builds the server.
// The tool directive keeps the requirement through go mod tidy, though
// no package of the scratch module imports it.
func scratchGoMod() string {
	var b strings.Builder
	b.WriteString("// Written by kvfence's internal/kubeproc to build " + Command + " for tests.\n")
	b.WriteString("module kvfence.invalid/kubeapiserver\n\ngo 1.24.0\n\n")
	b.WriteString("require k8s.io/kubernetes " + KubernetesVersion + "\n\n")
	b.WriteString("tool " + Command + "\n\nreplace (\n")
	for _, m := range stagingModules {
		fmt.Fprintf(&b, "\tk8s.io/%s => k8s.io/%s %s\n", m, m, StagingVersion)
	}
	b.WriteString(")\n")
	return b.String()
}

// builds counts the builds that ran in this process, for the test that a
// second call reuses the first's binary.
var builds atomic.Int64

// built remembers the binary for the rest of the process.
var built struct {
	sync.Mutex
	path string
	// took is how long the build (or the finding of a cached binary)
	// took, for tests to report.
	took time.Duration
}

// Binary returns the kube-apiserver binary to run: $KVFENCE_KUBE_APISERVER_BIN
// if it is set, else Command built in a scratch module under the user's
// cache directory, once per Go version and scratch module content: the
// first caller builds it (7 to 10 minutes and over 2 GB of memory on a
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
	began := time.Now()
	p, err := buildCached(filepath.Join(root, cacheSubdir))
	if err != nil {
		return "", err
	}
	built.path, built.took = p, time.Since(began)
	return p, nil
}

// Cached returns the kube-apiserver binary that Binary would return
// without building anything: $KVFENCE_KUBE_APISERVER_BIN if it is set and
// names an executable file, else a binary an earlier build left in the
// user's cache for the current build key. ok is false when there is none;
// err says why, for a caller to report.
func Cached() (path string, ok bool, err error) {
	if p := os.Getenv(EnvBinary); p != "" {
		p, err := Binary()
		return p, err == nil, err
	}
	built.Lock()
	p := built.path
	built.Unlock()
	if p != "" {
		return p, true, nil
	}
	root, err := os.UserCacheDir()
	if err != nil {
		return "", false, fmt.Errorf("%w: no cache directory: %v; %s", ErrNoBinary, err, InstallHint)
	}
	goCmd, err := goCommand()
	if err != nil {
		return "", false, err
	}
	out, err := cachePath(filepath.Join(root, cacheSubdir), goCmd)
	if err != nil {
		return "", false, err
	}
	if fi, err := os.Stat(out); err != nil || !fi.Mode().IsRegular() {
		return "", false, fmt.Errorf("%w: none built yet at %s; %s", ErrNoBinary, out, InstallHint)
	}
	return out, true, nil
}

// cachePath is where, under dir, the binary of the current build key is.
func cachePath(dir, goCmd string) (string, error) {
	key, err := buildKey(goCmd, scratchGoMod())
	if err != nil {
		return "", err
	}
	name := "kube-apiserver-" + key
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	return filepath.Join(dir, name), nil
}

// buildCached returns the binary under dir for the current build key,
// building it first if it is not there. testbin's lock serializes every
// go build that tests run, across processes; the binary appears under its
// final name only complete, by rename.
func buildCached(dir string) (string, error) {
	goCmd, err := goCommand()
	if err != nil {
		return "", err
	}
	gomod := scratchGoMod()
	out, err := cachePath(dir, goCmd)
	if err != nil {
		return "", err
	}
	name := filepath.Base(out)
	key := strings.TrimSuffix(strings.TrimPrefix(name, "kube-apiserver-"), ".exe")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoBinary, err)
	}
	unlock, err := testbin.BuildLock()
	if err != nil {
		return "", fmt.Errorf("%w: locking the build: %v", ErrNoBinary, err)
	}
	defer unlock()
	if fi, err := os.Stat(out); err == nil && fi.Mode().IsRegular() {
		return out, nil
	}
	// A fresh scratch directory each time: a build that died halfway
	// leaves nothing that the next one trusts.
	src, err := os.MkdirTemp(dir, "src-"+key+"-")
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoBinary, err)
	}
	defer os.RemoveAll(src)
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(gomod), 0o600); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoBinary, err)
	}
	tmp := filepath.Join(src, name)
	for _, args := range [][]string{
		{"mod", "tidy"},
		append(append([]string{"build", "-o", tmp}, buildFlags()...), Command),
	} {
		cmd := exec.Command(goCmd, args...)
		cmd.Dir = src
		cmd.Env = buildEnv()
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("%w: go %s in %s: %v\n%s", ErrNoBinary, strings.Join(args, " "), src, err, b)
		}
	}
	builds.Add(1)
	if err := os.Rename(tmp, out); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoBinary, err)
	}
	return out, nil
}

// buildFlags are the go build flags of the server: no symbol tables,
// which only tests would carry, and the version that a build from a
// module, without Kubernetes's own scripts, does not stamp (it would say
// v0.0.0-master), so that /version and --version name the real one.
func buildFlags() []string {
	const v = "k8s.io/component-base/version."
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	return []string{"-ldflags=-s -w -X " + v + "gitVersion=" + KubernetesVersion +
		" -X " + v + "gitMajor=" + major + " -X " + v + "gitMinor=" + minor +
		" -X " + v + "gitTreeState=clean"}
}

// buildEnv is the environment of the scratch module's go commands: the
// test's own module settings would name the wrong module or refuse the
// go.sum that the build writes.
func buildEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "GOFLAGS", "GOWORK", "GOTOOLCHAIN", "CGO_ENABLED":
			continue
		}
		env = append(env, kv)
	}
	// No cgo: the server needs none, and a static binary needs no C
	// compiler. GOTOOLCHAIN=local: the build never fetches a toolchain.
	return append(env, "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0")
}

// buildKey names a build by what changes the binary: the Go toolchain and
// target, the scratch module, which pins every module version, and the
// build flags.
func buildKey(goCmd, gomod string) (string, error) {
	h := sha256.New()
	cmd := exec.Command(goCmd, "env", "GOVERSION", "GOOS", "GOARCH")
	cmd.Env = buildEnv()
	b, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			b = ee.Stderr
		}
		return "", fmt.Errorf("%w: go env: %v\n%s", ErrNoBinary, err, b)
	}
	h.Write(b)
	h.Write([]byte(gomod))
	h.Write([]byte(strings.Join(buildFlags(), "\n")))
	return hex.EncodeToString(h.Sum(nil))[:16], nil
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
