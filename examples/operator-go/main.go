// Command operator is a small example operator for ClusterD: it watches fault
// events from a stored cursor (a revision), reacts to each one (prints a line,
// and optionally runs a command with the event as JSON on stdin, e.g. to label
// a node), persists the cursor atomically after each event, and after a
// restart resumes exactly where it left off.
//
// Build: ./generate.sh && go build -o operator .
//
// TLS, mutual TLS and a bearer token: -ca, -cert, -key, -token, -token-file,
// -server-name, or CLUSTERD_CA ... (security.go), as every ClusterD client.
package main

//go:generate ./generate.sh

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	clusterdv1 "clusterd.dev/examples/operator/gen/clusterd/v1"
)

// Exit codes.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitCompacted   = 3 // the cursor points into compacted history
	exitActionError = 4 // the -on-fault command failed; the cursor stays before that event
)

type config struct {
	server            string
	cursorFile        string
	onFault           string
	maxEvents         int
	fromRevision      uint64
	minLevel          clusterdv1.FaultLevel
	resetOnCompaction bool
	maxBackoff        time.Duration
	security          security // -ca, -cert, -key, -token, -token-file, -server-name (security.go)
}

func main() { os.Exit(run()) }

func run() int {
	var cfg config
	var minLevel string
	defaultServer := "localhost:8899"
	if v := os.Getenv("CLUSTERD_ADDR"); v != "" {
		defaultServer = v
	}
	flag.StringVar(&cfg.server, "server", defaultServer, "ClusterD gRPC address (env CLUSTERD_ADDR)")
	flag.StringVar(&cfg.cursorFile, "cursor-file", "operator.cursor", "file that keeps the revision of the last processed event")
	flag.StringVar(&cfg.onFault, "on-fault", "", "shell command run for each fault event, with the event as JSON on stdin\n"+
		"and FAULT_NODE, FAULT_DEVICE, FAULT_CODE, FAULT_LEVEL, FAULT_STATE, EVENT_TYPE, EVENT_REVISION set")
	flag.IntVar(&cfg.maxEvents, "max-events", 0, "exit 0 after this many fault events (0: run until SIGINT/SIGTERM)")
	flag.Uint64Var(&cfg.fromRevision, "from-revision", 0, "where to start when the cursor file does not exist yet (0: all history)")
	flag.StringVar(&minLevel, "min-level", "", "only fault events at this level or worse, e.g. RESTART_REQUEST")
	flag.BoolVar(&cfg.resetOnCompaction, "reset-on-compaction", false,
		"if the cursor points into compacted history, skip to the oldest revision available instead of exiting")
	flag.DurationVar(&cfg.maxBackoff, "max-backoff", 10*time.Second, "longest wait between reconnects")
	cfg.security.registerFlags(flag.CommandLine)
	flag.Parse()
	cfg.security.applyEnv(os.Getenv)
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("operator: ")
	if flag.NArg() > 0 {
		log.Printf("unexpected arguments: %v", flag.Args())
		return exitUsage
	}
	if minLevel != "" {
		name := strings.ToUpper(minLevel)
		if !strings.HasPrefix(name, "FAULT_LEVEL_") {
			name = "FAULT_LEVEL_" + name
		}
		v, ok := clusterdv1.FaultLevel_value[name]
		if !ok {
			log.Printf("-min-level: unknown level %q", minLevel)
			return exitUsage
		}
		cfg.minLevel = clusterdv1.FaultLevel(v)
	}

	dialOpts, err := cfg.security.dialOptions()
	if err != nil {
		log.Print(err)
		return exitUsage
	}

	cursor, found, err := loadCursor(cfg.cursorFile)
	if err != nil {
		log.Printf("cursor: %v", err)
		return exitError
	}
	if found {
		log.Printf("resuming after revision %d (from %s)", cursor, cfg.cursorFile)
	} else {
		cursor = cfg.fromRevision
		log.Printf("no cursor file %s: starting after revision %d", cfg.cursorFile, cursor)
	}

	conn, err := grpc.NewClient(cfg.server, dialOpts...)
	if err != nil {
		log.Printf("connect %s: %v", cfg.server, err)
		return exitUsage
	}
	defer conn.Close()
	op := &operator{cfg: cfg, client: clusterdv1.NewClusterServiceClient(conn), cursor: cursor}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return op.loop(ctx)
}

