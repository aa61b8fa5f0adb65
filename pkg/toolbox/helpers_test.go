package toolbox

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// member is one synthetic tar entry.
type member struct {
	name     string
	typ      byte
	mode     int64
	body     string
	linkname string
}

// makeTar writes members as a tar (the way mmdebstrap names them: "./x").
func makeTar(t *testing.T, members []member) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, m := range members {
		h := &tar.Header{Name: m.name, Typeflag: m.typ, Mode: m.mode, Size: int64(len(m.body)), Linkname: m.linkname, ModTime: time.Unix(1700000000, 0)}
		if m.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if m.typ == tar.TypeReg {
			tw.Write([]byte(m.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// readTar lists a tar's headers and regular files' bodies.
func readTar(t *testing.T, r io.Reader) ([]*tar.Header, map[string]string) {
	t.Helper()
	tr := tar.NewReader(r)
	var hdrs []*tar.Header
	bodies := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hdrs, bodies
		}
		if err != nil {
			t.Fatal(err)
		}
		hdrs = append(hdrs, h)
		if h.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			bodies[h.Name] = string(b)
		}
	}
}

// fakeELF is a minimal 64-bit little-endian ELF executable with one
// program header: PT_LOAD, or PT_INTERP when dynamic (enough for debug/elf).
func fakeELF(dynamic bool) []byte {
	var b bytes.Buffer
	hdr := make([]byte, 64)
	copy(hdr, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1})
	le := binary.LittleEndian
	le.PutUint16(hdr[16:], 2)    // ET_EXEC
	le.PutUint16(hdr[18:], 0x3e) // x86-64
	le.PutUint32(hdr[20:], 1)
	le.PutUint64(hdr[32:], 64) // phoff
	le.PutUint16(hdr[52:], 64) // ehsize
	le.PutUint16(hdr[54:], 56) // phentsize
	le.PutUint16(hdr[56:], 1)  // phnum
	le.PutUint16(hdr[58:], 64) // shentsize
	b.Write(hdr)
	ph := make([]byte, 56)
	typ := uint32(1) // PT_LOAD
	if dynamic {
		typ = 3 // PT_INTERP
	}
	le.PutUint32(ph[0:], typ)
	le.PutUint64(ph[8:], 0)
	le.PutUint64(ph[32:], 120)
	le.PutUint64(ph[40:], 120)
	b.Write(ph)
	b.WriteString("fake worker body\n")
	return b.Bytes()
}

// writeFile writes data under a test directory and returns the path.
func writeFile(t *testing.T, name string, data []byte, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
	return p
}
