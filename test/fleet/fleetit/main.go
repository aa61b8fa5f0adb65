// Command fleetit is the fleet harness's process inside a box's network
// namespace (test/fleet): `fleetit box` runs a pkg/fleet Box with stub turns
// against its box's nats-server, `fleetit drive` submits turns on channels
// and reports every committed reply it sees. Both print one JSON line per
// event on stdout for the harness; neither ever prints a turn's text.
//
// Built with -tags fleetstub (the stub turn is a test-only engine).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roundtable-sandbox/sandbox/pkg/fleet"
	"github.com/roundtable-sandbox/sandbox/pkg/fleetconn"
	"github.com/roundtable-sandbox/sandbox/pkg/ids"
	harness "github.com/roundtable-sandbox/sandbox/test/fleet"
)

// Line is one event on stdout (test/fleet parses the same struct).
type Line struct {
	Ev      string `json:"ev"`
	T       int64  `json:"t"` // unix ns when it was seen
	Box     string `json:"box,omitempty"`
	Turn    string `json:"turn,omitempty"`
	Channel string `json:"ch,omitempty"`
	Gen     uint64 `json:"gen,omitempty"`
	TookNs  int64  `json:"took,omitempty"` // publish to commit (box) or submit to reply (driver)
	ExecNs  int64  `json:"exec,omitempty"` // the executor's own time (box)
	// Steps is a committed turn's time by step, in ns (fleet.Event.Steps).
	Steps  map[string]int64 `json:"steps,omitempty"`
	Err    string           `json:"err,omitempty"`
	Audit  string           `json:"audit,omitempty"`
	Clean  bool             `json:"clean,omitempty"`
	Lost   int              `json:"lost,omitempty"`
	Dup    int              `json:"dup,omitempty"`
	Reord  int              `json:"reord,omitempty"`
	Extra  int              `json:"extra,omitempty"`
	Turns  int              `json:"turns,omitempty"`
	Failed int              `json:"failed,omitempty"`
	Double int              `json:"double,omitempty"` // turns run more than once (Audit.DoubleRuns)
}

var (
	outMu sync.Mutex
	out   = json.NewEncoder(os.Stdout)
)

func emit(l Line) {
	if l.T == 0 {
		l.T = time.Now().UnixNano()
	}
	outMu.Lock()
	defer outMu.Unlock()
	_ = out.Encode(l)
}

type common struct {
	url, ca, cert, key, seed, name string
	partitions, replicas           int
}

func (c *common) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "url", "", "tls:// URLs of the servers")
	fs.StringVar(&c.ca, "ca", "", "CA file")
	fs.StringVar(&c.cert, "cert", "", "client certificate")
	fs.StringVar(&c.key, "key", "", "client key")
	fs.StringVar(&c.seed, "seed", "", "nkey seed file")
	fs.StringVar(&c.name, "name", "", "box name")
	fs.IntVar(&c.partitions, "partitions", 16, "fleet partitions")
	fs.IntVar(&c.replicas, "replicas", 3, "fleet replicas")
}

type fleetConn struct{ nc *nats.Conn }

func (c *common) connect(log *slog.Logger) (*fleetConn, error) {
	nc, err := fleetconn.Connect(fleetconn.Options{URL: c.url, Name: c.name, CAFile: c.ca, CertFile: c.cert, KeyFile: c.key, NkeySeedFile: c.seed, Logger: log})
	if err != nil {
		return nil, err
	}
	return &fleetConn{nc: nc}, nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fleetit box|drive|inspect|leader [flags]")
		os.Exit(2)
	}
	level := slog.LevelInfo
	if os.Getenv("FLEETIT_DEBUG") == "1" {
		level = slog.LevelDebug // a failover's timeline, turn by turn
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	var err error
	switch os.Args[1] {
	case "box":
		err = runBox(os.Args[2:], log)
	case "drive":
		err = runDrive(os.Args[2:], log)
	case "inspect":
		err = runInspect(os.Args[2:], log)
	case "leader":
		err = runLeader(os.Args[2:], log)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetit:", err)
		os.Exit(1)
	}
}

// slotted models a box's capacity (its cores): at most n stub turns run at
// once, so that throughput depends on the number of boxes, as it does with
// real turns, rather than on the partitions alone.
type slotted struct {
	inner fleet.Executor
	slots chan struct{}
	mu    sync.Mutex
	exec  map[string]time.Duration
}

func (s *slotted) Execute(ctx context.Context, in fleet.Input) (fleet.Output, error) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return fleet.Output{}, context.Cause(ctx)
	}
	defer func() { <-s.slots }()
	t0 := time.Now()
	o, err := s.inner.Execute(ctx, in)
	s.mu.Lock()
	s.exec[in.Turn.ID] = time.Since(t0)
	s.mu.Unlock()
	return o, err
}

