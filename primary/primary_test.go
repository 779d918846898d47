package primary

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	kvv1 "github.com/shale-rocks/shale/api/kv/v1"
	"github.com/shale-rocks/shale/internal/engine"
	"github.com/shale-rocks/shale/internal/kvload"
	"github.com/shale-rocks/shale/internal/kvserver"
	"github.com/shale-rocks/shale/internal/shalefs"
)

type fixture struct {
	srv  *Server
	conn *grpc.ClientConn
	kv   kvv1.KVClient
	ctx  context.Context
}

func start(t *testing.T, limits kvserver.Limits) *fixture {
	t.Helper()
	return startEngine(t, limits, engine.DefaultOptions())
}

func startEngine(t *testing.T, limits kvserver.Limits, eo engine.Options) *fixture {
	t.Helper()
	s, err := Start(Config{
		DB:            "file://" + filepath.Join(t.TempDir(), "db"),
		Listen:        "127.0.0.1:0",
		MetricsListen: "127.0.0.1:0",
		Limits:        limits,
		Engine:        eo,
		Storage:       shalefs.Config{CacheDir: filepath.Join(t.TempDir(), "cache"), Lease: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(5 * time.Second) })
	conn, err := grpc.NewClient(s.Addr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20), grpc.MaxCallSendMsgSize(256<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &fixture{srv: s, conn: conn, kv: kvv1.NewKVClient(conn), ctx: ctx}
}

func (f *fixture) put(t *testing.T, k, v string) {
	t.Helper()
	if _, err := f.kv.Put(f.ctx, &kvv1.PutRequest{Key: []byte(k), Value: []byte(v), Sync: true}); err != nil {
		t.Fatalf("put %q: %v", k, err)
	}
}

func (f *fixture) get(t *testing.T, k string) (string, bool) {
	t.Helper()
	r, err := f.kv.Get(f.ctx, &kvv1.GetRequest{Key: []byte(k)})
	if status.Code(err) == codes.NotFound {
		return "", false
	}
	if err != nil {
		t.Fatalf("get %q: %v", k, err)
	}
	return string(r.Value), true
}

func (f *fixture) scan(t *testing.T, req *kvv1.ScanRequest) (pairs []string, chunks int) {
	t.Helper()
	stream, err := f.kv.Scan(f.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return pairs, chunks
		}
		if err != nil {
			t.Fatalf("scan %v: %v", req, err)
		}
		chunks++
		for _, p := range c.Pairs {
			pairs = append(pairs, string(p.Key)+"="+string(p.Value))
		}
	}
}

func TestEveryRPC(t *testing.T) {
	f := start(t, kvserver.DefaultLimits())

	// Put / Get / Delete
	r, err := f.kv.Put(f.ctx, &kvv1.PutRequest{Key: []byte("k1"), Value: []byte("v1"), Sync: true})
	if err != nil || r.Sequence != 1 {
		t.Fatalf("put: %v %v", r, err)
	}
	if v, ok := f.get(t, "k1"); !ok || v != "v1" {
		t.Fatalf("get k1 = %q %v", v, ok)
	}
	_, err = f.kv.Get(f.ctx, &kvv1.GetRequest{Key: []byte("missing")})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `"missing" not found`) {
		t.Fatalf("get missing: %v", err)
	}
	f.put(t, "empty-value", "")
	if v, ok := f.get(t, "empty-value"); !ok || v != "" {
		t.Fatalf("empty value: %q %v", v, ok)
	}
	if _, err := f.kv.Delete(f.ctx, &kvv1.DeleteRequest{Key: []byte("k1"), Sync: true}); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.get(t, "k1"); ok {
		t.Fatal("k1 still there after delete")
	}
	if _, err := f.kv.Delete(f.ctx, &kvv1.DeleteRequest{Key: []byte("never-existed")}); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}

	// Write
	f.put(t, "doomed", "x")
	if _, err := f.kv.Write(f.ctx, &kvv1.WriteRequest{Sync: true, Mutations: []*kvv1.Mutation{
		{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte("b1"), Value: []byte("1")}}},
		{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte("b2"), Value: []byte("2")}}},
		{Op: &kvv1.Mutation_Delete_{Delete: &kvv1.Mutation_Delete{Key: []byte("doomed")}}},
	}}); err != nil {
		t.Fatal(err)
	}

	// MultiGet keeps request order and reports misses.
	mg, err := f.kv.MultiGet(f.ctx, &kvv1.MultiGetRequest{Keys: [][]byte{[]byte("b2"), []byte("doomed"), []byte("b1")}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, res := range mg.Results {
		got = append(got, fmt.Sprintf("%s:%v:%s", res.Key, res.Found, res.Value))
	}
	if want := "b2:true:2 doomed:false: b1:true:1"; strings.Join(got, " ") != want {
		t.Fatalf("multiget = %v, want %s", got, want)
	}

	// Scan
	if pairs, _ := f.scan(t, &kvv1.ScanRequest{}); strings.Join(pairs, " ") != "b1=1 b2=2 empty-value=" {
		t.Fatalf("scan = %v", pairs)
	}

	// Flush, Compact, Status
	if _, err := f.kv.Flush(f.ctx, &kvv1.FlushRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.kv.Compact(f.ctx, &kvv1.CompactRequest{}); err != nil {
		t.Fatal(err)
	}
	st, err := f.kv.Status(f.ctx, &kvv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Role != kvv1.Role_ROLE_PRIMARY || st.LatestSequence < 6 || st.RocksdbVersion != "9.11.2" ||
		!strings.HasPrefix(st.Db, "file:///") || st.Stats.SstFiles != 1 || st.Stats.LiveSstBytes == 0 || len(st.Stats.FilesPerLevel) != 7 {
		t.Fatalf("status after flush+compact: %v", st)
	}
	// Data survives flush and compaction.
	if v, _ := f.get(t, "b2"); v != "2" {
		t.Fatalf("b2 after compaction = %q", v)
	}

	// Standard services: health and reflection.
	h, err := healthpb.NewHealthClient(f.conn).Check(f.ctx, &healthpb.HealthCheckRequest{Service: "shale.kv.v1.KV"})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	rs, err := reflectionpb.NewServerReflectionClient(f.conn).ServerReflectionInfo(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	resp, err := rs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var services []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		services = append(services, s.Name)
	}
	if !strings.Contains(strings.Join(services, " "), "shale.kv.v1.KV") {
		t.Fatalf("reflection lists %v", services)
	}
}

func mutPut(k, v string) *kvv1.Mutation {
	return &kvv1.Mutation{Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte(k), Value: []byte(v)}}}
}

func TestBatchAtomicity(t *testing.T) {
	f := start(t, kvserver.DefaultLimits())

	// A batch with one bad mutation applies nothing.
	_, err := f.kv.Write(f.ctx, &kvv1.WriteRequest{Mutations: []*kvv1.Mutation{mutPut("good", "1"), mutPut("", "2")}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "mutation 1") {
		t.Fatalf("bad batch: %v", err)
	}
	if _, ok := f.get(t, "good"); ok {
		t.Fatal("a rejected batch was partly applied")
	}

	// Readers never see half a batch: every batch sets all ten keys to the
	// same round number, and every scan and multiget must see one round.
	const keys = 10
	var stop atomic.Bool
	var wg sync.WaitGroup
	var rounds atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			var ms []*kvv1.Mutation
			for k := 0; k < keys; k++ {
				ms = append(ms, mutPut(fmt.Sprintf("acct/%02d", k), strconv.Itoa(i)))
			}
			if _, err := f.kv.Write(f.ctx, &kvv1.WriteRequest{Mutations: ms}); err != nil {
				t.Error(err)
				return
			}
			rounds.Add(1)
		}
	}()
	var mgKeys [][]byte
	for k := 0; k < keys; k++ {
		mgKeys = append(mgKeys, []byte(fmt.Sprintf("acct/%02d", k)))
	}
	deadline := time.Now().Add(2 * time.Second)
	checks := 0
	for time.Now().Before(deadline) || rounds.Load() < 50 {
		pairs, _ := f.scan(t, &kvv1.ScanRequest{Prefix: []byte("acct/")})
		if len(pairs) > 0 {
			if len(pairs) != keys {
				t.Fatalf("scan saw %d of %d keys: %v", len(pairs), keys, pairs)
			}
			for _, p := range pairs {
				if p[strings.IndexByte(p, '=')+1:] != pairs[0][strings.IndexByte(pairs[0], '=')+1:] {
					t.Fatalf("scan saw a torn batch: %v", pairs)
				}
			}
		}
		mg, err := f.kv.MultiGet(f.ctx, &kvv1.MultiGetRequest{Keys: mgKeys})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range mg.Results {
			if r.Found != mg.Results[0].Found || string(r.Value) != string(mg.Results[0].Value) {
				t.Fatalf("multiget saw a torn batch: %v", mg.Results)
			}
		}
		checks++
	}
	stop.Store(true)
	wg.Wait()
	if rounds.Load() < 50 || checks < 10 {
		t.Fatalf("too little overlap to mean anything: %d batches, %d checks", rounds.Load(), checks)
	}
}

