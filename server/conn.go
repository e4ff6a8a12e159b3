package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// statusWriter records the status and whether anything was written, and gives every write its
// own deadline. A generation emits a token only after the previous one was written, so a client
// that stops reading would otherwise hold its generation slot (and every request queued behind
// it) for as long as it keeps the connection open; with the deadline, a write that cannot hand
// its bytes to the kernel within writeTimeout fails, the generation ends at that token and its
// slot is freed. The deadline is renewed per write, not per response: a slow stream that keeps
// being read is never cut.
type statusWriter struct {
	http.ResponseWriter
	rc           *http.ResponseController
	writeTimeout time.Duration // <= 0: no deadline
	ri           *reqInfo
	status       int
	wrote        bool
}

func newStatusWriter(w http.ResponseWriter, ri *reqInfo, writeTimeout time.Duration) *statusWriter {
	sw := &statusWriter{ResponseWriter: w, rc: http.NewResponseController(w), writeTimeout: writeTimeout,
		ri: ri, status: http.StatusOK}
	// A keep-alive connection still carries the previous response's deadline; this response's
	// own writes set theirs.
	_ = sw.rc.SetWriteDeadline(time.Time{})
	return sw
}

func (w *statusWriter) extend() {
	if w.writeTimeout > 0 {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.writeTimeout))
	}
}

// note records a write that failed on its deadline: the server, not the client, ended it.
func (w *statusWriter) note(err error) {
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		w.ri.cut = true
	}
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	w.extend()
	n, err := w.ResponseWriter.Write(p)
	w.note(err)
	return n, err
}

// FlushError is what http.ResponseController.Flush calls; unlike Flush it reports the failed
// write, so a stream learns at once that its client was cut.
func (w *statusWriter) FlushError() error {
	w.extend()
	err := w.rc.Flush()
	w.note(err)
	return err
}

func (w *statusWriter) Flush() { _ = w.FlushError() }

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// cutMessage is what the log says of a stream the server cut.
func cutMessage(d time.Duration) string {
	return fmt.Sprintf("client cut by the server: it did not take its response within the write timeout (%v)", d)
}

// deadlineBody bounds the time to receive a request body. The read deadline is the
// connection's, so it must be lifted as soon as the body is read: net/http then reads the
// connection in the background to notice a client leaving, and a deadline firing there would
// cancel the running generation as if the client had gone. A body left unread keeps its
// deadline, which then also bounds net/http's draining of it after the handler returns.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	lifted  bool
}

func (b *deadlineBody) lift() {
	if !b.lifted {
		b.lifted = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.lift()
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The deadline stays: net/http drains what is left of the body before answering.
		err = fmt.Errorf("request body not received within the read timeout (%v): %w", b.timeout, err)
	}
	return n, err
}
