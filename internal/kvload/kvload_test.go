package kvload

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func readAll(t *testing.T, in string, f Format) ([]string, error) {
	t.Helper()
	r := NewReader(strings.NewReader(in), f)
	var out []string
	for {
		k, v, err := r.Next()
		if errors.Is(err, io.EOF) {
			if r.BytesRead() != int64(len(in)) {
				t.Errorf("read %d of %d bytes", r.BytesRead(), len(in))
			}
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, string(k)+"="+string(v))
	}
}

func TestReader(t *testing.T) {
	for _, c := range []struct {
		name, in string
		format   Format
		want     string // pairs joined by " "
		err      string
	}{
		{"tsv", "a\t1\nb\t2\n", Auto, "a=1 b=2", ""},
		{"tsv without final newline, CRLF, blank lines, tabs in value", "a\t1\r\n\n\nb\tx\ty", TSV, "a=1 b=x\ty", ""},
		{"tsv empty value", "a\t\n", TSV, "a=", ""},
		{"json", `{"key":"a","value":"1"}` + "\n" + `{"keyBase64":"/w==","valueBase64":"AAE="}` + "\n", Auto, "a=1 \xff=\x00\x01", ""},
		{"json empty value", `{"key":"a","value":""}`, JSON, "a=", ""},
		{"tsv missing tab", "a\t1\nb 2\n", Auto, "a=1", "line 2: no tab between key and value"},
		{"tsv empty key", "\t1\n", TSV, "", "line 1: empty key"},
		{"json bad syntax", "\n" + `{"key":"a","value":"1"}` + "\n" + `{"key":"a",}`, Auto, "a=1", "line 3: invalid JSON"},
		{"json unknown field", `{"key":"a","val":"1"}`, JSON, "", `line 1: invalid JSON (json: unknown field "val")`},
		{"json no value", `{"key":"a"}`, JSON, "", `line 1: no "value" (or "valueBase64")`},
		{"json both key forms", `{"key":"a","keyBase64":"YQ==","value":"1"}`, JSON, "", `line 1: both "key" and "keyBase64" given`},
		{"json bad base64", `{"key":"a","valueBase64":"!!"}`, JSON, "", "line 1: valueBase64 is not valid base64"},
		{"json empty key", `{"key":"","value":"1"}`, JSON, "", "line 1: empty key"},
		{"json two values on a line", `{"key":"a","value":"1"} {"key":"b","value":"2"}`, JSON, "", "line 1: more than one JSON value"},
		{"json read as tsv", `{"key":"a","value":"1"}`, TSV, "", "line 1: no tab"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := readAll(t, c.in, c.format)
			if strings.Join(got, " ") != c.want {
				t.Errorf("pairs %q, want %q", strings.Join(got, " "), c.want)
			}
			if c.err == "" && err != nil {
				t.Errorf("error %v", err)
			}
			if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("error %v, want one containing %q", err, c.err)
			}
		})
	}
}

// A line longer than the reader's buffer is read whole.
func TestLongLine(t *testing.T) {
	v := strings.Repeat("v", 3<<20)
	got, err := readAll(t, "k\t"+v+"\nk2\tx\n", Auto)
	if err != nil || len(got) != 2 || got[0] != "k="+v || got[1] != "k2=x" {
		t.Fatalf("got %d pairs, %v", len(got), err)
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"": Auto, "auto": Auto, "tsv": TSV, "json": JSON} {
		if f, err := ParseFormat(in); err != nil || f != want {
			t.Errorf("ParseFormat(%q) = %v, %v", in, f, err)
		}
	}
	if _, err := ParseFormat("csv"); err == nil || !strings.Contains(err.Error(), "want auto, tsv") {
		t.Errorf("ParseFormat(csv): %v", err)
	}
}

func TestPacked(t *testing.T) {
	var b []byte
	pairs := [][2]string{{"a", "1"}, {"", ""}, {strings.Repeat("k", 200), strings.Repeat("v", 70000)}}
	for _, p := range pairs {
		b = AppendPacked(b, []byte(p[0]), []byte(p[1]))
	}
	var got [][2]string
	if err := ForEachPacked(b, func(k, v []byte) error { got = append(got, [2]string{string(k), string(v)}); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(pairs) || got[0] != pairs[0] || got[1] != pairs[1] || got[2] != pairs[2] {
		t.Fatalf("round trip: %d pairs", len(got))
	}
	for _, bad := range [][]byte{b[:len(b)-1], {0x05, 'a'}, {0x01, 'a'}, {0x80}} {
		if err := ForEachPacked(bad, func(k, v []byte) error { return nil }); !errors.Is(err, ErrPacked) {
			t.Errorf("%q: %v, want ErrPacked", bad[:min(len(bad), 8)], err)
		}
	}
	stop := errors.New("stop")
	if err := ForEachPacked(b, func(k, v []byte) error { return stop }); err != stop {
		t.Errorf("fn's error not returned: %v", err)
	}
}
