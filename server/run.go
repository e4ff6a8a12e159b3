package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dflash/dflash/server/reply"
)

// outcome is a finished generation, API-neutral.
type outcome struct {
	Model        string // resolved model name
	Res          GenResult
	LoadDuration time.Duration
	Total        time.Duration
	DoneReason   string // "stop", "length", "load" or "unload"
	Context      []int  // prompt ids then generated ids: ollama's "context"
	Calls        int    // tool calls parsed from the output
	// Logprobs holds every generated token's log probability when the job asked
	// (job.Opts.Logprobs); TailLogprobs those of tokens whose text was never passed to emit
	// (held back, then cut by a stop string), for the stream's last message.
	Logprobs     []tokenLogprob
	TailLogprobs []tokenLogprob
}

// leaseModel is what a generation and an embedding of mi's model do before they run: a context
// that ends when the request's does or when shutdown runs out of patience, a place in the
// model's queue (the request then counts as running), and a lease of the model, loaded if
// need be. end gives them back in the reverse order; on an error nothing is held and end is nil.
func (s *Server) leaseModel(r *http.Request, mi ModelInfo, keep *time.Duration) (ctx context.Context, l *lease, end func(), err error) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.base, cancel)
	unwatch := func() {
		stop()
		cancel()
	}
	release, err := s.sched.of(mi.Name, mi.Parallel).acquire(ctx, s.cfg.QueueTimeout)
	if err != nil {
		unwatch()
		return nil, nil, nil, err
	}
	s.met.running.Inc()
	if l, err = s.mgr.acquire(ctx, mi.Name, keep); err != nil {
		s.met.running.Dec()
		release()
		unwatch()
		return nil, nil, nil, err
	}
	return ctx, l, func() {
		s.mgr.release(l)
		s.met.running.Dec()
		release()
		unwatch()
	}, nil
}

