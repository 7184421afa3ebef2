package etcddev

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DevCommand is the subcommand that starts a local cluster.
const DevCommand = "dev-cluster"

// Bounds of a dev cluster. Member i listens on PORT+10000*i for clients
// and the port after it for peers, as etcd's own Procfile lays out three
// members, so the last peer port must stay below 65536.
const (
	maxMembers   = 6
	portStride   = 10000
	readyTimeout = 60 * time.Second
	stopTimeout  = 10 * time.Second
)

// UsageError is a command line that a subcommand cannot act on; the
// command exits 2 for it.
type UsageError struct {
	// Msg says what is wrong with the command line.
	Msg string
}

// Error returns the problem with the command line.
func (e *UsageError) Error() string { return e.Msg }

// devMember is one member's name and addresses, HOST:PORT.
type devMember struct {
	name, client, peer string
}

// devCluster is what RunDevCluster starts: the binary to run as each
// member, the directory for data and logs, and the members.
type devCluster struct {
	exe     string
	dir     string
	members []devMember
	procs   []*os.Process // the members' processes, in start order
}

// layout returns n members on loopback from base: clients on base,
// base+10000, …, peers one port above each.
func layout(n, base int) []devMember {
	ms := make([]devMember, n)
	for i := range ms {
		p := base + portStride*i
		ms[i] = devMember{
			name:   "m" + strconv.Itoa(i),
			client: "127.0.0.1:" + strconv.Itoa(p),
			peer:   "127.0.0.1:" + strconv.Itoa(p+1),
		}
	}
	return ms
}

// RunDevCluster parses the dev-cluster flags and runs the cluster until
// ctx ends or every member exited. Its members are the running
// executable, which must therefore be etcd's main (cmd/kvfence-etcd).
func RunDevCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(DevCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory for the members' data and logs (created if missing; reused on a restart)")
	n := fs.Int("members", 3, "number of members, 1 to "+strconv.Itoa(maxMembers))
	port := fs.Int("port", 2379, "client port of the first member; member i uses PORT+10000*i for clients and the next port for peers")
	if err := fs.Parse(args); err != nil {
		return &UsageError{Msg: err.Error()}
	}
	switch {
	case fs.NArg() > 0:
		return &UsageError{Msg: fmt.Sprintf("%s: unexpected argument %q", DevCommand, fs.Arg(0))}
	case *dir == "":
		return &UsageError{Msg: DevCommand + ": --dir is required"}
	case *n < 1 || *n > maxMembers:
		return &UsageError{Msg: fmt.Sprintf("%s: --members %d: want 1 to %d", DevCommand, *n, maxMembers)}
	case *port < 1024 || *port+portStride*(*n-1)+1 > 65535:
		return &UsageError{Msg: fmt.Sprintf("%s: --port %d: member ports must lie in 1024..65535 (PORT+10000*(members-1)+1)", DevCommand, *port)}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	c := &devCluster{exe: exe, dir: *dir, members: layout(*n, *port)}
	return c.run(ctx, stdout, stderr)
}

// endpoints returns the client endpoints, comma-separated, as --etcd takes
// them.
func (c *devCluster) endpoints() string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.client)
	}
	return strings.Join(eps, ",")
}

