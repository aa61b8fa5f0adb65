// Command mkwheel writes a tiny pure-Python wheel (PEP 427) for the session
// scenarios and make demo: package greet with hello(who), whose answer
// carries -marker, and the dist-info a wheel installer checks (METADATA,
// WHEEL, RECORD with each file's sha256 and size). A session installs it
// as pip installs a pure wheel into a target: unpacked into a directory on
// sys.path (python3 -m zipfile -e) where the toolbox has no pip; with pip
// present (the small test toolbox has it, test/toolbox, pkg/toolbox
// SmallPackages) the scenarios use pip install --target, and the
// placeholder scenario serves it on a private index.
//
// Usage: mkwheel -out DIR [-marker TEXT]; prints the wheel's path.
package main

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const (
	name    = "greet"
	version = "1.0"
)

func main() {
	out := flag.String("out", "", "directory to write the wheel into")
	marker := flag.String("marker", "e2e", "text hello() answers with")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "mkwheel: -out is required")
		os.Exit(2)
	}
	path, err := write(*out, *marker)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkwheel:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

func write(dir, marker string) (string, error) {
	distInfo := name + "-" + version + ".dist-info"
	files := []struct{ name, body string }{
		{name + "/__init__.py", fmt.Sprintf("MARKER = %q\n\n\ndef hello(who):\n    return f\"hello {who} from greet {MARKER}\"\n", marker)},
		{distInfo + "/METADATA", "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\nSummary: a session scenario's wheel\n"},
		{distInfo + "/WHEEL", "Wheel-Version: 1.0\nGenerator: mkwheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	for _, f := range files {
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString(distInfo + "/RECORD,,\n")
	files = append(files, struct{ name, body string }{distInfo + "/RECORD", record.String()})

	path := filepath.Join(dir, name+"-"+version+"-py3-none-any.whl")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	zw := zip.NewWriter(f)
	for _, file := range files {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: file.name, Method: zip.Deflate})
		if err == nil {
			_, err = w.Write([]byte(file.body))
		}
		if err != nil {
			f.Close()
			return "", err
		}
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return path, os.Chmod(path, 0o644)
}