// execute runs j for request r: it waits for a slot, leases the model, builds and checks the
// prompt and generates, passing each part of the reply to emit: text pieces, split into thinking
// and answer and with tool calls parsed out when the request and the model's template call for
// it (package reply; the model applies the stop strings, so no stop string ever reaches emit),
// with the log probabilities, when asked, of the tokens generated since the last part (all on
// the first part a token's text released). An error returned before emit was first called can
// still become an HTTP status.
func (s *Server) execute(r *http.Request, j *job, emit func(p reply.Part, lps []tokenLogprob) error) (*outcome, error) {
	start := time.Now()
	ri := info(r)
	ri.model = j.Model
	for _, n := range j.Notes {
		s.log.Info("request note", "path", r.URL.Path, "model", j.Model, "note", n)
	}
	mi, rerr := servable(s.b, j.Model)
	if rerr != nil {
		return nil, rerr
	}
	if err := j.withModelDefaults(mi.Name, mi.Options); err != nil {
		return nil, err
	}
	// As ollama, before anything is scheduled or loaded.
	if err := checkCapabilities(j, mi); err != nil {
		return nil, err
	}
	out := &outcome{Model: mi.Name}
	if j.empty() && j.KeepAlive != nil && *j.KeepAlive == 0 {
		s.mgr.unload(mi.Name)
		out.DoneReason, out.Total = "unload", time.Since(start)
		return out, nil
	}

	ctx, l, end, err := s.leaseModel(r, mi, j.KeepAlive)
	if err != nil {
		return nil, err
	}
	defer end()
	out.LoadDuration = l.LoadTook
	m := l.Model
	if j.empty() {
		out.DoneReason, out.Total = "load", time.Since(start)
		return out, nil
	}

	text, param := j.Prompt, "prompt"
	if len(j.Messages) > 0 {
		param = "messages"
		text, err = m.RenderChat(j.Messages, ChatOptions{AddGenerationPrompt: true, Tools: j.Tools, Think: j.Think})
		if err != nil {
			return nil, &RequestError{Status: http.StatusBadRequest, Param: param,
				Msg: fmt.Sprintf("apply chat template of %s: %v", mi.Name, err)}
		}
	}
	ctxLen, ctxName := contextOf(m.ContextLength(), m.Info().ModelContext, j.Opts.NumCtx)
	// A prompt certain to be too long is refused before it is tokenized: a multi-megabyte body
	// would otherwise cost seconds and hundreds of MB only to be refused anyway. One that will be
	// truncated is cut first to a tail that surely holds more than the context, for the same
	// reason; the cut lies at least ctxLen tokens before anything truncation keeps.
	size, cut := len(text), false
	if pb, ok := m.(promptBounder); ok {
		if n := pb.MinPromptTokens(text); n >= ctxLen {
			if !j.Truncate {
				return nil, &RequestError{Status: http.StatusBadRequest, Param: param, Code: "context_length_exceeded",
					Msg: fmt.Sprintf("prompt is at least %d tokens (%d bytes) but %s", n, len(text), ctxName)}
			}
			text = promptTail(pb, text, 2*ctxLen)
			cut = len(text) < size
		}
	}
	ids, err := m.Tokenize(text)
	if err != nil {
		return nil, &RequestError{Status: http.StatusBadRequest, Param: param, Msg: fmt.Sprintf("tokenize %s: %v", param, err)}
	}
	room := truncationRoom(ctxLen, j.Opts.NumPredict)
	if len(ids) >= ctxLen {
		if !j.Truncate || ctxLen-room < 1 {
			return nil, &RequestError{Status: http.StatusBadRequest, Param: param, Code: "context_length_exceeded",
				Msg: fmt.Sprintf("prompt is %d tokens but %s; at least one token must remain to generate", len(ids), ctxName)}
		}
		head, err := m.Tokenize("")
		if err != nil {
			return nil, &RequestError{Status: http.StatusBadRequest, Param: param, Msg: fmt.Sprintf("tokenize the empty prompt: %v", err)}
		}
		long := len(ids)
		ids = truncatePrompt(ids, head, ctxLen-room)
		// ollama logs its truncation as a warning with these numbers (limit, prompt, keep, new);
		// prompt_eval_count then reports the truncated prompt, as ollama's does. With a cut the
		// whole prompt was never tokenized: its count is that of the tail.
		s.log.Warn("truncating input prompt", "path", r.URL.Path, "model", mi.Name, "limit", ctxLen,
			"prompt", long, "prompt_bytes", size, "cut_before_tokenizing", cut, "keep", len(head), "new", len(ids), "room", ctxLen-len(ids))
	}
	maxTokens := ctxLen - len(ids)
	if j.Opts.NumPredict >= 0 && j.Opts.NumPredict < maxTokens {
		maxTokens = j.Opts.NumPredict
	}
	ri.promptTokens = len(ids)
	if maxTokens == 0 {
		out.Res = GenResult{PromptTokens: len(ids), DoneReason: "length"}
		out.DoneReason, out.Total = "length", time.Since(start)
		return out, nil
	}

	out.Context = ids[:len(ids):len(ids)]
	rc := replyConfig(j, capabilitiesOf(mi), text)
	parser := reply.New(rc)
	think := ThinkNone
	if rc.Thinking {
		think = ThinkMay
		if rc.InThinking {
			think = ThinkInside
		}
	}
	shown, pending := 0, 0 // bytes of text generated; index of the first logprob not passed
	emitAll := func(parts []reply.Part) error {
		for _, p := range parts {
			lps := out.Logprobs[pending:]
			pending = len(out.Logprobs)
			if err := emit(p, lps); err != nil {
				return err
			}
		}
		return nil
	}
	history := 0
	if hc, ok := m.(HistoryCheckpointer); ok && len(j.Messages) > 0 && !cut && hc.WantsHistoryCheckpoint() {
		history = historyTokens(m, j.Messages, ChatOptions{Tools: j.Tools, Think: j.Think}, text, ids)
	}
	opts := j.Opts.Sample
	opts.Coupled = s.cfg.Coupling.applies(j.Opts.Seeded)
	res, err := m.Generate(ctx, GenRequest{Prompt: ids, MaxTokens: maxTokens, Options: opts, Seeded: j.Opts.Seeded, Stop: j.Opts.Stop,
		Logprobs: j.Opts.Logprobs, TopLogprobs: j.Opts.TopLogprobs, Checkpoint: history, Format: j.Format, Think: think},
		func(t Token) error {
			if t.ID >= 0 { // -1: a flushed tail of text, no token of its own
				out.Context = append(out.Context, t.ID)
			}
			if j.Opts.Logprobs && t.Logprob != nil {
				out.Logprobs = append(out.Logprobs, tokenLogprob{Logprob: *t.Logprob, Offset: shown})
			}
			if t.Text == "" {
				return nil
			}
			shown += len(t.Text)
			return emitAll(parser.Add(t.Text))
		})
	if res.PromptTokens == 0 {
		res.PromptTokens = len(ids)
	}
	ri.evalTokens = res.EvalTokens
	s.met.observeGeneration(mi.Name, res)
	if err == nil {
		err = emitAll(parser.Flush())
	}
	if err != nil {
		return nil, err
	}
	out.TailLogprobs = out.Logprobs[pending:]
	if res.DoneReason == "" {
		res.DoneReason = "stop"
	}
	out.Calls = parser.Calls()
	if out.Calls == 0 && (j.ToolChoice == choiceRequired || j.ToolChoice == choiceNamed) {
		// Without constrained decoding a call cannot be forced: the text answer goes back as is.
		s.log.Info("tool_choice asked for a call and the model answered in text", "path", r.URL.Path,
			"model", mi.Name, "tool_choice", j.ToolChoice, "function", j.ToolChoiceName)
	}
	out.Res, out.DoneReason, out.Total = res, res.DoneReason, time.Since(start)
	return out, nil
}