// run starts every member, prints the endpoints once all are healthy and
// waits. Whatever ends it, every member is stopped before it returns.
func (c *devCluster) run(ctx context.Context, stdout, stderr io.Writer) error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	var initial []string
	for _, m := range c.members {
		initial = append(initial, m.name+"=http://"+m.peer)
	}
	exited := make(chan error, len(c.members))
	var cmds []*exec.Cmd
	gone := 0 // exits received here, not left for stopAll
	defer func() {
		stopAll(cmds, exited, len(cmds)-gone)
		for _, m := range c.members {
			os.Remove(c.pidFile(m))
		}
	}()
	began := time.Now()
	for _, m := range c.members {
		cmd, err := c.start(m, strings.Join(initial, ","), exited)
		if err != nil {
			return err
		}
		cmds = append(cmds, cmd)
		c.procs = append(c.procs, cmd.Process)
		// The member's PID, for a script that kills one member by the
		// PID it was started with rather than by matching command lines.
		if err := os.WriteFile(c.pidFile(m), fmt.Appendf(nil, "%d\n", cmd.Process.Pid), 0o600); err != nil {
			return err
		}
	}
	if err := c.waitHealthy(ctx, exited); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "kvfence-etcd: %d-member cluster ready in %v; data and logs in %s; interrupt to stop (run again to restart it)\n",
		len(c.members), time.Since(began).Round(time.Millisecond), c.dir)
	fmt.Fprintln(stdout, c.endpoints())
	// A member that dies (killed to try the cluster's fault tolerance)
	// is reported, and the others go on serving while they are a
	// majority; run dev-cluster again to restart it.
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-exited:
			gone++
			fmt.Fprintf(stderr, "kvfence-etcd: a member exited: %v\n", err)
			if gone == len(cmds) {
				return fmt.Errorf("every member exited (logs in %s)", c.dir)
			}
		}
	}
}

// pidFile is where member m's PID is kept while dev-cluster runs:
// DIR/NAME.pid.
func (c *devCluster) pidFile(m devMember) string { return filepath.Join(c.dir, m.name+".pid") }

// stopAll asks every member to stop and waits for each, killing those
// still running after stopTimeout: a member that has lost its quorum can
// take long to stop on its own.
func stopAll(cmds []*exec.Cmd, exited <-chan error, running int) {
	for _, cmd := range cmds {
		if cmd.Process.Signal(syscall.SIGTERM) != nil {
			cmd.Process.Kill()
		}
	}
	timeout := time.After(stopTimeout)
	for range running {
		select {
		case <-exited:
			continue
		case <-timeout:
		}
		for _, cmd := range cmds {
			cmd.Process.Kill()
		}
		<-exited
	}
}

// start launches member m, its output appended to DIR/NAME.log; exited
// receives the result of its wait.
func (c *devCluster) start(m devMember, initial string, exited chan<- error) (*exec.Cmd, error) {
	logPath := filepath.Join(c.dir, m.name+".log")
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(c.exe,
		"--name", m.name,
		"--data-dir", filepath.Join(c.dir, m.name+".etcd"),
		"--listen-client-urls", "http://"+m.client,
		"--advertise-client-urls", "http://"+m.client,
		"--listen-peer-urls", "http://"+m.peer,
		"--initial-advertise-peer-urls", "http://"+m.peer,
		"--initial-cluster", initial,
		"--initial-cluster-state", "new",
		"--initial-cluster-token", "kvfence-etcd-dev",
		"--log-outputs", "stderr",
	)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", m.name, err)
	}
	go func() {
		err := cmd.Wait()
		log.Close()
		if err == nil {
			err = errors.New("exit status 0")
		}
		exited <- fmt.Errorf("%s: %w (log %s)", m.name, err, logPath)
	}()
	return cmd, nil
}

// waitHealthy polls each member's /health until it reports a leader and a
// served read, or a member exits, or the time is up.
func (c *devCluster) waitHealthy(ctx context.Context, exited chan error) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	for _, m := range c.members {
		for !healthy(hc, m.client) {
			select {
			case err := <-exited:
				exited <- err
				return fmt.Errorf("a member exited before the cluster was ready: %v", err)
			case <-ctx.Done():
				return fmt.Errorf("member %s not healthy: %w (logs in %s)", m.name, ctx.Err(), c.dir)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func healthy(hc *http.Client, addr string) bool {
	resp, err := hc.Get("http://" + addr + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"health":"true"`)
}

// cleanEnv is the environment without ETCD_* variables, which etcd would
// read as flags of every member.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") && !strings.HasPrefix(kv, "ETCDCTL_") {
			env = append(env, kv)
		}
	}
	return env
}
