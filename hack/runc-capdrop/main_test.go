package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSpecFiles(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		// What containerd's runc shim passes for a new container.
		{[]string{"--root", "/run/r", "--log", "/x/log.json", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/b/pid", "id"}, []string{"/b/config.json"}},
		{[]string{"create", "-b", "/b", "id"}, []string{"/b/config.json"}},
		{[]string{"create", "--bundle=/b", "id"}, []string{"/b/config.json"}},
		{[]string{"run", "id"}, []string{"config.json"}},
		// docker exec --privileged.
		{[]string{"--root", "/run/r", "exec", "--process", "/tmp/p.json", "--detach", "id"}, []string{"/tmp/p.json"}},
		{[]string{"exec", "-p", "/tmp/p.json", "id"}, []string{"/tmp/p.json"}},
		// Nothing to rewrite.
		{[]string{"--root", "/run/r", "start", "id"}, nil},
		{[]string{"--root", "/run/r", "delete", "--force", "id"}, nil},
		{[]string{"--version"}, nil},
	} {
		if got := specFiles(tc.args); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("specFiles(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestFilterFile(t *testing.T) {
	allowed := map[string]bool{"CAP_CHOWN": true, "CAP_SYS_ADMIN": true}
	dir := t.TempDir()

	// A bundle config: capabilities under "process"; a large number must
	// survive the rewrite exactly.
	cfg := filepath.Join(dir, "config.json")
	writeFile(t, cfg, `{"ociVersion":"1.0.2","process":{"capabilities":{
		"bounding":["CAP_CHOWN","CAP_SYS_RESOURCE","CAP_SYS_ADMIN"],
		"effective":["CAP_SYS_RESOURCE"],"permitted":["CAP_CHOWN"]}},
		"linux":{"resources":{"memory":{"limit":9223372036854771712}}}}`)
	if err := filterFile(cfg, allowed); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Process struct {
			Capabilities map[string][]string `json:"capabilities"`
		} `json:"process"`
	}
	data := readFile(t, cfg)
	if err := json.Unmarshal([]byte(data), &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"bounding":  {"CAP_CHOWN", "CAP_SYS_ADMIN"},
		"effective": {},
		"permitted": {"CAP_CHOWN"},
	}
	if !reflect.DeepEqual(doc.Process.Capabilities, want) {
		t.Errorf("capabilities = %v, want %v", doc.Process.Capabilities, want)
	}
	if !strings.Contains(data, "9223372036854771712") {
		t.Errorf("the memory limit was not kept exactly: %s", data)
	}

	// An exec process file: capabilities at the top level.
	proc := filepath.Join(dir, "process.json")
	writeFile(t, proc, `{"args":["sh"],"capabilities":{"bounding":["CAP_SYS_RESOURCE","CAP_CHOWN"]}}`)
	if err := filterFile(proc, allowed); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, proc); strings.Contains(got, "CAP_SYS_RESOURCE") || !strings.Contains(got, "CAP_CHOWN") {
		t.Errorf("process file after filtering: %s", got)
	}

	// Untouched when nothing is dropped; a missing file is not an error.
	same := filepath.Join(dir, "same.json")
	orig := `{"process": {"capabilities": {"bounding": ["CAP_CHOWN"]}}}`
	writeFile(t, same, orig)
	if err := filterFile(same, allowed); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, same); got != orig {
		t.Errorf("file rewritten although nothing was dropped: %s", got)
	}
	if err := filterFile(filepath.Join(dir, "missing.json"), allowed); err != nil {
		t.Errorf("missing file: %v", err)
	}
}

func TestBoundingSetHasTheBasics(t *testing.T) {
	caps, err := boundingSet()
	if err != nil {
		t.Fatal(err)
	}
	// Any process that can run tests keeps at least these in its bounding set.
	for _, c := range []string{"CAP_CHOWN", "CAP_KILL"} {
		if !caps[c] {
			t.Errorf("%s missing from the parsed bounding set %v", c, caps)
		}
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
