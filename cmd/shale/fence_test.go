package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFenceCommand: `shale fence` deposes a running primary (which then
// refuses writes), prints the epoch it took, and leaves it released
// (fence-status says so); on a location without the database, --existing
// refuses before claiming anything and says where it looked.
func TestFenceCommand(t *testing.T) {
	root := t.TempDir()
	db := "file://" + filepath.Join(root, "db")
	p := startPrimary(t, db, filepath.Join(root, "cache"))
	if code, _, e := shale("kv", "put", "--addr="+p.addr, "k", "v"); code != 0 {
		t.Fatalf("put: %s", e)
	}
	code, out, e := shale("fence", "--db", db, "--existing", "--lease", "500ms")
	if code != 0 || !strings.Contains(out, "at epoch 2") {
		t.Fatalf("fence: exit %d, %q %s", code, out, e)
	}
	if code, _, _ := shale("kv", "put", "--addr="+p.addr, "k2", "v"); code == 0 {
		t.Errorf("the fenced primary acknowledged a write")
	}
	code, out, e = shale("admin", "fence-status", "--db", db, "-o", "json")
	if code != 0 || !strings.Contains(out, `"epoch": 2`) || !strings.Contains(out, `"released": true`) {
		t.Errorf("fence-status after the fence: exit %d, %s %s", code, out, e)
	}

	empty := filepath.Join(root, "empty")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, e = shale("fence", "--db", "file://"+empty, "--existing")
	if code == 0 || !strings.Contains(e, empty) {
		t.Errorf("fence --existing of an empty location: exit %d, %s", code, e)
	}
	if code, _, e = shale("fence"); code != 2 || !strings.Contains(e, "--db is required") {
		t.Errorf("fence without --db: exit %d, %s", code, e)
	}
}
