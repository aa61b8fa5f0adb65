// Command floor is the benchmark's trivial container payload: it reads its
// stdin (bounded) and prints one reply object, so `runc run` of a bundle with
// it measures a container's floor cost with the same stdin/stdout shape as a
// turn and no work at all.
package main

import (
	"io"
	"os"
)

func main() {
	_, _ = io.Copy(io.Discard, io.LimitReader(os.Stdin, 1<<20))
	_, _ = os.Stdout.WriteString("{\"ok\":true,\"text\":\"floor\"}\n")
}
