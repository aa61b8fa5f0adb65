package procmem

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStatus(t *testing.T) {
	in := "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n"
	rss, hwm, err := parseStatus(bufio.NewScanner(strings.NewReader(in)))
	if err != nil || rss != 1024 || hwm != 2048 {
		t.Errorf("parseStatus = %d, %d, %v; want 1024, 2048, nil", rss, hwm, err)
	}
	if _, _, err := parseStatus(bufio.NewScanner(strings.NewReader("Name:\tkthread\n"))); err == nil {
		t.Error("parseStatus without VmRSS succeeded, want an error")
	}
}

func TestSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc here")
	}
	rss, _, err := Status(os.Getpid())
	if err != nil || rss <= 0 {
		t.Fatalf("Status(self) = %d, %v; want a positive RSS", rss, err)
	}
	s := &Sampler{PID: os.Getpid(), Interval: time.Millisecond}
	s.Start()
	time.Sleep(5 * time.Millisecond)
	peak, _, _ := s.Stop()
	if peak <= 0 {
		t.Errorf("sampler peak = %d, want > 0", peak)
	}
}

func TestParseRollup(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		rss, pss int64
		wantErr  bool
	}{
		{"both", "55d0-7ffe ---p 00000000 00:00 0 [rollup]\nRss:                3072 kB\nPss:                1100 kB\nPss_Anon:            800 kB\n", 3072, 1100, false},
		{"no pss", "Rss:                3072 kB\n", 0, 0, true},
		{"bad number", "Rss: x kB\nPss: 1 kB\n", 0, 0, true},
	}
	for _, tt := range tests {
		rss, pss, err := parseRollup(bufio.NewScanner(strings.NewReader(tt.in)))
		if (err != nil) != tt.wantErr || rss != tt.rss || pss != tt.pss {
			t.Errorf("%s: parseRollup = %d, %d, %v; want %d, %d, error %v", tt.name, rss, pss, err, tt.rss, tt.pss, tt.wantErr)
		}
	}
}
