package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/dflash/dflash/engine"
	"github.com/dflash/dflash/internal/testmodel"
	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/model/dflash"
	"github.com/dflash/dflash/model/qwen35"
	"github.com/dflash/dflash/model/transformer"
)

// greedyQwen35 decodes n tokens after prompt plainly on qwen35's own load of dir, one forward
// per token: what `dflash run` must print for the folder.
func greedyQwen35(t *testing.T, dir string, prompt []int, n int) []int {
	t.Helper()
	m, err := qwen35.LoadHF(dir, transformer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := m.NewCache(len(prompt) + n)
	feed, out := prompt, []int(nil)
	for range n {
		r, err := m.Forward(c, model.Request{Tokens: feed, Logits: model.LogitsLast})
		if err != nil {
			t.Fatal(err)
		}
		best := 0
		for i, v := range r.Logits {
			if v > r.Logits[best] {
				best = i
			}
		}
		out = append(out, best)
		feed = []int{best}
	}
	return out
}

// Plain greedy `dflash run` on a random Qwen3.5 folder, in either layout, prints exactly the
// tokens qwen35's own forward decodes; the published layout, which has a vision tower, says once
// that it is served text only.
func TestRunQwen35EqualsItsOwnForward(t *testing.T) {
	for _, conditional := range []bool{false, true} {
		dir := testmodel.Qwen35(t, testmodel.Qwen35Folder{Conditional: conditional})
		want := joinIDs(greedyQwen35(t, dir, []int{5, 17, 3}, 20))
		code, out, errs := runCLI(t, "", "run", "--model", dir, "--prompt-ids", "5,17,3", "-n", "20", "--print-ids", "--temp", "0")
		if code != 0 {
			t.Fatalf("conditional=%v: exit %d: %s", conditional, code, errs)
		}
		if got := strings.TrimSpace(out); got != want {
			t.Errorf("conditional=%v: ids\n got %s\nwant %s", conditional, got, want)
		}
		notices := strings.Count(errs, engine.TextOnlyNotice)
		if wantN := map[bool]int{false: 0, true: 1}[conditional]; notices != wantN {
			t.Errorf("conditional=%v: %d text-only notices in %q, want %d", conditional, notices, errs, wantN)
		}
	}
}

// `dflash run --draft` on a hybrid target speculates through the snapshot verify path: with a
// DFlash draft folder that fits and with the oracle, greedy output is the plain output.
func TestRunQwen35Draft(t *testing.T) {
	dir := testmodel.Qwen35(t, testmodel.Qwen35Folder{})
	d, err := engine.Describe(engine.Options{Model: dir})
	if err != nil {
		t.Fatal(err)
	}
	draft := filepath.Join(t.TempDir(), "draft")
	if err := dflash.WriteRandom(draft, dflash.ConfigFor(d.Config, 1, 8), 3, kernel.F32); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "--model", dir, "--prompt-ids", "5,17,3", "-n", "16", "--print-ids"}
	code, want, errs := runCLI(t, "", args...)
	if code != 0 || strings.TrimSpace(want) == "" {
		t.Fatalf("plain run: exit %d, stdout %q, stderr %q", code, want, errs)
	}
	for _, dr := range []string{draft, "oracle"} {
		code, out, errs := runCLI(t, "", append(args, "--draft", dr)...)
		if code != 0 || out != want {
			t.Errorf("--draft %s: exit %d, stdout %q, stderr %q; want exit 0 and %q", dr, code, out, errs, want)
		}
	}
}

// `dflash serve` logs the text-only notice of a model with a vision tower once, at startup, and
// starts with a draft configured for a hybrid target.
func TestServeQwen35(t *testing.T) {
	dir := testmodel.Qwen35(t, testmodel.Qwen35Folder{Conditional: true, Tokenizer: true})
	_, stop := startServe(t, "--model", dir, "--name", "q35", "--log", "json")
	exit, logs := stop()
	if exit != 0 {
		t.Fatalf("serve exited with %d: %s", exit, logs)
	}
	if n := strings.Count(logs, engine.TextOnlyNotice); n != 1 {
		t.Errorf("%d text-only notices in the logs, want 1: %s", n, logs)
	}
	d, err := engine.Describe(engine.Options{Model: dir})
	if err != nil {
		t.Fatal(err)
	}
	cfg := dflash.ConfigFor(d.Config, 1, 8)
	cfg.MaskID = 248070
	draft := filepath.Join(t.TempDir(), "draft")
	if err := dflash.WriteRandom(draft, cfg, 3, kernel.F32); err != nil {
		t.Fatal(err)
	}
	_, stop = startServe(t, "--model", dir, "--name", "q35", "--draft", draft)
	if exit, logs := stop(); exit != 0 {
		t.Errorf("serve with a draft on a hybrid target exited with %d: %s", exit, logs)
	}
}

