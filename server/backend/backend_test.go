package backend_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/dflash2"
	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample"
	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/backend"
)

const storiesRel = "stories260K/stories260K.bin"

// loadStories opens stories260K through the backend, with a random DFlash draft when withDraft.
func loadStories(t *testing.T, withDraft bool) *backend.Model {
	t.Helper()
	kind := ""
	if withDraft {
		kind = "dflash"
	}
	return loadStoriesWith(t, kind)
}

// loadStoriesWith opens stories260K with a random draft of the given kind ("", "dflash" or
// "dflash2": the backend tells the two apart from the folder).
func loadStoriesWith(t *testing.T, kind string) *backend.Model {
	t.Helper()
	bin := shareddata.Path(t, storiesRel)
	spec := backend.Spec{Name: "stories", Path: bin}
	switch kind {
	case "dflash":
		spec.Draft = randomDraft(t, bin)
	case "dflash2":
		spec.Draft = randomDraft2(t, bin)
	}
	b, err := backend.New(backend.Options{Models: []backend.Spec{spec}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := b.Load(context.Background(), "stories:latest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m.(*backend.Model)
}

// randomDraft writes a one-layer, block-8 DFlash draft with random weights for the target at bin.
// Its proposals are mostly wrong, which is what an exactness test wants: the output must not
// depend on them.
func randomDraft(t testing.TB, bin string) string {
	e, err := engine.Open(engine.Options{Model: bin})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := dflash.WriteRandom(dir, dflash.ConfigFor(e.Target.Config(), 1, 8), 7, kernel.F32); err != nil {
		t.Fatal(err)
	}
	return dir
}

// randomDraft2 is randomDraft for DFlash2 (convolutions and the candidate selector).
func randomDraft2(t testing.TB, bin string) string {
	e, err := engine.Open(engine.Options{Model: bin})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := dflash2.WriteRandom(dir, e.Target.Config(), dflash2.ConfigFor(e.Target.Config(), 1, 8), 7, kernel.F32); err != nil {
		t.Fatal(err)
	}
	return dir
}

// reference decodes greedily with the runner directly, as `dflash run` does.
func reference(t *testing.T, prompt []int, n int) []int {
	t.Helper()
	e, err := engine.Open(engine.Options{Model: shareddata.Path(t, storiesRel)})
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	seq := runner.NewSequence(e.Target, 512)
	if _, err := runner.Generate(context.Background(), seq, runner.Request{Prompt: prompt, MaxTokens: n, Stop: e.Stop},
		func(tok runner.Token) error { out = append(out, tok.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

type collected struct {
	ids  []int
	text strings.Builder
}

func (c *collected) emit(tok server.Token) error {
	if tok.ID >= 0 {
		c.ids = append(c.ids, tok.ID)
	}
	c.text.WriteString(tok.Text)
	return nil
}

var greedy = sample.Options{Temperature: 0, TopP: 1, RepeatPenalty: 1, PenaltyWindow: 64}

func generate(t *testing.T, m *backend.Model, prompt []int, n int) (*collected, server.GenResult) {
	t.Helper()
	var c collected
	res, err := m.Generate(context.Background(), server.GenRequest{Prompt: prompt, MaxTokens: n, Options: greedy}, c.emit)
	if err != nil {
		t.Fatal(err)
	}
	return &c, res
}

// The golden is run.c's greedy output for "Once upon a time" over 128 positions: BOS and the
// prompt's 4 ids leave 124 generated tokens, and the text is the prompt's followed by theirs.
func TestGenerateMatchesRunAndGolden(t *testing.T) {
	for _, name := range []string{"plain", "dflash", "dflash2"} {
		withDraft := name != "plain"
		t.Run(name, func(t *testing.T) {
			golden, err := os.ReadFile(shareddata.Path(t, "stories260K/golden/greedy_once_upon_a_time_n128.txt"))
			if err != nil {
				t.Fatal(err)
			}
			m := loadStoriesWith(t, map[bool]string{true: name}[withDraft])
			prompt, err := m.Tokenize("Once upon a time")
			if err != nil {
				t.Fatal(err)
			}
			if len(prompt) != 5 || prompt[0] != 1 {
				t.Fatalf("prompt ids %v: want BOS (1) and 4 ids", prompt)
			}
			want := reference(t, prompt, 124)
			c, res := generate(t, m, prompt, 124)
			if !slices.Equal(c.ids, want) {
				t.Fatalf("ids differ from the runner's greedy decode:\n got %v\nwant %v", c.ids, want)
			}
			wantText := strings.TrimSuffix(strings.TrimPrefix(string(golden), "Once upon a time"), "\n")
			if c.text.String() != wantText {
				t.Errorf("text:\n got %q\nwant %q", c.text.String(), wantText)
			}
			if res.PromptTokens != 5 || res.EvalTokens != 124 || res.DoneReason != "length" {
				t.Errorf("result %+v: want 5 prompt tokens, 124 generated, done \"length\"", res)
			}
			if withDraft {
				s := res.Speculation
				if s == nil || s.Rounds == 0 || s.Drafted == 0 || s.Tau < 1 {
					t.Fatalf("speculation %+v: want rounds, drafts and tau >= 1", s)
				}
				// Every round commits its accepted drafts plus one target token.
				if s.Accepted+s.Rounds != 124 {
					t.Errorf("accepted %d + rounds %d != 124 tokens", s.Accepted, s.Rounds)
				}
				// Again on the same prompt: the kept session must restore in step with the sequence.
				c2, res2 := generate(t, m, prompt, 124)
				if !slices.Equal(c2.ids, want) {
					t.Fatalf("second speculative run differs:\n got %v\nwant %v", c2.ids, want)
				}
				if m.LastStats().Reused != 4 || res2.ReusedTokens != 4 {
					t.Errorf("second run reused %d rows (result says %d), want 4 (the prompt less its last token)", m.LastStats().Reused, res2.ReusedTokens)
				}
			} else if res.Speculation != nil {
				t.Errorf("speculation %+v without a draft", res.Speculation)
			}
		})
	}
}

// A second chat turn renders the whole conversation; its prefix up to the first reply is the
// first turn's prompt, so at least that many rows (less the last) are reused.
func TestChatContinuationReusesPrefix(t *testing.T) {
	for _, withDraft := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "draft"}[withDraft], func(t *testing.T) {
			m := loadStories(t, withDraft)
			msgs := []server.ChatMessage{{Role: "user", Content: "Tell me a story."}}
			text, err := m.RenderChat(msgs, server.ChatOptions{AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			if want := "User: Tell me a story.\n\nAssistant:"; text != want {
				t.Fatalf("plain chat template gave %q, want %q", text, want)
			}
			p1, _ := m.Tokenize(text)
			c1, _ := generate(t, m, p1, 20)
			msgs = append(msgs, server.ChatMessage{Role: "assistant", Content: c1.text.String()},
				server.ChatMessage{Role: "user", Content: "And then?"})
			text, _ = m.RenderChat(msgs, server.ChatOptions{AddGenerationPrompt: true})
			p2, _ := m.Tokenize(text)
			c2, _ := generate(t, m, p2, 20)
			if reused := m.LastStats().Reused; reused < len(p1)-1 {
				t.Errorf("second turn reused %d rows, want at least %d", reused, len(p1)-1)
			}
			// Reuse must not change the answer: a fresh model gives the same ids.
			if want := reference(t, p2, 20); !slices.Equal(c2.ids, want) {
				t.Errorf("second turn ids %v, fresh decode %v", c2.ids, want)
			}
		})
	}
}

func TestCancelMidGeneration(t *testing.T) {
	for _, withDraft := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "draft"}[withDraft], func(t *testing.T) {
			m := loadStories(t, withDraft)
			prompt, _ := m.Tokenize("Once upon a time")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			n := 0
			res, err := m.Generate(ctx, server.GenRequest{Prompt: prompt, MaxTokens: 200, Options: greedy}, func(server.Token) error {
				if n++; n == 5 {
					cancel()
				}
				return nil
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v, want context.Canceled", err)
			}
			// A speculative round may emit a few tokens past the cancel; it is checked per round.
			if res.EvalTokens < 5 || res.EvalTokens > 5+8 {
				t.Errorf("%d tokens generated after cancelling at 5", res.EvalTokens)
			}
			// An emit error ends generation with that error unchanged.
			stop := errors.New("stop here")
			_, err = m.Generate(context.Background(), server.GenRequest{Prompt: prompt, MaxTokens: 50, Options: greedy},
				func(server.Token) error { return stop })
			if err != stop {
				t.Fatalf("err %v, want emit's error", err)
			}
			want := reference(t, prompt, 30)
			c, _ := generate(t, m, prompt, 30)
			if !slices.Equal(c.ids, want) {
				t.Errorf("after cancellation: ids %v, want %v", c.ids, want)
			}
		})
	}
}

// A generation waiting for the model's turn gives up when its context ends.
func TestWaitHonoursContext(t *testing.T) {
	m := loadStories(t, false)
	prompt, _ := m.Tokenize("Once upon a time")
	started := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error)
	go func() {
		first := true
		_, err := m.Generate(context.Background(), server.GenRequest{Prompt: prompt, MaxTokens: 3, Options: greedy}, func(server.Token) error {
			if first {
				first = false
				close(started)
				<-release
			}
			return nil
		})
		done <- err
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Generate(ctx, server.GenRequest{Prompt: prompt, MaxTokens: 3, Options: greedy}, func(server.Token) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("waiting generation: err %v, want context.Canceled", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestModelsListing(t *testing.T) {
	bin := shareddata.Path(t, storiesRel)
	b, err := backend.New(backend.Options{Models: []backend.Spec{{Path: bin}, {Name: "s:draft", Path: bin, Draft: randomDraft(t, bin)}}, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	ms := b.Models()
	if len(ms) != 2 {
		t.Fatalf("%d models listed, want 2", len(ms))
	}
	st, _ := os.Stat(bin)
	// stories260K: 64-dim, 5 layers, 512 tokens, tied head: 260,032 parameters. Its context
	// (512, below the default cap, so served whole) and its chat fallback (no template, no ChatML
	// tokens: plain turns) are known from the files before the model loads.
	want := server.ModelInfo{Name: "stories260K:latest", Family: "llama", ParameterSize: "260K", Quantization: "F32",
		Format: "llama2.c", Size: st.Size(), ModifiedAt: st.ModTime().UTC(), ContextLength: 512, ModelContext: 512, Template: backend.PlainTemplate,
		Digest: ms[0].Digest, Parallel: 2}
	// The digest is ollama's: 64 hex digits (`ollama list` shows its first 12 as the ID). It
	// covers the draft's files too, so the two entries differ, and it is stable across starts.
	if ok, _ := regexp.MatchString(`^[0-9a-f]{64}$`, ms[0].Digest); !ok {
		t.Errorf("digest %q, want 64 hex digits", ms[0].Digest)
	}
	if ms[0].Digest == ms[1].Digest {
		t.Errorf("the model with a draft has the plain model's digest %s", ms[0].Digest)
	}
	if again, err := backend.New(backend.Options{Models: []backend.Spec{{Path: bin}}}); err != nil || again.Models()[0].Digest != ms[0].Digest {
		t.Errorf("digest changed across starts: %v", err)
	}
	if ms[0] != want {
		t.Errorf("listing\n got %+v\nwant %+v", ms[0], want)
	}
	if ms[1].Draft == "" {
		t.Errorf("model with a draft lists no draft name: %+v", ms[1])
	}
	m, err := b.Load(context.Background(), "stories260K:latest")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// The model's own maximum (512) is below the default cap.
	if m.ContextLength() != 512 || m.Info().ContextLength != 512 || b.Models()[0].ContextLength != 512 {
		t.Errorf("context length %d (info %d, listing %d), want 512", m.ContextLength(), m.Info().ContextLength, b.Models()[0].ContextLength)
	}
	// Loading changes nothing the listing said.
	if m.Info() != want || b.Models()[0] != want {
		t.Errorf("after loading: info %+v, listing %+v; want both %+v", m.Info(), b.Models()[0], want)
	}
	if _, err := b.Load(context.Background(), "nope"); !errors.Is(err, server.ErrModelNotFound) {
		t.Errorf("unknown model: err %v, want ErrModelNotFound", err)
	}
}

// Concurrent generations on one model (its Parallel > 1) are decoded together; each gets the
// same greedy answer as alone, whatever the others left in the caches.
func TestConcurrentGenerations(t *testing.T) {
	m := loadStories(t, true)
	prompts := []string{"Once upon a time", "Lily and Ben went to the park.", "Once upon a time, there was", "The cat"}
	want := make([][]int, len(prompts))
	ids := make([][]int, len(prompts))
	for i, p := range prompts {
		ids[i], _ = m.Tokenize(p)
		want[i] = reference(t, ids[i], 24)
	}
	got := make([][]int, len(prompts))
	errs := make([]error, len(prompts))
	var wg sync.WaitGroup
	for i := range prompts {
		wg.Go(func() {
			var c collected
			_, errs[i] = m.Generate(context.Background(), server.GenRequest{Prompt: ids[i], MaxTokens: 24, Options: greedy}, c.emit)
			got[i] = c.ids
		})
	}
	wg.Wait()
	for i := range prompts {
		if errs[i] != nil || !slices.Equal(got[i], want[i]) {
			t.Errorf("%q: %v, ids %v, want %v", prompts[i], errs[i], got[i], want[i])
		}
	}
}

// The server's listing of a model is its engine description's facts, field by field, before and
// after loading: /api/tags, /api/show and /v1/models say what `dflash run` would open.
func TestInfoIsTheDescription(t *testing.T) {
	bin := shareddata.Path(t, storiesRel)
	qwen := testmodel.Qwen3(t, "")
	draft := randomDraft(t, bin)
	specs := []backend.Spec{{Name: "stories", Path: bin, Draft: draft}, {Name: "qwen", Path: qwen}}
	// A cap below both models' 512 positions: the listing shows the cap, the loaded capacity, and
	// the model's own 512 beside it.
	const ctxCap = 256
	b, err := backend.New(backend.Options{Models: specs, Context: ctxCap, Parallel: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range specs {
		o := engine.Options{Model: s.Path}
		if s.Draft != "" {
			o.Drafts = []string{s.Draft}
		}
		d, err := engine.Describe(o)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := os.Stat(s.Path)
		want := server.ModelInfo{Name: s.Name + ":latest", Family: d.Family, ParameterSize: engine.ParameterSize(d.Parameters),
			Quantization: d.DType, Format: d.Format, Size: d.Size, ModifiedAt: st.ModTime().UTC(),
			ContextLength: min(d.Context, ctxCap), ModelContext: d.Context, Template: d.Template.String(), Parallel: 3}
		if want.Digest, err = d.Digest(); err != nil {
			t.Fatal(err)
		}
		if s.Draft != "" {
			want.Draft = filepath.Base(s.Draft)
		}
		if got := b.Models()[i]; got != want {
			t.Errorf("%s listing\n got %+v\nwant %+v", s.Name, got, want)
		}
		m, err := b.Load(context.Background(), want.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Info(); got != want {
			t.Errorf("%s loaded\n got %+v\nwant %+v", s.Name, got, want)
		}
		if m.ContextLength() != want.ContextLength {
			t.Errorf("%s: context %d, listed %d", s.Name, m.ContextLength(), want.ContextLength)
		}
		m.Close()
	}
	// The Qwen3 folder shows its own template's source, as /api/show should.
	if tmpl := b.Models()[1].Template; !strings.Contains(tmpl, "<|im_start|>") {
		t.Errorf("Qwen3 template listed as %q, want its source", tmpl)
	}
}

// A request's stop strings end the generation in the backend, where the end-of-sequence ids
// already are (one stop matcher in the runner): the text stops just before the first
// occurrence, with and without a draft, and the reason is "stop".
func TestGenerateStopString(t *testing.T) {
	for _, name := range []string{"plain", "dflash"} {
		t.Run(name, func(t *testing.T) {
			m := loadStories(t, name == "dflash")
			prompt, err := m.Tokenize("Once upon a time")
			if err != nil {
				t.Fatal(err)
			}
			full, _ := generate(t, m, prompt, 60)
			text := full.text.String()
			words := strings.Fields(text)
			if len(words) < 4 {
				t.Fatalf("output too short: %q", text)
			}
			stop := " " + words[2] + " " + words[3]
			want := text[:strings.Index(text, stop)]
			var c collected
			res, err := m.Generate(context.Background(), server.GenRequest{Prompt: prompt, MaxTokens: 60, Options: greedy, Stop: []string{stop}}, c.emit)
			if err != nil {
				t.Fatal(err)
			}
			if c.text.String() != want || res.DoneReason != "stop" || res.EvalTokens >= len(full.ids) {
				t.Fatalf("got %q (%s, %d tokens), want %q then stop", c.text.String(), res.DoneReason, res.EvalTokens, want)
			}
		})
	}
}

// Two conversations that alternate on a model of two sequences each keep their own rows: the
// second turn of each reuses its first turn's prompt, whatever ran in between.
func TestInterleavedConversationsKeepTheirRows(t *testing.T) {
	bin := shareddata.Path(t, storiesRel)
	b, err := backend.New(backend.Options{Models: []backend.Spec{{Name: "s", Path: bin}}, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	lm, err := b.Load(context.Background(), "s:latest")
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	m := lm.(*backend.Model)
	turn1 := []string{"Once upon a time, there was a little girl", "Tom and his dog went to the big park"}
	var first [][]int
	for _, p := range turn1 {
		ids, _ := m.Tokenize(p)
		c, _ := generate(t, m, ids, 8)
		first = append(first, append(ids, c.ids[:len(c.ids)-1]...))
	}
	for i, f := range first {
		// The next turn: the first turn's prompt and answer (as the cache holds them), then more.
		next := append(slices.Clone(f), f[1:5]...)
		generate(t, m, next, 4)
		if reused := m.LastStats().Reused; reused != len(f) {
			t.Errorf("conversation %d: second turn reused %d rows, want its first turn's %d", i, reused, len(f))
		}
	}
}
