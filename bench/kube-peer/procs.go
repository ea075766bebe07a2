package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a server process this program started; its output goes to logPath.
type proc struct {
	name     string
	logPath  string
	cmd      *exec.Cmd
	done     chan struct{} // closed once the process has been reaped
	waitErr  error
	stopping bool // set under supervisor.mu before a deliberate stop
}

// serverError ties a failure to the server whose log explains it.
type serverError struct {
	p   *proc
	err error
}

func (e *serverError) Error() string { return e.p.name + ": " + e.err.Error() }
func (e *serverError) Unwrap() error { return e.err }

// supervisor owns the server processes: it fails the run when one exits on
// its own and stops them all at the end, on failure and on signals.
type supervisor struct {
	mu     sync.Mutex
	procs  []*proc
	closed bool
	fail   context.CancelCauseFunc
}

func newSupervisor(fail context.CancelCauseFunc) *supervisor {
	return &supervisor{fail: fail}
}

// start runs bin with args, its stdout and stderr appended to logPath. Its
// own process group keeps a terminal's Ctrl-C away from it (the supervisor
// stops it in order), and Pdeathsig kills it should this program die.
func (s *supervisor) start(name, logPath, bin string, args ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer f.Close() // the child holds its own copy of the descriptor
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("%s: not started, shutting down", name)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", name, bin, err)
	}
	s.procs = append(s.procs, p)
	go s.reap(p)
	return p, nil
}

func (s *supervisor) reap(p *proc) {
	err := p.cmd.Wait()
	s.mu.Lock()
	p.waitErr = err
	stopping := p.stopping
	s.mu.Unlock()
	close(p.done)
	if !stopping {
		if err == nil {
			err = errors.New("exit status 0")
		}
		s.fail(&serverError{p, fmt.Errorf("exited unexpectedly (%v)", err)})
	}
}

// stopAll stops the servers, last started first (kube-apiserver before its
// etcd): SIGTERM, then SIGKILL after grace. It returns once they are reaped
// or after a further 5 s.
func (s *supervisor) stopAll(grace time.Duration) {
	s.mu.Lock()
	s.closed = true
	procs := append([]*proc(nil), s.procs...)
	for _, p := range procs {
		p.stopping = true
	}
	s.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		stop(procs[i], grace)
	}
}

func stop(p *proc, grace time.Duration) {
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	fmt.Fprintf(os.Stderr, "clusterd-kube-peer: %s ignored SIGTERM for %v, killing it\n", p.name, grace)
	_ = syscall.Kill(pgid, syscall.SIGKILL)
	t.Reset(5 * time.Second)
	select {
	case <-p.done:
	case <-t.C:
	}
}

// tail returns the last n lines of path (read from its last 64 KiB).
func tail(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return []string{"(" + err.Error() + ")"}
	}
	defer f.Close()
	const window = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > window {
		_, _ = f.Seek(st.Size()-window, 0)
	}
	buf := make([]byte, window)
	k, _ := f.Read(buf)
	lines := strings.Split(strings.TrimRight(string(buf[:k]), "\n"), "\n")
	return lines[max(0, len(lines)-n):]
}

// freePorts returns n distinct loopback ports that were free a moment ago:
// all n are held open together so that they differ, then released for the
// servers, which cannot listen on port 0 themselves.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free loopback port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// procStat reads a process's CPU seconds (utime+stime) and resident set.
func procStat(pid int) (cpuS, rssMiB float64, err error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// Fields after the parenthesised command name, which may hold spaces:
	// [0] is field 3 (state), so utime (14) and stime (15) are [11] and [12].
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	const clockTicks = 100 // USER_HZ, 100 on every Linux ABI Go runs on
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			rssMiB = kib / 1024
		}
	}
	return (ut + st) / clockTicks, rssMiB, nil
}

// connsTo counts this process's established TCP connections to
// 127.0.0.1:port: the lines of /proc/net/tcp with that remote port whose
// socket inode is one of our descriptors (kube-apiserver also connects to
// itself).
func connsTo(port int) int {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return -1
	}
	mine := ownSockets()
	want := fmt.Sprintf(":%04X", port)
	n := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 9 && strings.HasSuffix(f[2], want) && f[3] == "01" && mine[f[9]] {
			n++
		}
	}
	return n
}

// ownSockets returns the inodes of this process's sockets.
func ownSockets() map[string]bool {
	fds, _ := os.ReadDir("/proc/self/fd")
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if ino, ok := strings.CutPrefix(link, "socket:["); ok && err == nil {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	return inodes
}
