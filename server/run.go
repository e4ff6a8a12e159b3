package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// outcome is a finished generation, API-neutral.
type outcome struct {
	Model        string // resolved model name
	Res          GenResult
	LoadDuration time.Duration
	Total        time.Duration
	DoneReason   string // "stop", "length", "load" or "unload"
}

// execute runs j for request r: it waits for a slot, leases the model, builds and checks the
// prompt and generates, passing each piece of text to piece (the model applies the stop
// strings, so no stop string ever reaches piece). An error returned before piece was first
// called can still become an HTTP status.
func (s *Server) execute(r *http.Request, j *job, piece func(string) error) (*outcome, error) {
	start := time.Now()
	ri := info(r)
	ri.model = j.Model
	for _, n := range j.Notes {
		s.log.Info("request note", "path", r.URL.Path, "model", j.Model, "note", n)
	}
	mi, ok := lookup(s.b, j.Model)
	if !ok {
		return nil, &RequestError{Status: http.StatusNotFound, Param: "model", Code: "model_not_found",
			Msg: fmt.Sprintf("model %q not found", j.Model)}
	}
	out := &outcome{Model: mi.Name}
	if j.empty() && j.KeepAlive != nil && *j.KeepAlive == 0 {
		s.mgr.unload(mi.Name)
		out.DoneReason, out.Total = "unload", time.Since(start)
		return out, nil
	}

	// A generation ends when its client goes or when shutdown runs out of patience.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.base, cancel)
	defer stop()

	release, err := s.sched.acquire(ctx, s.cfg.QueueTimeout)
	if err != nil {
		return nil, err
	}
	defer release()
	s.met.running.Inc()
	defer s.met.running.Dec()

	l, err := s.mgr.acquire(ctx, mi.Name, j.KeepAlive)
	if err != nil {
		return nil, err
	}
	defer s.mgr.release(l)
	out.LoadDuration = l.LoadTook
	m := l.Model
	if j.empty() {
		out.DoneReason, out.Total = "load", time.Since(start)
		return out, nil
	}

	text, param := j.Prompt, "prompt"
	if len(j.Messages) > 0 {
		param = "messages"
		text, err = m.RenderChat(j.Messages, ChatOptions{AddGenerationPrompt: true})
		if err != nil {
			return nil, &RequestError{Status: http.StatusBadRequest, Param: param,
				Msg: fmt.Sprintf("apply chat template of %s: %v", mi.Name, err)}
		}
	}
	ctxLen, ctxName := m.ContextLength(), "the model's context length"
	if j.Opts.NumCtx > 0 && j.Opts.NumCtx < ctxLen {
		ctxLen, ctxName = j.Opts.NumCtx, "num_ctx"
	}
	// A prompt certain to be too long is refused before it is tokenized: a multi-megabyte body
	// would otherwise cost seconds and hundreds of MB only to be refused anyway.
	if pb, ok := m.(promptBounder); ok {
		if n := pb.MinPromptTokens(text); n >= ctxLen {
			return nil, &RequestError{Status: http.StatusBadRequest, Param: param, Code: "context_length_exceeded",
				Msg: fmt.Sprintf("prompt is at least %d tokens (%d bytes) but %s is %d tokens", n, len(text), ctxName, ctxLen)}
		}
	}
	ids, err := m.Tokenize(text)
	if err != nil {
		return nil, &RequestError{Status: http.StatusBadRequest, Param: param, Msg: fmt.Sprintf("tokenize %s: %v", param, err)}
	}
	if len(ids) >= ctxLen {
		return nil, &RequestError{Status: http.StatusBadRequest, Param: param, Code: "context_length_exceeded",
			Msg: fmt.Sprintf("prompt is %d tokens but %s is %d tokens (at least one must remain to generate)", len(ids), ctxName, ctxLen)}
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

	res, err := m.Generate(ctx, GenRequest{Prompt: ids, MaxTokens: maxTokens, Options: j.Opts.Sample, Seeded: j.Opts.Seeded, Stop: j.Opts.Stop},
		func(t Token) error {
			if t.Text == "" {
				return nil
			}
			return piece(t.Text)
		})
	if res.PromptTokens == 0 {
		res.PromptTokens = len(ids)
	}
	ri.evalTokens = res.EvalTokens
	s.met.observeGeneration(mi.Name, res)
	if err != nil {
		return nil, err
	}
	if res.DoneReason == "" {
		res.DoneReason = "stop"
	}
	out.Res, out.DoneReason, out.Total = res, res.DoneReason, time.Since(start)
	return out, nil
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
