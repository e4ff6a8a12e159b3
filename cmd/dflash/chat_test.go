package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/dflash/dflash/internal/testmodel"
)

// --chat reads one user turn per line and keeps the target's cache between turns: the second
// turn's prompt (the whole rendered conversation) shares the first turn's rows up to the reply,
// so they are reused, not read again.
func TestChatKeepsCacheBetweenTurns(t *testing.T) {
	dir := testmodel.Qwen3(t, "")
	code, out, errs := runCLI(t, "hello there\nand again\n", "run", "--model", dir, "--chat", "--system", "Be brief.", "-n", "6", "--stats", "--think", "off")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if got := strings.Count(out, "\n"); got != 2 {
		t.Errorf("want two replies, one line each; got %d lines: %q", got, out)
	}
	re := regexp.MustCompile(`prompt: (\d+) tokens \((\d+) reused\)`)
	m := re.FindAllStringSubmatch(errs, -1)
	if len(m) < 2 {
		t.Fatalf("no per-turn statistics in %q", errs)
	}
	first, _ := strconv.Atoi(m[0][2])
	second, _ := strconv.Atoi(m[1][2])
	if first != 0 || second < 10 {
		t.Errorf("reused rows: first turn %d (want 0), second turn %d (want the system and first user turn, >= 10)", first, second)
	}
}

func TestChatNeedsTemplateOrChatML(t *testing.T) {
	code, _, errs := runCLI(t, "hi\n", "run", "--model", storiesPath(t), "--chat")
	if code != 1 || !strings.Contains(errs, "no chat template") {
		t.Errorf("exit %d, %q; want a clear error: stories260K has no chat template", code, errs)
	}
}

// The chat loop answers /help, /clear and /bye itself, as ollama run does: /clear drops the
// conversation and the cache, so the same first turn again has the first turn's prompt with
// nothing reused; /bye leaves, so the line after it is never answered; a mistyped command is
// named, with the nearest one, and not sent to the model.
func TestChatCommands(t *testing.T) {
	dir := testmodel.Qwen3(t, "")
	in := "/help\nhello there\n/clera\n/clear\nhello there\n/bye\nnever answered\n"
	code, out, errs := runCLI(t, in, "run", "--model", dir, "--chat", "--system", "Be brief.", "-n", "4", "--stats", "--think", "off")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"Type /bye or press Ctrl-D to leave", "/clear      forget the conversation", `Unknown command "/clera". Did you mean /clear?`, "Cleared the conversation"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	if got := strings.Count(out, "\n"); got != 2 {
		t.Errorf("want two replies (the turns before and after /clear); got %d lines: %q", got, out)
	}
	m := regexp.MustCompile(`prompt: (\d+) tokens \((\d+) reused\)`).FindAllStringSubmatch(errs, -1)
	if len(m) != 3 { // two turns, then the summary /bye prints
		t.Fatalf("want two per-turn statistics and a summary, got %v in %q", m, errs)
	}
	if m[0][1] != m[1][1] || m[1][2] != "0" {
		t.Errorf("after /clear the turn was %s tokens with %s reused; want the first turn's %s tokens, none reused", m[1][1], m[1][2], m[0][1])
	}
}