func (s *slotted) took(turn string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.exec[turn]
	delete(s.exec, turn)
	return d
}

func runBox(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("box", flag.ContinueOnError)
	var c common
	c.flags(fs)
	peers := fs.String("peers", "", "comma-separated names of the fleet's boxes")
	ackWait := fs.Duration("ack-wait", fleet.DefaultAckWait, "BoxOptions.AckWait")
	slots := fs.Int("slots", 2, "stub turns at once")
	stub := fs.Duration("stub", fleet.StubTurn, "stub turn duration")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log = log.With("box", c.name)
	fc, err := c.connect(log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var f *fleet.Fleet
	// Boxes starting together race to create the family's resources: a
	// refused creation is retried against what the other box made.
	for attempt := 0; ; attempt++ {
		// A request sent before the cluster elected its meta leader is
		// never answered: each attempt has its own bound.
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		f, err = fleet.Open(actx, fc.nc, fleet.Layout{Partitions: c.partitions, Replicas: c.replicas})
		acancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		log.Warn("fleetit: open the fleet; retrying", "err", err)
		t := time.NewTimer(500 * time.Millisecond)
		<-t.C
	}
	if err != nil {
		return fmt.Errorf("open fleet: %w", err)
	}
	ex := &slotted{inner: &fleet.StubExecutor{Duration: *stub}, slots: make(chan struct{}, *slots), exec: map[string]time.Duration{}}
	var peerList []string
	if *peers != "" {
		peerList = strings.Split(*peers, ",")
	}
	b, err := fleet.NewBox(f, fleet.BoxOptions{
		Name: c.name, Executor: ex, AckWait: *ackWait, Peers: peerList, Logger: log,
		OnEvent: func(e fleet.Event) {
			l := Line{Ev: string(e.Kind), Box: e.Box, Turn: e.TurnID, Channel: e.Channel, Gen: e.Generation}
			if e.Kind == fleet.EventCommitted {
				l.TookNs = e.Took.Nanoseconds()
				l.ExecNs = ex.took(e.TurnID).Nanoseconds()
				l.Steps = map[string]int64{}
				for name, d := range e.Steps.Named() {
					l.Steps[name] = d.Nanoseconds()
				}
			}
			emit(l)
		},
	})
	if err != nil {
		return err
	}
	if err := b.Start(ctx); err != nil {
		return err
	}
	emit(Line{Ev: "ready", Box: c.name})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	b.Stop()
	fc.nc.Close()
	return nil
}

// runDrive keeps -window turns in flight on each of -channels channels
// (harness.ChannelNames: spread over the partitions; each window
// published in order, then its replies awaited) until stdin
// says "stop" or closes, then audits every turn it submitted.
func runDrive(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("drive", flag.ContinueOnError)
	var c common
	c.flags(fs)
	prefix := fs.String("prefix", "ch", "channel name prefix")
	channels := fs.Int("channels", 8, "channels")
	window := fs.Int("window", 2, "turns in flight per channel")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fc, err := c.connect(log)
	if err != nil {
		return err
	}
	defer fc.nc.Close()
	bctx, bcancel := context.WithTimeout(context.Background(), 60*time.Second)
	var f *fleet.Fleet
	for {
		actx, acancel := context.WithTimeout(bctx, 5*time.Second)
		f, err = fleet.Bind(actx, fc.nc, c.partitions)
		acancel()
		if err == nil || bctx.Err() != nil {
			break
		}
		t := time.NewTimer(200 * time.Millisecond)
		<-t.C
	}
	bcancel()
	if err != nil {
		return fmt.Errorf("bind fleet: %w", err)
	}
	emit(Line{Ev: "ready", Box: c.name})

	stop := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "stop" {
				break
			}
		}
		close(stop)
	}()
	var mu sync.Mutex
	perChannel := make([][]fleet.Turn, *channels)
	names := harness.ChannelNames(*prefix, *channels, c.partitions)
	var wg sync.WaitGroup
	for i := 0; i < *channels; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ch := names[i]
			for {
				select {
				case <-stop:
					return
				default:
				}
				batch := make([]fleet.Turn, *window)
				sent := make([]time.Time, *window)
				for k := range batch {
					batch[k] = fleet.Turn{ID: ids.NewTurnID(), Channel: ch, Speaker: fleet.Speaker{ID: "driver"}, Text: "stub", From: c.name,
						DeadlineUnixMs: time.Now().Add(30 * time.Minute).UnixMilli()}
					sent[k] = time.Now()
					submit(f, batch[k], log)
					mu.Lock()
					perChannel[i] = append(perChannel[i], batch[k])
					mu.Unlock()
				}
				for k, t := range batch {
					await(f, t, sent[k], stop, log)
				}
			}
		}(i)
	}
	wg.Wait()
	var all []fleet.Turn
	for _, ts := range perChannel {
		all = append(all, ts...)
	}
	actx, acancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer acancel()
	a, err := f.Audit(actx, all)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	emit(Line{Ev: "audit", Audit: a.String(), Clean: a.Clean(), Turns: a.Turns, Lost: len(a.Lost), Dup: len(a.Overwritten), Reord: len(a.Reordered), Extra: a.ExtraCommits, Failed: a.Failed, Double: a.DoubleRuns})
	return nil
}

