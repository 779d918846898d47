// Package cli holds the conventions that the shale command and the packages
// behind its commands (internal/bench, internal/kvload ...) share: sizes and
// durations as users write them, one-line errors, and progress lines on
// stderr.
package cli

import (
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ParseSize parses plain bytes or a number with a B, KiB, MiB or GiB suffix.
func ParseSize(v string) (int, error) {
	mult := 1
	num := v
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(v, u.suffix) {
			num, mult = strings.TrimSuffix(v, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q (want bytes, or a number with KiB, MiB or GiB)", v)
	}
	if n > math.MaxInt/mult {
		return 0, fmt.Errorf("size %q is too large", v)
	}
	return n * mult, nil
}

// FormatSize is n as ParseSize reads it: in the largest unit that divides
// it, or plain bytes.
func FormatSize(n uint64) string {
	switch {
	case n > 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n > 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n > 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatUint(n, 10)
}

// FormatDuration is d without zero minutes and seconds after a larger
// unit: 1h, 5m, 1h30m rather than 1h0m0s, 5m0s, 1h30m0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// OneLine is s with its runs of white space, newlines included, folded
// into single spaces: an error fit for one line of stderr.
func OneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// IsTerminal tells whether w is a character device such as a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// ClearLine, written to a terminal, erases the progress line so that
// another line can take its place.
const ClearLine = "\r\033[K"

// Progress shows how a long command is going on w: on a terminal (tty), a
// line redrawn four times a second; otherwise a line every interval. line
// tells the line at each tick. The returned function stops it and clears
// the line.
func Progress(w io.Writer, tty bool, every time.Duration, line func(now time.Time) string) (stop func()) {
	if tty {
		every = 250 * time.Millisecond
	}
	quit, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				if tty {
					fmt.Fprint(w, ClearLine)
				}
				return
			case now := <-tick.C:
				if tty {
					fmt.Fprintf(w, "%s%s", ClearLine, line(now))
				} else {
					fmt.Fprintln(w, line(now))
				}
			}
		}
	}()
	return func() { close(quit); <-stopped }
}

// LockedWriter serializes writes to W: lines from several goroutines (a
// progress line, failed requests) do not interleave.
type LockedWriter struct {
	mu sync.Mutex
	W  io.Writer
}

func (l *LockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.W.Write(p)
}
