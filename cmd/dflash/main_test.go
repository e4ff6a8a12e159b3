package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/dflash/dflash/internal/shareddata"
	"github.com/dflash/dflash/kernel/kerneltest"
)

// runCLI runs dflash in-process and returns its exit code, stdout and stderr.
func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// run.c's -n N counts positions including BOS and the prompt, and it prints every token after
// BOS, prompt included. A prompt of p ids (BOS included) therefore leaves N-p+1 generated tokens,
// which is our -n.
func TestRunMatchesLlama2cGoldens(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	cases := []struct {
		golden, prompt string
		promptIDs      int // BOS included
		steps          int
	}{
		{"greedy_once_upon_a_time_n128.txt", "Once upon a time", 5, 128},
		{"greedy_lily_ben_park_n128.txt", "Lily and Ben went to the park.", 0, 128},
		{"greedy_noprompt_n256.txt", "", 1, 256},
	}
	kerneltest.ForEachPath(t, func(t *testing.T) {
		for _, c := range cases {
			want, err := os.ReadFile(shareddata.Path(t, "stories260K/golden/"+c.golden))
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"run", "--model", bin}
			n := c.promptIDs
			if c.prompt == "" {
				args = append(args, "--prompt-ids", "1")
			} else {
				args = append(args, "-p", c.prompt)
				if n == 0 {
					// Count the prompt's ids with the tokenizer itself.
					code, ids, errs := runCLI(t, "", "tokenize", "--model", bin, "--bos", c.prompt)
					if code != 0 {
						t.Fatalf("tokenize: %s", errs)
					}
					n = len(strings.Split(strings.TrimSpace(ids), ","))
				}
			}
			args = append(args, "-n", itoa(c.steps-n+1))
			code, out, errs := runCLI(t, "", args...)
			if code != 0 {
				t.Fatalf("%s: exit %d: %s", c.golden, code, errs)
			}
			if out != string(want) {
				t.Errorf("%s: output differs from run.c's\n got: %q\nwant: %q", c.golden, out, want)
			}
		}
	})
}

