package sandbox

import (
	"io/fs"
	"syscall"
)

// FileOwner is the uid of a stat result (false off Linux).
func FileOwner(st fs.FileInfo) (int, bool) {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(s.Uid), true
}

// FileGroup is the gid of a stat result.
func FileGroup(st fs.FileInfo) (int, bool) {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(s.Gid), true
}
