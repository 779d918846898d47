package jobreport

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "termination-log")
	want := Report{Command: "create", ID: "b1", Bytes: 10, Objects: 4, CopiedBytes: 3, CopiedObjects: 1, Sequence: 99, Time: time.Unix(100, 0).UTC(), Completed: time.Unix(200, 0).UTC()}
	if err := Write(p, want); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	got, err := Parse(string(b))
	if err != nil || !got.Time.Equal(want.Time) || got.ID != "b1" || got.Sequence != 99 || got.CopiedObjects != 1 {
		t.Fatalf("%+v %v", got, err)
	}
	// Too many deleted ids for a termination message: dropped, the rest kept.
	long := Report{Command: "prune", Deleted: strings.Split(strings.Repeat("b20260101-020000,", 400), ",")}
	if err := Write(p, long); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); len(b) > MaxSize {
		t.Errorf("report of %d bytes, over the kubelet's %d", len(b), MaxSize)
	}
	if _, err := Parse("backup b1: object not found"); err == nil || !strings.Contains(err.Error(), "not its report") {
		t.Errorf("a log line parsed: %v", err)
	}
}