// The ids printed with --print-ids are the independent numpy reference's greedy ids.
func TestRunPrintIDsMatchesNumpyReference(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	raw, err := os.ReadFile(shareddata.Path(t, "stories260K/golden/numpy_ref_greedy64.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		GreedyIDs []int `json:"greedy_ids"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	// greedy_ids starts with BOS; the rest are generated.
	want := joinIDs(ref.GreedyIDs[1:])
	for _, draft := range []string{"", "oracle"} {
		args := []string{"run", "--model", bin, "--prompt-ids", "1", "-n", itoa(len(ref.GreedyIDs) - 1), "--print-ids"}
		if draft != "" {
			args = append(args, "--draft", draft)
		}
		code, out, errs := runCLI(t, "", args...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		if strings.TrimSpace(out) != want {
			t.Errorf("draft %q: ids\n got %s\nwant %s", draft, strings.TrimSpace(out), want)
		}
		if draft == "oracle" && !strings.Contains(errs, "tau") {
			t.Errorf("speculative run printed no tau: %s", errs)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nonsense"}, 2, "unknown command"},
		{[]string{"run", "--model", bin, "--synthetic", "qwen3-0.6b"}, 2, "exactly one"},
		{[]string{"run", "--model", bin, "--prompt-ids", "1,x"}, 2, `"x" is not an integer`},
		{[]string{"run", "--model", bin, "--prompt-ids", "1,9999"}, 2, "outside the vocabulary"},
		{[]string{"run", "--model", bin, "-p", "hi", "--temp", "-1"}, 2, "temperature"},
		{[]string{"run", "--model", bin, "-p", "hi", "--kernel", "nope"}, 2, "nope"},
		{[]string{"run", "--model", bin + ".missing", "-p", "hi"}, 1, "missing"},
		{[]string{"run", "--model", bin, "-p", "hi", "--draft", "oracle", "--temp", "1"}, 2, "greedy"},
		{[]string{"run", "--model", bin, "-p", strings.Repeat("once upon a time ", 400)}, 1, "does not fit the model's context of 512 tokens"},
		{[]string{"run", "--model", bin, "--ctx", "8", "-p", strings.Repeat("once upon a time ", 4)}, 1, "context of 8 tokens (capped by --ctx; the model supports 512)"},
	}
	for _, c := range cases {
		code, _, errs := runCLI(t, "", c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errs, c.code, c.want)
		}
	}
}

func TestTokenizeRoundTrip(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	code, ids, errs := runCLI(t, "", "tokenize", "--model", bin, "Once upon a time")
	if code != 0 || strings.TrimSpace(ids) != "403,407,261,378" {
		t.Fatalf("tokenize: exit %d, %q %s; want 403,407,261,378 (the reference run's first ids)", code, ids, errs)
	}
	code, text, errs := runCLI(t, "1,403,407,261,378", "tokenize", "--model", bin, "--decode")
	if code != 0 || strings.TrimSpace(text) != "Once upon a time" {
		t.Fatalf("decode: exit %d, %q %s", code, text, errs)
	}
}

func itoa(n int) string { return joinIDs([]int{n}) }

// bench --json reports every figure it promises; with the oracle draft the acceptance length is
// the depth plus one for every full round, so tau must exceed 1 (the figures' speed is not checked:
// a test never asserts a wall time).
func TestBenchJSON(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	code, out, errs := runCLI(t, "", "bench", "--model", bin, "-n", "40", "--prefill", "64", "--reps", "1",
		"--probe=false", "--draft", "oracle", "--depths", "3,6", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var r benchReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("bench --json printed no JSON object: %v\n%s", err, out)
	}
	if r.DecodeTokS <= 0 || r.PrefillTokS <= 0 || r.WeightBytes <= 0 || len(r.VerifyCost) != 4 {
		t.Errorf("missing figures: %+v", r)
	}
	if len(r.Speculation) != 2 || r.Speculation[0].Depth != 3 || r.Speculation[1].Depth != 6 {
		t.Fatalf("speculation rows: %+v", r.Speculation)
	}
	for _, s := range r.Speculation {
		// 40 tokens at depth d: full rounds emit d+1 tokens; only the last round may be cut short.
		if s.Tau < float64(s.Depth+1)*0.7 || s.Tau > float64(s.Depth+1) {
			t.Errorf("depth %d: oracle tau %.2f, want close to %d", s.Depth, s.Tau, s.Depth+1)
		}
	}
}

func storiesPath(t *testing.T) string { return shareddata.Path(t, "stories260K/stories260K.bin") }

func testdataPath(t *testing.T, rel string) string { return shareddata.Path(t, rel) }

// --trace writes one JSON line per round, and the rounds' emitted ids are the printed output.
func TestRunTrace(t *testing.T) {
	bin := shareddata.Path(t, "stories260K/stories260K.bin")
	file := t.TempDir() + "/trace.jsonl"
	code, out, errs := runCLI(t, "", "run", "--model", bin, "-p", "Once upon a time", "-n", "40", "--draft", "oracle", "--depth", "3", "--print-ids", "--trace", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var emitted []string
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	for i, l := range lines {
		var r struct {
			Position, Depth, Accepted int
			Proposed, Emitted         []int
			DraftNS                   int64 `json:"draft_ns"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		if r.Depth > 3 || len(r.Proposed) > r.Depth || r.Accepted > len(r.Proposed) || len(r.Emitted) != r.Accepted+1 {
			t.Fatalf("line %d is inconsistent: %s", i, l)
		}
		for _, id := range r.Emitted {
			emitted = append(emitted, itoa(id))
		}
	}
	if got := strings.Join(emitted, ","); got != strings.TrimSpace(out) {
		t.Fatalf("trace emitted %s, the run printed %s", got, strings.TrimSpace(out))
	}
	if len(lines) >= 40 {
		t.Fatalf("%d rounds for 40 tokens: the oracle at depth 3 should accept several a round", len(lines))
	}
}
