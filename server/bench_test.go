package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

// BenchmarkStreamOverhead measures the server's own cost per request (decode, schedule,
// lease, stream 10 tokens, encode) over loopback HTTP with an instant fake model. Report
// per-token cost as ns/op divided by 10.
func BenchmarkStreamOverhead(b *testing.B) {
	for _, c := range []struct{ name, path, body string }{
		{"ollama", "/api/chat", `{"model":"fake","messages":[{"role":"user","content":"hi"}]}`},
		{"openai", "/v1/chat/completions", `{"model":"fake","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := server.New(server.Config{KeepAlive: -1}, &fake.Backend{}, nil)
			ts := httptest.NewServer(s.Handler())
			defer ts.Close()
			for b.Loop() {
				resp, err := http.Post(ts.URL+c.path, "application/json", strings.NewReader(c.body))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
