// Package etcdbin finds or builds the standalone etcd binary that tests
// and the lab run as real processes: $KVFENCE_ETCD_BIN if set, else
// cmd/kvfence-etcd (etcd's own main, from the etcd module in go.mod) built
// once into the user's cache directory. It links nothing of package
// testing, so that the lab, which is part of the kvfence binary, can use
// it.
package etcdbin

import (
	"errors"
	"os"
	"os/exec"
	"strings"
)

// EnvBinary names the environment variable that overrides the etcd binary.
const EnvBinary = "KVFENCE_ETCD_BIN"

// InstallHint says how to get the etcd binary.
const InstallHint = "run where the go command is on PATH, in kvfence's source tree (it builds " + Command + "), " +
	"or set " + EnvBinary + " to the path of an etcd binary"

// ErrNoBinary means no etcd binary was found.
var ErrNoBinary = errors.New("etcdbin: no etcd binary")

// Cmd returns a command that runs the etcd binary bin with args: without
// the caller's ETCD_* and ETCDCTL_* variables, which etcd would read as
// flags, and, on Linux, killed by the kernel when the process that started
// it dies first.
func Cmd(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = sysProcAttr()
	return cmd
}

// cleanEnv is the environment without ETCD_* and ETCDCTL_* variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") && !strings.HasPrefix(kv, "ETCDCTL_") {
			env = append(env, kv)
		}
	}
	return env
}