// submit publishes until the stream acknowledges: a resubmission of the
// same turn id is de-duplicated, so retrying through a fault is safe.
func submit(f *fleet.Fleet, t fleet.Turn, log *slog.Logger) {
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := f.Submit(ctx, t)
		cancel()
		if err == nil {
			return
		}
		if attempt%10 == 0 {
			log.Warn("fleetit: submit failed; retrying", "turn", t.ID, "err", err)
		}
		tm := time.NewTimer(200 * time.Millisecond)
		<-tm.C
	}
}

// await waits for the turn's committed reply, re-watching through faults;
// once the run is stopping it gives up after about two minutes, so that a
// lost turn is counted by the audit rather than hanging the run.
func await(f *fleet.Fleet, t fleet.Turn, sent time.Time, stop <-chan struct{}, log *slog.Logger) {
	stopping := 0
	for attempt := 0; ; attempt++ {
		select {
		case <-stop:
			if stopping++; stopping > 8 {
				log.Warn("fleetit: no reply after the run stopped; left to the audit", "turn", t.ID)
				return
			}
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		r, err := f.AwaitReply(ctx, t.ID)
		cancel()
		if err == nil {
			l := Line{Ev: "reply", Box: r.Box, Turn: t.ID, Channel: t.Channel, Gen: r.Generation, TookNs: time.Since(sent).Nanoseconds()}
			if r.Error != "" {
				l.Err = r.Error
			}
			emit(l)
			return
		}
		if !errors.Is(err, fleet.ErrNoReply) || attempt%4 == 3 {
			log.Warn("fleetit: no reply yet; waiting again", "turn", t.ID, "err", err)
		}
		if !errors.Is(err, fleet.ErrNoReply) {
			tm := time.NewTimer(200 * time.Millisecond)
			<-tm.C
		}
	}
}

// runInspect prints, per partition, the turns group member's consumer as
// the cluster sees it (leader, pin, waiting pulls, pending turns): one
// JSON line each, for the harness's fault diagnostics.
func runInspect(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	var c common
	c.flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	fc, err := c.connect(log)
	if err != nil {
		return err
	}
	defer fc.nc.Close()
	js, err := jetstream.New(fc.nc)
	if err != nil {
		return err
	}
	for p := 0; p < c.partitions; p++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ci, err := js.Consumer(ctx, fleet.TurnsStream, fleet.TurnsGroup+"-p"+strconv.Itoa(p))
		var info *jetstream.ConsumerInfo
		if err == nil {
			info, err = ci.Info(ctx)
		}
		cancel()
		l := inspectLine{Partition: p}
		if err != nil {
			l.Err = err.Error()
		} else {
			if info.Cluster != nil {
				l.Leader = info.Cluster.Leader
			}
			for _, g := range info.PriorityGroups {
				l.Pin, l.PinnedAt = g.PinnedClientID, g.PinnedTS.Format("15:04:05.000")
			}
			l.Waiting, l.AckPending, l.Pending, l.Redelivered = info.NumWaiting, info.NumAckPending, info.NumPending, info.NumRedelivered
		}
		outMu.Lock()
		_ = out.Encode(l)
		outMu.Unlock()
	}
	return nil
}

type inspectLine struct {
	Partition   int    `json:"p"`
	Leader      string `json:"leader,omitempty"`
	Pin         string `json:"pin,omitempty"`
	PinnedAt    string `json:"pinned_at,omitempty"`
	Waiting     int    `json:"waiting"`
	AckPending  int    `json:"ack_pending"`
	Pending     uint64 `json:"pending"`
	Redelivered int    `json:"redelivered"`
	Err         string `json:"err,omitempty"`
}

// runLeader prints the server name of each named stream's leader, one a
// line ("" when it has none): the partial-cut fault cuts a box from the
// leader its turns need.
func runLeader(args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("leader", flag.ContinueOnError)
	var c common
	c.flags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	fc, err := c.connect(log)
	if err != nil {
		return err
	}
	defer fc.nc.Close()
	js, err := jetstream.New(fc.nc)
	if err != nil {
		return err
	}
	for _, name := range fs.Args() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var leader string
		s, err := js.Stream(ctx, name)
		if err == nil && s.CachedInfo().Cluster != nil {
			leader = s.CachedInfo().Cluster.Leader
		}
		cancel()
		fmt.Println(leader)
	}
	return nil
}
