package cache

import (
	"bytes"
	"math/rand"
	"reflect"
	"testing"
)

func TestRangeSplitting(t *testing.T) {
	const b, size = 10, 95 // blocks 0..9, the last one 5 bytes
	for _, tc := range []struct {
		name  string
		spans []Span
		want  []int64
		runs  [][]int64
	}{
		{"inside one block", []Span{{3, 4}}, []int64{0}, [][]int64{{0}}},
		{"exactly one block", []Span{{10, 10}}, []int64{1}, [][]int64{{1}}},
		{"straddles a boundary", []Span{{8, 4}}, []int64{0, 1}, [][]int64{{0, 1}}},
		{"spans three", []Span{{19, 12}}, []int64{1, 2, 3}, [][]int64{{1, 2, 3}}},
		{"past the end", []Span{{90, 50}}, []int64{9}, [][]int64{{9}}},
		{"at the end", []Span{{95, 10}}, nil, nil},
		{"empty", []Span{{5, 0}}, nil, nil},
		{"shared and unordered", []Span{{55, 3}, {2, 1}, {51, 2}, {18, 5}}, []int64{0, 1, 2, 5}, [][]int64{{0, 1, 2}, {5}}},
		{"long run is split", []Span{{0, 95}}, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, [][]int64{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}},
	} {
		got := blocksOf(tc.spans, b, size)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: blocksOf = %v, want %v", tc.name, got, tc.want)
		}
		if runs := runsOf(got, 4); !reflect.DeepEqual(runs, tc.runs) {
			t.Errorf("%s: runsOf = %v, want %v", tc.name, runs, tc.runs)
		}
	}

	// copyOut assembles any range from the blocks, clipped at the end.
	file := make([]byte, size)
	rand.New(rand.NewSource(1)).Read(file)
	blocks := map[int64][]byte{}
	for i := int64(0); i*b < size; i++ {
		blocks[i] = file[i*b : min((i+1)*b, size)]
	}
	for off := int64(0); off <= size; off++ {
		for n := 0; n <= 30; n++ {
			buf := make([]byte, n)
			got := copyOut(buf, off, b, size, blocks)
			want := file[off:min(off+int64(n), size)]
			if got != len(want) || !bytes.Equal(buf[:got], want) {
				t.Fatalf("copyOut(off %d, n %d) = %d bytes %x, want %x", off, n, got, buf[:got], want)
			}
		}
	}
}