func TestScanOrderBoundsLimits(t *testing.T) {
	f := start(t, kvserver.DefaultLimits())
	for _, k := range []string{"a", "b", "b/1", "b/2", "b0", "c", "d"} {
		f.put(t, k, strings.ToUpper(k))
	}
	for _, tc := range []struct {
		req  *kvv1.ScanRequest
		want string
	}{
		{&kvv1.ScanRequest{}, "a=A b=B b/1=B/1 b/2=B/2 b0=B0 c=C d=D"},
		{&kvv1.ScanRequest{Reverse: true}, "d=D c=C b0=B0 b/2=B/2 b/1=B/1 b=B a=A"},
		{&kvv1.ScanRequest{Start: []byte("b"), End: []byte("c")}, "b=B b/1=B/1 b/2=B/2 b0=B0"},
		{&kvv1.ScanRequest{Start: []byte("b/"), End: []byte("c"), Reverse: true, Limit: 2}, "b0=B0 b/2=B/2"},
		{&kvv1.ScanRequest{Start: []byte("bz")}, "c=C d=D"},
		{&kvv1.ScanRequest{End: []byte("b")}, "a=A"},
		{&kvv1.ScanRequest{Prefix: []byte("b/")}, "b/1=B/1 b/2=B/2"},
		{&kvv1.ScanRequest{Prefix: []byte("b"), Limit: 3}, "b=B b/1=B/1 b/2=B/2"},
		{&kvv1.ScanRequest{Prefix: []byte("zz")}, ""},
		{&kvv1.ScanRequest{Start: []byte("c"), End: []byte("c")}, ""},
		{&kvv1.ScanRequest{Prefix: []byte("b/"), KeysOnly: true}, "b/1= b/2="},
	} {
		if got, _ := f.scan(t, tc.req); strings.Join(got, " ") != tc.want {
			t.Errorf("scan %v = %q, want %q", tc.req, strings.Join(got, " "), tc.want)
		}
	}

	// Large scans arrive in several chunks, complete and in order.
	var ms []*kvv1.Mutation
	val := strings.Repeat("v", 1000)
	for i := 0; i < 3000; i++ {
		ms = append(ms, mutPut(fmt.Sprintf("big/%05d", i), val))
	}
	if _, err := f.kv.Write(f.ctx, &kvv1.WriteRequest{Mutations: ms}); err != nil {
		t.Fatal(err)
	}
	pairs, chunks := f.scan(t, &kvv1.ScanRequest{Prefix: []byte("big/")})
	if len(pairs) != 3000 || chunks < 3 {
		t.Fatalf("big scan: %d pairs in %d chunks", len(pairs), chunks)
	}
	for i, p := range pairs {
		if !strings.HasPrefix(p, fmt.Sprintf("big/%05d=", i)) {
			t.Fatalf("pair %d is %.20s", i, p)
		}
	}
	if pairs, _ := f.scan(t, &kvv1.ScanRequest{Prefix: []byte("big/"), Limit: 1500, Reverse: true}); len(pairs) != 1500 || !strings.HasPrefix(pairs[1499], "big/01500=") {
		t.Fatalf("reverse limited scan: %d pairs", len(pairs))
	}
}

