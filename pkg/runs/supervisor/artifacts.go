package supervisor

import (
	"strings"

	"golang.org/x/sys/unix"

	"github.com/roundtable-sandbox/sandbox/pkg/runs/wire"
)

// collect sends every requested artifact, in the job's order. It runs after
// every other process was killed, so nothing swaps a file while it looks.
func (s *supervisor) collect() {
	if len(s.job.Artifacts) == 0 {
		return
	}
	root, rootErr := unix.Open(s.o.OutputDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if rootErr == nil {
		defer unix.Close(root)
	} else {
		s.log.Error("cannot open the output directory", "reason", rootErr.Error())
	}
	var total int64
	for _, p := range s.job.Artifacts {
		var h wire.ArtifactHeader
		var data []byte
		if rootErr != nil {
			h = wire.ArtifactHeader{Path: p, Error: wire.ArtifactUnreadable}
			if rootErr == unix.ENOENT {
				h.Error = wire.ArtifactMissing
			}
		} else {
			h, data = readArtifact(root, p, s.job.MaxArtifactBytes, s.job.MaxArtifactTotalBytes-total)
		}
		total += h.Size
		if err := s.enc.Artifact(h, data); err != nil {
			s.noteEncodeErr(err)
		}
	}
}

const (
	dirFlags  = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fileFlags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
)

// readArtifact reads the regular file at rel (a path wire.ValidArtifactPath
// accepted) under the directory root: each directory component opened with
// O_NOFOLLOW|O_DIRECTORY from the one before, the file's type checked
// before it is opened (a fifo or device is never opened) and again on the
// open descriptor, its size within max and left, and exactly that many bytes
// read. Every failure is a header with an error and no data.
func readArtifact(root int, rel string, max, left int64) (wire.ArtifactHeader, []byte) {
	fail := func(e string) (wire.ArtifactHeader, []byte) { return wire.ArtifactHeader{Path: rel, Error: e}, nil }
	comps := strings.Split(rel, "/")
	dir := root
	for _, c := range comps[:len(comps)-1] {
		fd, err := unix.Openat(dir, c, dirFlags, 0)
		if err != nil {
			return fail(classify(dir, c, err))
		}
		if dir != root {
			unix.Close(dir)
		}
		dir = fd
	}
	if dir != root {
		defer unix.Close(dir)
	}
	name := comps[len(comps)-1]
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fail(classify(dir, name, err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fail(wire.ArtifactNotRegular)
	}
	fd, err := unix.Openat(dir, name, fileFlags, 0)
	if err != nil {
		return fail(classify(dir, name, err))
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return fail(wire.ArtifactUnreadable)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fail(wire.ArtifactNotRegular) // swapped between the two looks
	}
	size := st.Size
	switch {
	case size > max:
		return fail(wire.ArtifactOverSize)
	case size > left:
		return fail(wire.ArtifactOverTotal)
	}
	data := make([]byte, size)
	for off := 0; off < len(data); {
		n, err := unix.Read(fd, data[off:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fail(wire.ArtifactUnreadable)
		}
		if n == 0 {
			return fail(wire.ArtifactChanged) // shrank
		}
		off += n
	}
	var one [1]byte
	if n, _ := unix.Read(fd, one[:]); n > 0 {
		return fail(wire.ArtifactChanged) // grew
	}
	if err := unix.Fstat(fd, &st); err != nil || st.Size != size {
		return fail(wire.ArtifactChanged)
	}
	return wire.ArtifactHeader{Path: rel, Size: size}, data
}

// classify names why name under dir could not be opened: a symlink (at the
// end or as a directory) is not a regular file; an absent name, or a path
// through something that is not a directory, is missing.
func classify(dir int, name string, err error) string {
	var st unix.Stat_t
	if lerr := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); lerr == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return wire.ArtifactNotRegular
	}
	switch err {
	case unix.ENOENT, unix.ENOTDIR:
		return wire.ArtifactMissing
	case unix.ELOOP:
		return wire.ArtifactNotRegular
	}
	return wire.ArtifactUnreadable
}
