package turns

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/roundtable-sandbox/sandbox/bench/internal/stats"
)

// LoadResult is what a concurrent load produced.
type LoadResult struct {
	Wall         time.Duration
	LatenciesMs  []float64
	Failures     int
	FailureKinds map[string]int
	Errors       []string
}

// Load submits channels x perChannel turns at once: every turn of every
// channel is posted concurrently, so each channel's queue holds perChannel
// turns and the host runs channels in parallel. newRunner returns the runner
// for one channel. Every turn that does not end in a good reply is a failure.
func Load(ctx context.Context, channels, perChannel int, newRunner func(ch int) Runner) LoadResult {
	var mu sync.Mutex
	res := LoadResult{FailureKinds: map[string]int{}}
	var wg sync.WaitGroup
	start := time.Now()
	for ch := 0; ch < channels; ch++ {
		r := newRunner(ch)
		for i := 0; i < perChannel; i++ {
			wg.Add(1)
			go func(seq int) {
				defer wg.Done()
				d, err := r.Run(ctx, seq)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					res.Failures++
					res.FailureKinds[failureKind(err)]++
					if len(res.Errors) < maxErrors {
						res.Errors = append(res.Errors, err.Error())
					}
					return
				}
				res.LatenciesMs = append(res.LatenciesMs, stats.Ms(d))
			}(ch*perChannel + i)
		}
	}
	wg.Wait()
	res.Wall = time.Since(start)
	return res
}

// failureKind buckets an error for the report: HTTP status, bad reply,
// timeout, or transport.
func failureKind(err error) string {
	s := err.Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(s, "Client.Timeout"):
		return "timeout"
	case strings.Contains(s, "status "):
		i := strings.Index(s, "status ")
		code := s[i+7:]
		if j := strings.IndexByte(code, ':'); j >= 0 {
			code = code[:j]
		}
		return fmt.Sprintf("http %s", code)
	case errors.Is(err, ErrReply):
		return "bad reply"
	}
	return "transport"
}