type operator struct {
	cfg       config
	client    clusterdv1.ClusterServiceClient
	cursor    uint64 // every event at or below it has been processed
	processed int
}

var errDone = errors.New("max events reached")

// loop watches from the cursor and reconnects until done, stopped, or a
// failure that a retry cannot fix.
func (o *operator) loop(ctx context.Context) int {
	const minBackoff = 100 * time.Millisecond
	backoff := minBackoff
	for {
		received, err := o.watch(ctx)
		if errors.Is(err, errDone) {
			log.Printf("processed %d fault events; cursor at revision %d", o.processed, o.cursor)
			return exitOK
		}
		var ae *actionError
		if errors.As(err, &ae) {
			log.Printf("%v; cursor stays at revision %d, the event is retried on restart", err, o.cursor)
			return exitActionError
		}
		if ctx.Err() != nil {
			log.Printf("stopping; cursor at revision %d", o.cursor)
			return exitOK
		}
		if received {
			backoff = minBackoff
		}
		st, _ := status.FromError(err)
		switch {
		case errors.Is(err, io.EOF):
			log.Printf("server ended the stream; reconnecting from revision %d", o.cursor)
		case st.Code() == codes.OutOfRange:
			oldest := o.oldestAvailable(ctx)
			log.Printf("history after revision %d is compacted: %s", o.cursor, st.Message())
			if oldest == 0 {
				log.Printf("oldest available revision: unknown (GetSummary failed)")
				return exitCompacted
			}
			log.Printf("oldest available revision: %d", oldest)
			if !o.cfg.resetOnCompaction {
				log.Printf("events %d..%d are lost to this operator; rerun with -reset-on-compaction to skip them", o.cursor+1, oldest-1)
				return exitCompacted
			}
			log.Printf("-reset-on-compaction: SKIPPING events %d..%d, continuing from revision %d", o.cursor+1, oldest-1, oldest)
			if err := o.advance(oldest - 1); err != nil {
				log.Printf("cursor: %v", err)
				return exitError
			}
			continue
		case st.Code() == codes.ResourceExhausted:
			// The server ended a watcher that fell too far behind: resume from
			// the cursor right away (the history is still there).
			log.Printf("fell behind (%s); resuming from revision %d", st.Message(), o.cursor)
			backoff = minBackoff
		case st.Code() == codes.Unavailable, st.Code() == codes.Canceled, st.Code() == codes.Aborted,
			st.Code() == codes.DeadlineExceeded, st.Code() == codes.Internal, st.Code() == codes.Unknown:
			log.Printf("%s: %s; reconnecting in %v", st.Code(), st.Message(), backoff)
		default:
			log.Printf("watch failed: %s: %s", st.Code(), st.Message())
			return exitError
		}
		// Full jitter on the upper half keeps a fleet of operators from
		// reconnecting in lock step.
		wait := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		select {
		case <-ctx.Done():
			log.Printf("stopping; cursor at revision %d", o.cursor)
			return exitOK
		case <-time.After(wait):
		}
		backoff = min(2*backoff, o.cfg.maxBackoff)
	}
}

