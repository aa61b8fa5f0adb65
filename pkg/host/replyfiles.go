package host

import "time"

// replyWriteTimeout bounds writing a turn's answer (a var for tests).
var replyWriteTimeout = 2 * time.Minute
