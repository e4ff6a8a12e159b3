package server_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

// FuzzEndpoints sends arbitrary bodies through the whole handler (decoding, validation,
// scheduling, generation with the fake and encoding) of every POST endpoint. Whatever the
// input, the answer must be a known status with a JSON (or stream) body, never a panic (the
// middleware would turn one into a 500, which fails here).
func FuzzEndpoints(f *testing.F) {
	for _, s := range []string{
		`{"model":"fake","prompt":"hi","stream":false}`,
		`{"model":"fake","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"fake","prompt":"hi","stream":true,"max_tokens":3,"stop":["quick"]}`,
		`{"model":"fake","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"fake","keep_alive":0}`, `{"model":"nope"}`, `{`, ``,
	} {
		for ep := range 5 {
			f.Add(uint8(ep), []byte(s))
		}
	}
	s := server.New(server.Config{MaxBodyBytes: 1 << 16}, &fake.Backend{}, nil)
	paths := []string{"/api/generate", "/api/chat", "/v1/chat/completions", "/v1/completions", "/api/show"}
	f.Fuzz(func(t *testing.T, ep uint8, body []byte) {
		path := paths[int(ep)%len(paths)]
		// A local Host: the server is bound to loopback, where other host names are refused.
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", "http://localhost"+path, bytes.NewReader(body)))
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("%s %q: status %d: %s", path, body, rec.Code, rec.Body)
		}
		if rec.Code != http.StatusOK && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %q: error body is not JSON: %q", path, body, rec.Body)
		}
	})
}