// contextOf is the context a generation may use and how an error names it: num_ctx when the
// request asks for less than the model is served with, else the served context, which says so
// when the server's --ctx caps what the model supports.
func contextOf(served, supported, numCtx int) (int, string) {
	switch {
	case numCtx > 0 && numCtx < served:
		return numCtx, fmt.Sprintf("num_ctx is %d tokens", numCtx)
	case supported > served:
		return served, fmt.Sprintf("the context is %d tokens (capped by --ctx; the model supports %d)", served, supported)
	}
	return served, fmt.Sprintf("the model's context is %d tokens", served)
}

// truncationRoom is how many positions a truncated prompt leaves free to generate: a quarter of
// the context, or num_predict when the request asks for fewer (at least one). ollama truncates
// to the full context and then shifts it (discarding old rows) as it generates; dflash has no
// context shift, a generation ends when its cache is full, so the answer gets only what
// truncation leaves, and a prompt cut to the full context would answer one token. A quarter
// leaves room for a useful answer and keeps three quarters of the context for the prompt's
// newest text.
func truncationRoom(ctxLen, numPredict int) int {
	room := max(1, ctxLen/4)
	if numPredict > 0 && numPredict < room {
		room = numPredict
	}
	return room
}

// truncatePrompt keeps keep tokens of a prompt: the ones every prompt of the model starts with
// (head, the tokenization of the empty prompt: its BOS when it adds one) and the newest. This is
// ollama's choice, the tail, which holds the latest turn and the template's generation prompt.
// ollama's runner keeps the first num_keep tokens (default 4) before the tail; dflash keeps only
// the BOS, which the model was trained to see at position 0, since the tokens after it are the
// head of text that is being cut anyway. (ollama's /api/chat also first drops whole old messages,
// keeping system ones; dflash truncates tokens only.) At least one tail token is kept: the last
// prompt token is the first round's current token.
func truncatePrompt(ids, head []int, keep int) []int {
	if len(head) > len(ids) || !slices.Equal(ids[:len(head)], head) || keep-len(head) < 1 {
		head = nil
	}
	out := append([]int(nil), head...)
	return append(out, ids[len(ids)-(keep-len(head)):]...)
}

// promptTail is the shortest suffix of text, starting at a UTF-8 character, that the cheap bound
// proves holds at least want tokens, or text itself. Tokenizing it in place of the whole text
// bounds the tokenizer's work by the context rather than the body; the tokens near the cut may
// differ from the whole text's, but truncation keeps only tokens far past it.
func promptTail(pb promptBounder, text string, want int) string {
	for l := min(len(text), 16*want); ; l = min(len(text), 2*l) {
		start := len(text) - l
		for start > 0 && !utf8.RuneStart(text[start]) {
			start--
		}
		if start == 0 || pb.MinPromptTokens(text[start:]) >= want {
			return text[start:]
		}
	}
}

// promptBounder is a Model that can bound a prompt's token count from below without tokenizing
// it (BOS included), cheaply enough to run before Tokenize on every request.
type promptBounder interface {
	MinPromptTokens(text string) int
}

