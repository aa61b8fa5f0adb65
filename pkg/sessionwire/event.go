package sessionwire

// Event kinds.
const (
	// EventStarted: an exec's process started (its output follows).
	EventStarted = "started"
	// EventResult ends an exec: its ExecResult.
	EventResult = "result"
	// EventFile ends a put, get or get-dir: its FileResult (a get's and a
	// get-dir's FrameFileData came before it).
	EventFile = "file"
	// EventList is one batch of a list's entries; the last has Done.
	EventList = "list"
	// EventDone ends a signal request: the signal was sent.
	EventDone = "done"
	// EventError ends a request that failed or was refused: Error.
	EventError = "error"
)

// Event is one thing the supervisor tells the host about request ID.
// Exactly the field of its Kind is set (none for EventStarted and EventDone).
type Event struct {
	ID     string      `json:"id"`
	Kind   string      `json:"kind"`
	Result *ExecResult `json:"result,omitempty"`
	File   *FileResult `json:"file,omitempty"`
	List   *ListBatch  `json:"list,omitempty"`
	Error  *Error      `json:"error,omitempty"`
}

// ExecResult ends an exec. ExitCode is the exit status, or 128 + Signal's
// number when a signal ended it (Signal names it: "KILL", "TERM", ...).
// TimedOut: the timeout killed its process group; Cancelled: a KILL
// signal request did. The truncation flags say a stream reached
// Exec.MaxOutputBytes; the dropped counts are what was read past it.
// StartMs is the time from the request to the process started, RunMs from
// then to its end (wall clock, milliseconds).
type ExecResult struct {
	ExitCode        int    `json:"exitCode"`
	Signal          string `json:"signal,omitempty"`
	TimedOut        bool   `json:"timedOut,omitempty"`
	Cancelled       bool   `json:"cancelled,omitempty"`
	StdoutTruncated bool   `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool   `json:"stderrTruncated,omitempty"`
	StdoutDropped   int64  `json:"stdoutDropped,omitempty"`
	StderrDropped   int64  `json:"stderrDropped,omitempty"`
	StartMs         int64  `json:"startMs"`
	RunMs           int64  `json:"runMs"`
}

// FileResult ends a put, get or get-dir. Size is the bytes written (put)
// or sent (get, get-dir); Mode a get's permission bits. Changed: a get's
// file grew or shrank while it was read (what was sent is at most its size
// when opened, and the host should not trust it as a whole).
type FileResult struct {
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode,omitempty"`
	Changed bool   `json:"changed,omitempty"`
	// Skipped counts a get-dir's entries left out (not a regular file or
	// directory, or unreadable).
	Skipped int `json:"skipped,omitempty"`
}

// Entry types of a list.
const (
	EntryFile    = "file"
	EntryDir     = "dir"
	EntrySymlink = "symlink"
	EntryOther   = "other"
)

// Entry is one name of a listed directory (never followed: a symlink is
// listed as one, with no target).
type Entry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"`
}

// ListBatch is up to MaxListBatch entries; Done marks the last batch, and
// Truncated there says the directory had more than MaxListEntries.
type ListBatch struct {
	Entries   []Entry `json:"entries"`
	Done      bool    `json:"done,omitempty"`
	Truncated bool    `json:"truncated,omitempty"`
}

// Error codes: the only values Error.Code takes. Messages are generic.
const (
	ErrBadRequest = "bad_request" // the request was refused (Validate, unknown target, duplicate id)
	ErrBusy       = "busy"        // the concurrency bound of execs is reached
	ErrNotFound   = "not_found"   // no such file or directory, or no such running exec
	ErrDenied     = "denied"      // a symlink on the path, a path out of its root, or permission
	ErrTooLarge   = "too_large"   // over a size or count bound
	ErrNotRegular = "not_regular" // not a regular file (get) or not a directory (list, get-dir)
	ErrStart      = "start"       // the command could not be started
	ErrInternal   = "internal"    // the supervisor failed
)

// KnownErrorCode reports whether code is one of the codes above.
func KnownErrorCode(code string) bool {
	switch code {
	case ErrBadRequest, ErrBusy, ErrNotFound, ErrDenied, ErrTooLarge, ErrNotRegular, ErrStart, ErrInternal:
		return true
	}
	return false
}

// Error ends a request that failed: a code and a short generic message.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