func TestBadInput(t *testing.T) {
	f := start(t, kvserver.DefaultLimits())
	f.put(t, "keep", "me")
	bigKey := bytes.Repeat([]byte("k"), 64<<10+1)
	bigVal := make([]byte, 32<<20+1)
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"empty key put", func() error {
			_, err := f.kv.Put(f.ctx, &kvv1.PutRequest{Key: nil, Value: []byte("v")})
			return err
		}, "key is empty; keys must be 1 to 65536 bytes"},
		{"empty key get", func() error { _, err := f.kv.Get(f.ctx, &kvv1.GetRequest{}); return err }, "key is empty"},
		{"empty key delete", func() error { _, err := f.kv.Delete(f.ctx, &kvv1.DeleteRequest{}); return err }, "key is empty"},
		{"key over 64 KiB", func() error {
			_, err := f.kv.Put(f.ctx, &kvv1.PutRequest{Key: bigKey, Value: []byte("v")})
			return err
		}, "is 65537 bytes, over the 65536-byte limit (raise it with --max-key-size)"},
		{"value over 32 MiB", func() error {
			_, err := f.kv.Put(f.ctx, &kvv1.PutRequest{Key: []byte("keep"), Value: bigVal})
			return err
		}, "is 33554433 bytes, over the 33554432-byte limit (raise it with --max-value-size)"},
		{"value over 32 MiB in a batch", func() error {
			_, err := f.kv.Write(f.ctx, &kvv1.WriteRequest{Mutations: []*kvv1.Mutation{mutPut("x", "1"), {Op: &kvv1.Mutation_Put_{Put: &kvv1.Mutation_Put{Key: []byte("keep"), Value: bigVal}}}}})
			return err
		}, "mutation 1: value for key \"keep\" is 33554433 bytes, over the 33554432-byte limit"},
		{"empty batch", func() error { _, err := f.kv.Write(f.ctx, &kvv1.WriteRequest{}); return err }, "batch has no mutations"},
		{"mutation without op", func() error {
			_, err := f.kv.Write(f.ctx, &kvv1.WriteRequest{Mutations: []*kvv1.Mutation{{}}})
			return err
		}, "mutation 0 has neither put nor delete"},
		{"scan start after end", func() error {
			s, err := f.kv.Scan(f.ctx, &kvv1.ScanRequest{Start: []byte("z"), End: []byte("a")})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		}, `scan start "z" is after end "a"; start must be <= end`},
		{"scan prefix with bounds", func() error {
			s, err := f.kv.Scan(f.ctx, &kvv1.ScanRequest{Prefix: []byte("k"), Start: []byte("a")})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		}, "prefix cannot be combined with start or end"},
		{"empty multiget", func() error { _, err := f.kv.MultiGet(f.ctx, &kvv1.MultiGetRequest{}); return err }, "multiget has no keys"},
		{"compact start after end", func() error {
			_, err := f.kv.Compact(f.ctx, &kvv1.CompactRequest{Start: []byte("z"), End: []byte("a")})
			return err
		}, "compact start \"z\" is after end \"a\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("got %v, want InvalidArgument containing %q", err, tc.want)
			}
		})
	}
	// Nothing acknowledged was lost or changed by the rejected requests.
	if v, ok := f.get(t, "keep"); !ok || v != "me" {
		t.Fatalf("keep = %q %v after bad input", v, ok)
	}
	if _, ok := f.get(t, "x"); ok {
		t.Fatal("rejected batch wrote x")
	}

	// The limits follow the flags.
	small := start(t, kvserver.Limits{MaxKeyBytes: 8, MaxValueBytes: 16, MaxBatchBytes: 40})
	for _, tc := range []struct {
		req  *kvv1.WriteRequest
		want string
	}{
		{&kvv1.WriteRequest{Mutations: []*kvv1.Mutation{mutPut("123456789", "v")}}, "is 9 bytes, over the 8-byte limit"},
		{&kvv1.WriteRequest{Mutations: []*kvv1.Mutation{mutPut("k", strings.Repeat("v", 17))}}, "is 17 bytes, over the 16-byte limit"},
		{&kvv1.WriteRequest{Mutations: []*kvv1.Mutation{mutPut("k1", strings.Repeat("v", 16)), mutPut("k2", strings.Repeat("v", 16)), mutPut("k3", "v")}},
			"batch is 39 bytes"},
	} {
		_, err := small.kv.Write(small.ctx, tc.req)
		if tc.want == "batch is 39 bytes" {
			if err != nil {
				t.Fatalf("batch within the limit: %v", err)
			}
			tc.req.Mutations = append(tc.req.Mutations, mutPut("k4", "v"))
			_, err = small.kv.Write(small.ctx, tc.req)
			tc.want = "batch is 42 bytes of keys and values, over the 40-byte limit (split it, or raise --max-batch-size)"
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("small limits: got %v, want %q", err, tc.want)
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		l    kvserver.Limits
		want string
	}{
		{kvserver.Limits{MaxKeyBytes: 0, MaxValueBytes: 1, MaxBatchBytes: 10}, "--max-key-size must be positive"},
		{kvserver.Limits{MaxKeyBytes: 10, MaxValueBytes: 10, MaxBatchBytes: 10}, "--max-batch-size (10) must be at least"},
		{kvserver.Limits{MaxKeyBytes: 10, MaxValueBytes: 2 << 30, MaxBatchBytes: 3 << 30}, "over 1 GiB"},
	} {
		_, err := Start(Config{DB: "file://" + t.TempDir(), Listen: "127.0.0.1:0", Limits: tc.l})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("limits %+v: %v, want %q", tc.l, err, tc.want)
		}
	}
}

