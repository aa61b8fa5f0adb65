package host

import (
	"errors"
	"net/http"
	"strconv"
	"time"
)

// DefaultRetryAfter is a 429's Retry-After when nothing bounds when room
// frees (a delegated job or a precheck ends when it ends).
const DefaultRetryAfter = 10 * time.Second

// setRetryAfter gives a 429 its Retry-After header, in whole seconds (at
// least 1): the refusal's own hint when it has one (a run refused while
// finished results are held: when the first may go), queue.maxWaitSeconds
// for a turn (by then every turn waiting ahead of it has had its slot or
// been refused), DefaultRetryAfter otherwise.
func (h *Host) setRetryAfter(w http.ResponseWriter, status int, err error) {
	if status != http.StatusTooManyRequests {
		return
	}
	d := DefaultRetryAfter
	var hint interface{ RetryAfter() time.Duration }
	switch {
	case errors.As(err, &hint) && hint.RetryAfter() > 0:
		d = hint.RetryAfter()
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrBusy):
		d = h.cfg.QueueWait()
	}
	w.Header().Set("Retry-After", strconv.FormatInt(max(int64((d+time.Second-1)/time.Second), 1), 10))
}