// classify turns an execution error into a client-facing error with a status.
func (s *Server) classify(r *http.Request, err error) *RequestError {
	var re *RequestError
	switch {
	case errors.As(err, &re):
		return re
	case errors.Is(err, ErrModelNotFound):
		return &RequestError{Status: http.StatusNotFound, Param: "model", Code: "model_not_found", Msg: err.Error()}
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrQueueTimeout), errors.Is(err, ErrShuttingDown):
		return &RequestError{Status: http.StatusServiceUnavailable, Code: "server_busy", Msg: err.Error()}
	case info(r).cut:
		// Checked before the context: net/http cancels it on the failed write too.
		return &RequestError{Status: http.StatusRequestTimeout, Msg: cutMessage(s.cfg.WriteTimeout)}
	case r.Context().Err() != nil:
		// The client left; nobody reads this, but the log and metrics do (nginx's 499).
		return &RequestError{Status: 499, Msg: "client closed request"}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &RequestError{Status: http.StatusServiceUnavailable, Code: "server_busy", Msg: "generation cancelled: server is shutting down"}
	}
	return &RequestError{Status: http.StatusInternalServerError, Msg: redactPaths(err.Error())}
}

// prepareError records err for the log and sets Retry-After on busy answers.
func (s *Server) prepareError(w http.ResponseWriter, r *http.Request, err error) *RequestError {
	re := s.classify(r, err)
	info(r).err = re.Msg
	if re.Status == http.StatusInternalServerError {
		// The client sees the message without file paths; the log keeps the whole error.
		info(r).err = err.Error()
	}
	if re.Status == http.StatusServiceUnavailable || re.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(s.cfg.RetryAfter.Seconds()))))
	}
	return re
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// parseBody reads r's body and parses it with parse. On failure it records the message for the
// access log, writes the error in the API's own framing with writeErr and reports false; the
// caller then has nothing left to do.
func parseBody[J any](w http.ResponseWriter, r *http.Request, parse func([]byte) (J, *RequestError),
	writeErr func(http.ResponseWriter, *RequestError)) (J, bool) {
	body, rerr := readBody(r)
	var j J
	if rerr == nil {
		j, rerr = parse(body)
	}
	if rerr != nil {
		info(r).err = rerr.Msg
		writeErr(w, rerr)
		var zero J
		return zero, false
	}
	return j, true
}

// readBody reads a request body under the size limit set by the middleware.
func readBody(r *http.Request) ([]byte, *RequestError) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &RequestError{Status: http.StatusRequestEntityTooLarge,
				Msg: fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}
		}
		return nil, &RequestError{Status: http.StatusBadRequest, Msg: fmt.Sprintf("read request body: %v", err)}
	}
	return body, nil
}

// historyTokens is how many of ids (text, the chat rendered with its generation prompt,
// tokenized) are msgs rendered without it, when that rendering prefixes both; else 0.
func historyTokens(m Model, msgs []ChatMessage, opts ChatOptions, text string, ids []int) int {
	h, err := m.RenderChat(msgs, opts) // the prompt's own tools and thinking, without its generation prompt
	if err != nil || !strings.HasPrefix(text, h) {
		return 0
	}
	hid, err := m.Tokenize(h)
	if err != nil || len(hid) >= len(ids) || !slices.Equal(hid, ids[:len(hid)]) {
		return 0
	}
	return len(hid)
}

// servable is the listing of the model a request names, or why it cannot be served: not found
// (404), or broken at startup (500). It refuses before the scheduler and the manager: loading a
// broken model could only fail, and would first unload an idle model to make room.
func servable(b Backend, name string) (ModelInfo, *RequestError) {
	mi, ok := lookup(b, name)
	if !ok {
		return mi, &RequestError{Status: http.StatusNotFound, Param: "model", Code: "model_not_found",
			Msg: fmt.Sprintf("model %q not found", name)}
	}
	if mi.Error != "" {
		return mi, &RequestError{Status: http.StatusInternalServerError, Param: "model", Code: "model_unavailable",
			Msg: fmt.Sprintf("model %q is unavailable: %s", mi.Name, unavailableMsg(mi))}
	}
	return mi, nil
}
