package backend_test

// The ollama CLI's own client package, driven against the server as `ollama list`, `ollama ps`,
// `ollama show`, `ollama run` and `ollama -v` drive it. It is imported here only, from a test,
// so it never reaches the dflash binary (see README's dependency table).

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	ollama "github.com/ollama/ollama/api"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/backend"
	"github.com/dflash/dflash/server/fake"
)

// ollamaClient starts the server over b and returns the ollama client package's Client for it.
func ollamaClient(t *testing.T, b server.Backend) *ollama.Client {
	t.Helper()
	s := server.New(server.Config{}, b, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		ts.Close()
	})
	u, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	return ollama.NewClient(u, http.DefaultClient)
}

// cliID is the ID column of `ollama list` and `ollama ps`: v0.24.0's ListHandler and
// ListRunningHandler slice the digest with [:12], which panics on a shorter one (the crash this
// test guards against). The panic is turned into an error so the test reports it by name.
func cliID(digest string) (id string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the ollama CLI would panic on digest %q: %v", digest, p)
		}
	}()
	return digest[:12], nil
}

var ollamaVersion = regexp.MustCompile(`^\d+\.\d+\.\d+$`)

func TestOllamaClientPackage(t *testing.T) {
	cases := []struct {
		name     string
		backend  func(t *testing.T) server.Backend
		model    string
		ctxLen   int    // what /api/ps must show
		template string // what /api/show must show
		text     string // the generation's whole text, "" when not known in advance
	}{
		{"fake", func(*testing.T) server.Backend { return &fake.Backend{} }, "fake:latest", 64, "{{ .Prompt }}", fake.Text},
		{"stories260K", func(t *testing.T) server.Backend {
			b, err := backend.New(backend.Options{Models: []backend.Spec{{Path: shareddata.Path(t, storiesRel)}}})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}, "stories260K:latest", 512, backend.PlainTemplate, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := ollamaClient(t, c.backend(t))
			ctx := context.Background()

			v, err := cl.Version(ctx)
			if err != nil || v != server.OllamaVersion || !ollamaVersion.MatchString(v) {
				t.Errorf("Version: %q, %v; want ollama's release number %s", v, err, server.OllamaVersion)
			}

			list, err := cl.List(ctx)
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			var listed *ollama.ListModelResponse
			for i, m := range list.Models {
				if _, err := cliID(m.Digest); err != nil {
					t.Errorf("ollama list: %s: %v", m.Name, err)
				}
				if m.Name == c.model {
					listed = &list.Models[i]
				}
			}
			if listed == nil {
				t.Fatalf("List: %s missing from %+v", c.model, list.Models)
			}

			// ollama run MODEL PROMPT, as a generate stream: pieces, then a final object whose
			// context is the prompt's ids and the generated ones.
			var text strings.Builder
			var final ollama.GenerateResponse
			stream := true
			err = cl.Generate(ctx, &ollama.GenerateRequest{Model: c.model, Prompt: "Once upon a time", Stream: &stream,
				Options: map[string]any{"temperature": 0, "num_predict": 24}}, func(r ollama.GenerateResponse) error {
				text.WriteString(r.Response)
				if r.Done {
					final = r
				}
				return nil
			})
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if !final.Done || final.DoneReason == "" || final.EvalCount == 0 {
				t.Errorf("Generate: final object %+v, want done with a reason and counts", final)
			}
			if len(final.Context) != final.PromptEvalCount+final.EvalCount {
				t.Errorf("Generate: context has %d ids, want the %d prompt and %d generated ones",
					len(final.Context), final.PromptEvalCount, final.EvalCount)
			}
			if c.text != "" && text.String() != c.text {
				t.Errorf("Generate: text %q, want %q", text.String(), c.text)
			}

			ps, err := cl.ListRunning(ctx)
			if err != nil {
				t.Fatalf("ListRunning: %v", err)
			}
			if len(ps.Models) != 1 || ps.Models[0].Name != c.model {
				t.Fatalf("ListRunning: %+v, want just %s loaded", ps.Models, c.model)
			}
			run := ps.Models[0]
			id, err := cliID(run.Digest)
			if err != nil {
				t.Errorf("ollama ps: %v", err)
			} else if listedID, _ := cliID(listed.Digest); id != listedID {
				t.Errorf("ollama ps shows ID %s, ollama list %s: one model, one ID", id, listedID)
			}
			if run.ContextLength != c.ctxLen {
				t.Errorf("ollama ps: context %d, want %d", run.ContextLength, c.ctxLen)
			}

			show, err := cl.Show(ctx, &ollama.ShowRequest{Model: c.model})
			if err != nil {
				t.Fatalf("Show: %v", err)
			}
			if show.Template != c.template {
				t.Errorf("Show: template %q, want %q", show.Template, c.template)
			}
			if show.Details.Family == "" {
				t.Errorf("Show: details %+v name no family", show.Details)
			}

			// With logprobs (v0.24.0's Logprobs and TopLogprobs): the client decodes one entry
			// per generated token, each with the alternatives asked for.
			var reply strings.Builder
			var done ollama.ChatResponse
			var lps []ollama.Logprob
			err = cl.Chat(ctx, &ollama.ChatRequest{Model: c.model, Messages: []ollama.Message{{Role: "user", Content: "Tell me a story."}},
				Options: map[string]any{"temperature": 0, "num_predict": 16}, Logprobs: true, TopLogprobs: 2}, func(r ollama.ChatResponse) error {
				reply.WriteString(r.Message.Content)
				lps = append(lps, r.Logprobs...)
				if r.Done {
					done = r
				}
				return nil
			})
			if len(lps) != done.EvalCount {
				t.Errorf("Chat: %d logprobs for %d tokens", len(lps), done.EvalCount)
			}
			for i, lp := range lps {
				if len(lp.TopLogprobs) != 2 || lp.Logprob > 0 || lp.TopLogprobs[0].Logprob < lp.TopLogprobs[1].Logprob {
					t.Errorf("Chat: logprob %d is %+v, want a log probability and 2 alternatives, likeliest first", i, lp)
				}
			}
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}
			if !done.Done || done.Message.Role != "assistant" || reply.Len() == 0 || done.EvalCount == 0 {
				t.Errorf("Chat: reply %q, final %+v; want an assistant reply with counts", reply.String(), done)
			}
		})
	}
}
