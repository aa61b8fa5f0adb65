// Command mkarchive writes the worker image as a docker-archive tar (what
// `docker load` accepts) without any Docker engine, so the .deb build needs
// none. The output is deterministic: fixed mtimes (SOURCE_DATE_EPOCH or the
// epoch), fixed ordering, the same config as image/Dockerfile (numeric
// non-root User, Entrypoint, no Env).
package main

import (
	"flag"
	"fmt"
	"github.com/roundtable-sandbox/sandbox/pkg/imagearchive"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/roundtable-sandbox/sandbox/pkg/atomicfile"
)

type tagList []string

func (t *tagList) String() string     { return strings.Join(*t, ",") }
func (t *tagList) Set(v string) error { *t = append(*t, v); return nil }

func main() {
	var tags tagList
	bin := flag.String("binary", "bin/sandbox-worker", "static worker binary")
	out := flag.String("out", "dist/worker-image.tar", "output archive")
	arch := flag.String("arch", runtime.GOARCH, "image architecture (GOARCH of the binary)")
	user := flag.String("user", "65534:65534", "numeric non-root uid:gid")
	flag.Var(&tags, "tag", "repo:tag (repeatable)")
	flag.Parse()
	if err := run(*bin, *out, *arch, *user, tags); err != nil {
		fmt.Fprintln(os.Stderr, "mkarchive:", err)
		os.Exit(1)
	}
}

func run(bin, out, arch, user string, tags []string) error {
	epoch := int64(0)
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q is not a non-negative integer", s)
		}
		epoch = v
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	archive, err := imagearchive.Build(data, imagearchive.Options{Tags: tags, Arch: arch, User: user, Entrypoint: "/sandbox-worker", Time: time.Unix(epoch, 0)})
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(out, archive, 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: %d bytes, tags %s\n", out, len(archive), strings.Join(tags, " "))
	return nil
}