// RocksDB's histograms are on /metrics with --rocksdb-histograms only;
// without it none is exported (rather than summaries that read zero).
func TestMetrics(t *testing.T) {
	t.Run("default", func(t *testing.T) { testMetrics(t, false) })
	t.Run("rocksdb-histograms", func(t *testing.T) { testMetrics(t, true) })
}

func testMetrics(t *testing.T, histograms bool) {
	eo := engine.DefaultOptions()
	eo.Tuning.RocksDBHistograms = histograms
	f := startEngine(t, kvserver.DefaultLimits(), eo)
	for i := 0; i < 25; i++ {
		f.put(t, fmt.Sprintf("m%d", i), "v")
	}
	for i := 0; i < 5; i++ {
		f.get(t, "m1")
	}
	if _, err := f.kv.Flush(f.ctx, &kvv1.FlushRequest{}); err != nil {
		t.Fatal(err)
	}
	f.scan(t, &kvv1.ScanRequest{Prefix: []byte("m")})
	resp, err := http.Get("http://" + f.srv.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := strings.Contains(string(body), "\nrocksdb_db_get_micros_count "); got != histograms {
		t.Errorf("with histograms %v, /metrics has rocksdb_db_get_micros: %v", histograms, got)
	}
	if histograms && !strings.Contains(string(body), "\nrocksdb_db_get_micros_count 5\n") {
		t.Errorf("/metrics lacks rocksdb_db_get_micros_count 5")
	}
	for _, want := range []string{
		`rocksdb_number_keys_written_total 25`,
		`rocksdb_number_keys_read_total 5`,
		`shale_epoch 1`,
		`shale_fenced 0`,
		`rocksdb_estimated_keys 25`,
		`rocksdb_level_files{level="0"} 1`,
		// What the chart's write-stall alerts read.
		`rocksdb_write_stopped 0`,
		`rocksdb_delayed_write_rate 0`,
		`rocksdb_stall_micros_total 0`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Put",grpc_service="shale.kv.v1.KV",grpc_type="unary"} 25`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Get",grpc_service="shale.kv.v1.KV",grpc_type="unary"} 5`,
		`grpc_server_handling_seconds_count{grpc_method="Put",grpc_service="shale.kv.v1.KV",grpc_type="unary"} 25`,
		`grpc_server_msg_received_total{grpc_method="Get",grpc_service="shale.kv.v1.KV",grpc_type="unary"} 5`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Scan",grpc_service="shale.kv.v1.KV",grpc_type="server_stream"} 1`,
		`grpc_server_msg_sent_total{grpc_method="Scan",grpc_service="shale.kv.v1.KV",grpc_type="server_stream"} 1`,
		`grpc_server_started_total{grpc_method="Load",grpc_service="shale.kv.v1.KV",grpc_type="client_stream"} 0`,
		`grpc_server_handled_total{grpc_code="NotFound",grpc_method="Get",grpc_service="shale.kv.v1.KV",grpc_type="unary"} 0`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Object-store I/O by operation, file type and activity: the 25 synced
	// puts became WAL segment uploads; the flush uploaded an SST.
	for _, re := range []string{
		`shale_objstore_requests_total\{activity="wal",file_type="wal",op="put",result="ok"\} (2[5-9]|[3-9]\d)`,
		`shale_objstore_requests_total\{activity="flush",file_type="sst",op="put",result="ok"\} 1\n`,
		`shale_objstore_bytes_total\{activity="flush",file_type="sst",op="put"\} [1-9]`,
		`shale_objstore_request_duration_seconds_count\{activity="wal",file_type="wal",op="put"\} [1-9]`,
		`shale_objstore_requests_total\{activity="open",file_type="other",op="list",result="ok"\} [1-9]`,
	} {
		if !regexp.MustCompile(re).Match(body) {
			t.Errorf("/metrics lacks %s", re)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^rocksdb_\w+_total `).FindAll(body, -1)); n < 100 {
		t.Errorf("/metrics has only %d RocksDB tickers", n)
	}
}

func TestStartFailuresLeaveNothingRunning(t *testing.T) {
	f := start(t, kvserver.DefaultLimits())
	// The gRPC port is taken: nothing is created on disk.
	dir := filepath.Join(t.TempDir(), "new")
	_, err := Start(Config{DB: "file://" + dir, Listen: f.srv.Addr(), Limits: kvserver.DefaultLimits(), Engine: engine.DefaultOptions()})
	if err == nil || !strings.Contains(err.Error(), "--listen") {
		t.Fatalf("busy port: %v", err)
	}
	if d, err := engine.Open(dir, engine.DefaultOptions()); err != nil {
		t.Fatalf("directory unusable after a failed start: %v", err)
	} else {
		d.Close()
	}
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	_, err = Start(Config{DB: "s3://bucket/db", Listen: "127.0.0.1:0", Limits: kvserver.DefaultLimits()})
	if err == nil || !strings.Contains(err.Error(), "AWS_ENDPOINT_URL") {
		t.Fatalf("s3 URL without an endpoint: %v", err)
	}
}

// TestStopEndsWatchStreams: a secondary's Watch stream never ends by
// itself, and a graceful stop waits for running calls. Stop must end the
// streams first, or a primary with secondaries would take its whole grace
// period to stop (and to record its release, which spares its successor
// a lease wait). The grace here is an hour: the test hangs without it.
func TestStopEndsWatchStreams(t *testing.T) {
	f := start(t, kvserver.DefaultLimits())
	stream, err := f.kv.Watch(f.ctx, &kvv1.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("first watch event: %v", err)
	}
	stopped := make(chan struct{})
	go func() { f.srv.Stop(time.Hour); close(stopped) }()
	for {
		_, err := stream.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "the primary is stopping") {
			t.Fatalf("the watch stream ended with %v, want UNAVAILABLE saying the primary is stopping", err)
		}
		break
	}
	<-stopped
}

// /debug/pprof is served on the metrics listener only with --pprof.
func TestPprofOnlyWhenAsked(t *testing.T) {
	for _, on := range []bool{false, true} {
		s, err := Start(Config{
			DB:            "file://" + filepath.Join(t.TempDir(), "db"),
			Listen:        "127.0.0.1:0",
			MetricsListen: "127.0.0.1:0",
			Pprof:         on,
			Limits:        kvserver.DefaultLimits(),
			Engine:        engine.DefaultOptions(),
			Storage:       shalefs.Config{CacheDir: filepath.Join(t.TempDir(), "cache"), Lease: 200 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get("http://" + s.MetricsAddr() + "/debug/pprof/goroutine?debug=1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		served := resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte("goroutine profile"))
		if served != on {
			t.Errorf("pprof %v: GET /debug/pprof/goroutine answered %d", on, resp.StatusCode)
		}
		s.Stop(5 * time.Second)
	}
}

// Load takes KeyValue pairs and packed pairs, applies each message whole,
// refuses a malformed or oversized message with the count of pairs loaded;
// Ingest refuses bytes that are not an SST file and writes nothing.
func TestLoadAndIngestRPCs(t *testing.T) {
	f := start(t, kvserver.Limits{MaxKeyBytes: 8, MaxValueBytes: 64, MaxBatchBytes: 1024})
	stream, err := f.kv.Load(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var packed []byte
	packed = kvload.AppendPacked(packed, []byte("p1"), []byte("v1"))
	packed = kvload.AppendPacked(packed, []byte("p2"), nil)
	for _, req := range []*kvv1.LoadRequest{
		{Pairs: []*kvv1.KeyValue{{Key: []byte("a"), Value: []byte("1")}}, Packed: packed},
		{Pairs: []*kvv1.KeyValue{{Key: []byte("b"), Value: []byte("2")}}, Sync: true},
	} {
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil || resp.Pairs != 4 || resp.Bytes != 10 || resp.Sequence < 4 {
		t.Fatalf("load: %v %v", resp, err)
	}
	for k, want := range map[string]string{"a": "1", "p1": "v1", "p2": "", "b": "2"} {
		if v, ok := f.get(t, k); !ok || v != want {
			t.Errorf("%s = %q %v after load", k, v, ok)
		}
	}

	for _, c := range []struct {
		name string
		reqs []*kvv1.LoadRequest
		msg  string
	}{
		{"key too long", []*kvv1.LoadRequest{{Packed: kvload.AppendPacked(nil, []byte("c"), nil)}, {Packed: kvload.AppendPacked(kvload.AppendPacked(nil, []byte("d"), nil), []byte("toolongkey"), nil)}},
			"pair 3 of the load: key \"toolongkey\" is 10 bytes, over the 8-byte limit"},
		{"malformed packed", []*kvv1.LoadRequest{{Packed: []byte{0x09, 'x'}}}, "malformed packed pairs"},
		{"message over the batch limit", []*kvv1.LoadRequest{{Packed: bytes.Repeat(kvload.AppendPacked(nil, []byte("key"), bytes.Repeat([]byte("v"), 60)), 20)}},
			"over the 1024-byte batch limit"},
	} {
		stream, err := f.kv.Load(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range c.reqs {
			stream.Send(r)
		}
		_, err = stream.CloseAndRecv()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT with %q", c.name, err, c.msg)
		}
	}
	if _, ok := f.get(t, "d"); ok {
		t.Error("a pair of the refused message was applied")
	}
	if _, ok := f.get(t, "c"); !ok {
		t.Error("the message before the refused one was not applied")
	}

	is, err := f.kv.Ingest(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	is.Send(&kvv1.IngestRequest{Data: []byte("not an sst file at all, but long enough to have a footer? no")})
	if _, err := is.CloseAndRecv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not an SST file RocksDB can ingest") {
		t.Errorf("ingest of garbage: %v", err)
	}
	is, _ = f.kv.Ingest(f.ctx)
	if _, err := is.CloseAndRecv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "received no data") {
		t.Errorf("empty ingest: %v", err)
	}

	// The key and value limits hold inside ingested files too: a file
	// with one oversized entry is refused whole.
	ingest := func(pairs ...string) error {
		path := filepath.Join(t.TempDir(), "x.sst")
		w, err := engine.NewSSTWriter(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(pairs); i += 2 {
			if err := w.Put([]byte(pairs[i]), []byte(pairs[i+1])); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		is, err := f.kv.Ingest(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		is.Send(&kvv1.IngestRequest{Data: data})
		_, err = is.CloseAndRecv()
		return err
	}
	for _, c := range []struct {
		name  string
		pairs []string
		msg   string
	}{
		{"key too long", []string{"i1", "v", "i2toolongkey", "v"}, "entry 1 of the SST file: key \"i2toolongkey\" is 12 bytes, over the 8-byte limit (raise it with --max-key-size); nothing was ingested"},
		{"value too long", []string{"i1", strings.Repeat("v", 65)}, "entry 0 of the SST file: value for key \"i1\" is 65 bytes, over the 64-byte limit (raise it with --max-value-size)"},
	} {
		if err := ingest(c.pairs...); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ingest with %s: %v, want INVALID_ARGUMENT with %q", c.name, err, c.msg)
		}
		if _, ok := f.get(t, "i1"); ok {
			t.Errorf("ingest with %s: a pair of the refused file was applied", c.name)
		}
	}
	if err := ingest("i1", "v1", "i2", "v2"); err != nil {
		t.Fatalf("ingest of a file within the limits: %v", err)
	}
	if v, ok := f.get(t, "i2"); !ok || v != "v2" {
		t.Errorf("i2 = %q %v after ingest", v, ok)
	}
}

// Concurrent durable writes share WAL uploads (group commit): sixteen
// writers' synced puts cost far fewer segment uploads than puts, and each
// acknowledged put is there.
func TestDurableWritesShareUploads(t *testing.T) {
	f := start(t, kvserver.DefaultLimits())
	const writers, each = 16, 20
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				k := fmt.Sprintf("w%02d/%03d", w, i)
				if _, err := f.kv.Put(f.ctx, &kvv1.PutRequest{Key: []byte(k), Value: []byte(k), Sync: true}); err != nil {
					t.Errorf("put %s: %v", k, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for w := 0; w < writers; w++ {
		for i := 0; i < each; i++ {
			k := fmt.Sprintf("w%02d/%03d", w, i)
			if v, ok := f.get(t, k); !ok || v != k {
				t.Fatalf("%s = %q (found %v) after its synced put", k, v, ok)
			}
		}
	}
	resp, err := http.Get("http://" + f.srv.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`shale_objstore_requests_total\{activity="wal",file_type="wal",op="put",result="ok"\} (\d+)`).FindSubmatch(body)
	if m == nil {
		t.Fatal("/metrics has no WAL segment uploads")
	}
	uploads, _ := strconv.Atoi(string(m[1]))
	t.Logf("%d synced puts from %d writers: %d WAL segment uploads", writers*each, writers, uploads)
	if uploads > writers*each/2 {
		t.Fatalf("%d synced puts from %d writers took %d WAL uploads: writes are not grouped", writers*each, writers, uploads)
	}
	// The engine's own count of durable groups and their members.
	members := regexp.MustCompile(`shale_write_group_members_total\{sync="true"\} (\d+)`).FindSubmatch(body)
	groups := regexp.MustCompile(`shale_write_groups_total\{sync="true"\} (\d+)`).FindSubmatch(body)
	if members == nil || groups == nil {
		t.Fatal("/metrics lacks shale_write_group_members_total or shale_write_groups_total for sync=true")
	}
	if n, _ := strconv.Atoi(string(members[1])); n != writers*each {
		t.Errorf("shale_write_group_members_total{sync=\"true\"} = %d, want %d", n, writers*each)
	}
	if n, _ := strconv.Atoi(string(groups[1])); n == 0 || n > uploads {
		t.Errorf("shale_write_groups_total{sync=\"true\"} = %d; want 1 to %d (the WAL uploads)", n, uploads)
	}
}