// --chat on a hybrid target with a Qwen3.5-style template (tokenizer/chat/testdata's, which
// renders an earlier reply without the think block its generation prompt opened): the second
// turn's prompt diverges from the first's a few tokens before its end, past the checkpoint at
// that end, so it reuses the rows up to where the first conversation ended (the checkpoint the
// chat loop asks for there), not nothing.
func TestChatOnHybridReusesTheHistory(t *testing.T) {
	src, err := os.ReadFile("../../tokenizer/chat/testdata/qwen35-like.jinja")
	if err != nil {
		t.Fatal(err)
	}
	dir := testmodel.Qwen35(t, testmodel.Qwen35Folder{Tokenizer: true, ChatTemplate: string(src)})
	code, _, errs := runCLI(t, "hello there\nand again\n", "run", "--model", dir, "--chat", "--system", "Be brief.", "-n", "5", "--stats")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	m := regexp.MustCompile(`prompt: (\d+) tokens \((\d+) reused\)`).FindAllStringSubmatch(errs, -1)
	if len(m) < 2 {
		t.Fatalf("no per-turn statistics in %q", errs)
	}
	e, err := engine.Open(engine.Options{Model: dir})
	if err != nil {
		t.Fatal(err)
	}
	history, err := e.EncodePrompt("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello there<|im_end|>\n")
	if err != nil {
		t.Fatal(err)
	}
	if first, second := m[0][2], m[1][2]; first != "0" || second != strconv.Itoa(len(history)) {
		t.Errorf("reused rows: first turn %s (want 0), second %s (want the %d of the first conversation)", first, second, len(history))
	}
}

// The server does for a chat what --chat does: on a hybrid target it asks for a checkpoint where
// the conversation ends, so the second /api/chat turn (the reply rendered without its think
// block) reuses the first conversation's tokens, as dflash_prompt_reused_tokens_total counts.
func TestServeChatOnHybridReusesTheHistory(t *testing.T) {
	src, err := os.ReadFile("../../tokenizer/chat/testdata/qwen35-like.jinja")
	if err != nil {
		t.Fatal(err)
	}
	dir := testmodel.Qwen35(t, testmodel.Qwen35Folder{Tokenizer: true, ChatTemplate: string(src)})
	url, stop := startServe(t, "--model", dir, "--name", "q35")
	defer stop()
	msgs := `{"role":"system","content":"Be brief."},{"role":"user","content":"hello there"}`
	chat := func(msgs string) string {
		code, body := postJSON(t, url+"/api/chat", `{"model":"q35","stream":false,"options":{"num_predict":5,"temperature":0},"messages":[`+msgs+`]}`)
		var r struct {
			Message struct{ Content string } `json:"message"`
		}
		if err := json.Unmarshal(body, &r); err != nil || code != 200 {
			t.Fatalf("chat: %d %s", code, body)
		}
		return r.Message.Content
	}
	reply, err := json.Marshal(chat(msgs))
	if err != nil {
		t.Fatal(err)
	}
	chat(msgs + `,{"role":"assistant","content":` + string(reply) + `},{"role":"user","content":"and again"}`)
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	metrics, _ := io.ReadAll(resp.Body)
	e, err := engine.Open(engine.Options{Model: dir})
	if err != nil {
		t.Fatal(err)
	}
	history, err := e.EncodePrompt("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello there<|im_end|>\n")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`dflash_prompt_reused_tokens_total{model="q35:latest"} %d`, len(history))
	if !strings.Contains(string(metrics), want) {
		m := regexp.MustCompile(`dflash_prompt_reused_tokens_total\{.*`).FindString(string(metrics))
		t.Errorf("metrics say %q, want %q", m, want)
	}
}

// dflash bench on a hybrid target reports the recurrent memory a sequence holds, measured on its
// cache: one state, 15 snapshot slots of it (depth 15), and the default checkpoints. The
// folder's linear layers: 3 of (conv 3 x C + state Hv x dk x dv) floats, C = 2*2*8 + 4*6 = 56.
func TestBenchQwen35RecurrentMemory(t *testing.T) {
	dir := testmodel.Qwen35(t, testmodel.Qwen35Folder{})
	code, out, errs := runCLI(t, "", "bench", "--model", dir, "-n", "4", "--prefill", "8", "--reps", "1", "--probe=false", "--verify", "", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r benchReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("no JSON: %v\n%s", err, out)
	}
	const state = 4 * 3 * (3*56 + 4*8*6)
	m := r.Recurrent
	if m == nil || m.StateBytes != state || m.Depth != 15 || m.SnapshotBytes != 15*state || m.Checkpoints != 4 || m.CheckpointBytes != 4*state {
		t.Errorf("recurrent memory %+v, want a state of %d bytes, 15 slots and 4 checkpoints of it", m, state)
	}
}