// watch runs one Watch stream from the cursor. It reports whether any message
// arrived, and returns the error that ended the stream.
func (o *operator) watch(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := o.client.Watch(ctx, &clusterdv1.WatchRequest{
		FromRevision: o.cursor,
		Types: []clusterdv1.EventType{
			clusterdv1.EventType_EVENT_TYPE_FAULT_RAISED,
			clusterdv1.EventType_EVENT_TYPE_FAULT_UPDATED,
			clusterdv1.EventType_EVENT_TYPE_FAULT_CLEARED,
		},
		MinLevel: o.cfg.minLevel,
	})
	if err != nil {
		return false, err
	}
	received := false
	for {
		resp, err := stream.Recv()
		if err != nil {
			return received, err
		}
		received = true
		for _, ev := range resp.GetEvents() {
			if ev.GetRevision() <= o.cursor {
				continue // never process an event twice
			}
			if err := o.react(ctx, ev); err != nil {
				return received, err
			}
			if err := o.advance(ev.GetRevision()); err != nil {
				return received, &actionError{fmt.Errorf("save cursor: %w", err)}
			}
			o.processed++
			if o.cfg.maxEvents > 0 && o.processed >= o.cfg.maxEvents {
				return received, errDone
			}
		}
		// The response's revision also covers events the filter skipped.
		if resp.GetRevision() > o.cursor {
			if err := o.advance(resp.GetRevision()); err != nil {
				return received, &actionError{fmt.Errorf("save cursor: %w", err)}
			}
		}
	}
}

type actionError struct{ err error }

func (e *actionError) Error() string { return e.err.Error() }
func (e *actionError) Unwrap() error { return e.err }

// react handles one fault event: a line on stdout, then the -on-fault command.
func (o *operator) react(ctx context.Context, ev *clusterdv1.Event) error {
	f := ev.GetFault()
	device := "-"
	if f.DeviceId != nil {
		device = strconv.FormatUint(uint64(f.GetDeviceId()), 10)
	}
	evType := strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_")
	level := strings.TrimPrefix(f.GetLevel().String(), "FAULT_LEVEL_")
	state := strings.TrimPrefix(f.GetState().String(), "FAULT_STATE_")
	fmt.Printf("revision=%d %s id=%s node=%s device=%s code=%s level=%s state=%s\n",
		ev.GetRevision(), evType, f.GetId(), f.GetNode(), device, f.GetCode(), level, state)
	if o.cfg.onFault == "" {
		return nil
	}
	body, err := protojson.Marshal(ev)
	if err != nil {
		return &actionError{fmt.Errorf("revision %d: encode event: %w", ev.GetRevision(), err)}
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", o.cfg.onFault)
	cmd.Stdin = strings.NewReader(string(body) + "\n")
	cmd.Stdout = os.Stderr // keep stdout for the one line per event
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(),
		"FAULT_NODE="+f.GetNode(), "FAULT_DEVICE="+device, "FAULT_CODE="+f.GetCode(),
		"FAULT_LEVEL="+level, "FAULT_STATE="+state, "FAULT_ID="+f.GetId(),
		"EVENT_TYPE="+evType, "EVENT_REVISION="+strconv.FormatUint(ev.GetRevision(), 10))
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &actionError{fmt.Errorf("revision %d: -on-fault command: %w", ev.GetRevision(), err)}
	}
	return nil
}

// advance moves the cursor forward and persists it.
func (o *operator) advance(rev uint64) error {
	if err := saveCursor(o.cfg.cursorFile, rev); err != nil {
		return err
	}
	o.cursor = rev
	return nil
}

// oldestAvailable asks the server for the oldest revision still in the
// history (0 when it cannot tell).
func (o *operator) oldestAvailable(ctx context.Context) uint64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := o.client.GetSummary(ctx, &clusterdv1.GetSummaryRequest{})
	if err != nil {
		log.Printf("GetSummary: %v", err)
		return 0
	}
	return s.GetCompactedRevision() + 1
}

// loadCursor reads the revision stored in path; found is false when the file
// does not exist.
func loadCursor(path string) (rev uint64, found bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	rev, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%s: not a revision: %q", path, strings.TrimSpace(string(b)))
	}
	return rev, true, nil
}

// saveCursor writes the revision atomically: a temporary file in the same
// directory, fsynced, renamed over the old one, then the directory fsynced,
// so that a crash leaves either the old or the new cursor, never a torn one.
func saveCursor(path string, rev uint64) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := fmt.Fprintf(tmp, "%d\n", rev); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
