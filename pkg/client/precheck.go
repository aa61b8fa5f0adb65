package client

import (
	"context"
	"net/http"

	"github.com/roundtable-sandbox/sandbox/pkg/precheck"
)

// maxPrecheckBytes bounds a precheck answer: a context of at most 256,000
// characters (prechecks.maxContextChars' upper bound), JSON-escaped.
const maxPrecheckBytes = 2 << 20

// Precheck runs one precheck script and waits for its answer (bounded by
// TurnTimeout: a precheck may wait for the host's concurrency cap like a
// turn). A script that failed or ran out of time is an Answer with Error,
// not an error: the seed wakes the scheduled turn with it.
func (c *Client) Precheck(ctx context.Context, req precheck.Request) (precheck.Answer, error) {
	var a precheck.Answer
	err := c.doBounded(ctx, c.opts.TurnTimeout, maxPrecheckBytes, http.MethodPost, []string{"v1", "prechecks"}, req, &a)
	return a, err
}
