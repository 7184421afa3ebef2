package kubeproc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kvfence/kvfence/internal/etcdbin"
)

// etcdMember is the single etcd process a server stores in when its
// Config names no cluster.
type etcdMember struct {
	clientURL string
	logPath   string
	cmd       *exec.Cmd
	done      chan struct{}
	waitErr   error
}

// startEtcd starts a one-member etcd with its data and log in dir (which
// it creates) on two free loopback ports, and waits until it is healthy.
// Its data is not fsynced: it holds the API server's objects for one run,
// and a crash of the machine ends that run anyway.
func startEtcd(dir string) (*etcdMember, error) {
	bin, err := etcdbin.Binary()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("kubeproc: %w", err)
	}
	client, err := freePort()
	if err != nil {
		return nil, err
	}
	peer, err := freePort()
	if err != nil {
		return nil, err
	}
	m := &etcdMember{clientURL: fmt.Sprintf("http://127.0.0.1:%d", client), logPath: filepath.Join(dir, "etcd.log"),
		done: make(chan struct{})}
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	log, err := os.OpenFile(m.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("kubeproc: %w", err)
	}
	m.cmd = etcdbin.Cmd(bin, "--name", "m0", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", m.clientURL, "--advertise-client-urls", m.clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "m0="+peerURL, "--initial-cluster-state", "new",
		"--unsafe-no-fsync", "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn")
	m.cmd.Stdout, m.cmd.Stderr = log, log
	if err := m.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("kubeproc: starting %s: %w", bin, err)
	}
	go func() {
		m.waitErr = m.cmd.Wait()
		log.Close()
		close(m.done)
	}()
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(ReadyTimeout)
	for !etcdHealthy(hc, m.clientURL) {
		select {
		case <-m.done:
			return nil, fmt.Errorf("%w: etcd: %v (log %s):\n%s", errExited, m.waitErr, m.logPath, tail(m.logPath, 10))
		default:
		}
		if time.Now().After(deadline) {
			err := fmt.Errorf("kubeproc: etcd not healthy after %v (log %s):\n%s", ReadyTimeout, m.logPath, tail(m.logPath, 10))
			m.stop()
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return m, nil
}

func etcdHealthy(hc *http.Client, url string) bool {
	resp, err := hc.Get(url + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"health":"true"`))
}

// stop kills the member and waits for it to end.
func (m *etcdMember) stop() error {
	if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kubeproc: killing etcd: %w", err)
	}
	select {
	case <-m.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("kubeproc: etcd pid %d still running 10s after SIGKILL", m.cmd.Process.Pid)
	}
}
