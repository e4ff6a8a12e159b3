package backend_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/backend"
)

// TestHugePromptRefusedCheaply: a 7.6 MB prompt to stories260K (512-token context) is refused
// with 400 without being tokenized. Tokenizing it with tok512 allocates about 300 MB (1.4 GB
// before the merge was compacted); refusing by the byte bound allocates a few copies of the body
// (the test's, the server's read, the decoded string), so 100 MB separates the two with room.
func TestHugePromptRefusedCheaply(t *testing.T) {
	bin := shareddata.Path(t, storiesRel)
	data, err := os.ReadFile(shareddata.Path(t, "corpora/tinystories_val_800K.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var prompt strings.Builder
	for prompt.Len() < 7_600_000 {
		prompt.Write(data)
	}
	body, err := json.Marshal(map[string]any{"model": "stories", "prompt": prompt.String()[:7_600_000], "stream": false})
	if err != nil {
		t.Fatal(err)
	}
	b, err := backend.New(backend.Options{Models: []backend.Spec{{Name: "stories", Path: bin}}})
	if err != nil {
		t.Fatal(err)
	}
	s := server.New(server.Config{}, b, slog.New(slog.DiscardHandler))
	ts := httptest.NewServer(s.Handler())
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		ts.Close()
	}()
	// Load the model first, so that its loading is not counted.
	if r, err := http.Post(ts.URL+"/api/generate", "application/json", strings.NewReader(`{"model":"stories"}`)); err != nil {
		t.Fatal(err)
	} else {
		r.Body.Close()
	}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r, err := http.Post(ts.URL+"/api/generate", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(r.Body)
	r.Body.Close()
	runtime.ReadMemStats(&after)
	if r.StatusCode != 400 || !strings.Contains(string(msg), "prompt is at least") {
		t.Errorf("status %d %.200s, want 400 refused by the bound", r.StatusCode, msg)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 100<<20 {
		t.Errorf("refusing the 7.6 MB prompt allocated %d MB, want under 100 MB", alloc>>20)
	} else {
		t.Logf("refused with %d MB allocated: %s", alloc>>20, msg)
	}
}
