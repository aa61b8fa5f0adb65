package sessionsup

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"
)

func tarNames(t *testing.T, b []byte) string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var out []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		s := h.Name
		if h.Typeflag == tar.TypeReg {
			data, _ := io.ReadAll(tr)
			s += ":" + string(data)
		}
		out = append(out, s)
	}
	return strings.Join(sorted(out), " ")
}
