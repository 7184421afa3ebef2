package kubeproc

import (
	"os"
	"os/exec"
)

// Cmd returns a command that runs the API server binary bin with args, as
// this package runs it: on Linux, killed by the kernel when the test
// binary dies before its cleanup runs.
func Cmd(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	cmd.SysProcAttr = sysProcAttr()
	return cmd
}
