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
// by OpenAI's API with 400 without being tokenized, and truncated by ollama's after tokenizing
// only a tail the byte bound proves longer than the context. Tokenizing the whole body with
// tok512 allocates about 300 MB (1.4 GB before the merge was compacted); either answer allocates
// a few copies of the body (the test's, the server's read, the decoded string), so 100 MB
// separates the two with room.
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
	text := prompt.String()[:7_600_000]
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

	for _, tc := range []struct {
		path   string
		body   map[string]any
		status int
		want   string
	}{
		{"/v1/completions", map[string]any{"model": "stories", "prompt": text}, 400, "prompt is at least"},
		// 512 positions less the 4 num_predict asks for: 508 prompt tokens, BOS and the tail.
		{"/api/generate", map[string]any{"model": "stories", "prompt": text, "stream": false, "options": map[string]any{"num_predict": 4}}, 200, `"prompt_eval_count":508`},
	} {
		body, err := json.Marshal(tc.body)
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r, err := http.Post(ts.URL+tc.path, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(r.Body)
		r.Body.Close()
		runtime.ReadMemStats(&after)
		if r.StatusCode != tc.status || !strings.Contains(string(msg), tc.want) {
			t.Errorf("%s: status %d %.300s, want %d with %s", tc.path, r.StatusCode, msg, tc.status, tc.want)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 100<<20 {
			t.Errorf("%s: answering the 7.6 MB prompt allocated %d MB, want under 100 MB", tc.path, alloc>>20)
		} else {
			t.Logf("%s: answered with %d MB allocated: %.200s", tc.path, alloc>>20, msg)
		}
	}
}
