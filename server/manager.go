package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// ErrModelNotFound is wrapped by errors for model names the backend does not configure.
var ErrModelNotFound = errors.New("model not found")

// manager loads models on first use and unloads them after their keep-alive. Invariants: a
// model is closed only when no lease holds it (refs == 0); at most one Load of a name is in
// flight; the most recent request's keep-alive decides when an idle model expires (as ollama).
type manager struct {
	b         Backend
	base      context.Context // cancelled at shutdown; loads use it so one client's cancel can't fail others
	log       *slog.Logger
	keepAlive time.Duration // default for requests that give none
	maxLoaded int           // idle models beyond this are unloaded before a new load; 0: no limit
	onLoad    func(name string, d time.Duration, err error)
	// onModel, when set, is called with every model loaded, before any request uses it.
	onModel func(name string, m Model)

	mu     sync.Mutex
	models map[string]*entry
	closed bool
}

type entry struct {
	name     string
	model    Model         // nil while loading
	loading  chan struct{} // closed when the load finished (model or err set)
	err      error
	loadTook time.Duration
	refs     int
	keep     time.Duration // keep-alive applied at the next release; < 0 forever
	expires  time.Time     // zero while in use or kept forever
	gen      int           // bumped on every use so stale expiry timers do nothing
	timer    *time.Timer
}

// lease is one request's hold on a loaded model.
type lease struct {
	Model    Model
	LoadTook time.Duration // time this request spent waiting for the load (0 if already loaded)
	e        *entry
}

func newManager(base context.Context, b Backend, log *slog.Logger, keepAlive time.Duration, maxLoaded int,
	onLoad func(string, time.Duration, error)) *manager {
	return &manager{b: b, base: base, log: log, keepAlive: keepAlive, maxLoaded: maxLoaded, onLoad: onLoad,
		models: map[string]*entry{}}
}

// lookup finds a configured model by name. A name without a tag also matches "name:latest",
// as in ollama.
func lookup(b Backend, name string) (ModelInfo, bool) {
	models := b.Models()
	for _, m := range models {
		if m.Name == name {
			return m, true
		}
	}
	for _, m := range models {
		if m.Name == name+":latest" {
			return m, true
		}
	}
	if f, ok := b.(Finder); ok {
		return f.Find(name)
	}
	return ModelInfo{}, false
}

// acquire returns a lease on the named model, loading it if needed. keep is the request's
// keep-alive (nil: the default).
func (m *manager) acquire(ctx context.Context, name string, keep *time.Duration) (*lease, error) {
	info, ok := lookup(m.b, name)
	if !ok {
		return nil, fmt.Errorf("model %q: %w", name, ErrModelNotFound)
	}
	name = info.Name
	ka := m.keepAlive
	if keep != nil {
		ka = *keep
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrShuttingDown
	}
	e, ok := m.models[name]
	var victims []Model
	if !ok {
		e = &entry{name: name, loading: make(chan struct{})}
		m.models[name] = e
		victims = m.evictLocked(name)
		go m.load(e, victims)
	}
	e.refs++
	e.keep = ka
	e.gen++
	e.expires = time.Time{}
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	m.mu.Unlock()

	start := time.Now()
	select {
	case <-e.loading:
	case <-ctx.Done():
		m.release(&lease{e: e})
		return nil, ctx.Err()
	}
	if e.err != nil {
		m.release(&lease{e: e})
		return nil, e.err
	}
	l := &lease{Model: e.model, e: e}
	if !ok {
		l.LoadTook = time.Since(start)
	}
	return l, nil
}

// load runs in its own goroutine so a requester giving up does not abandon others waiting on
// the same load.
func (m *manager) load(e *entry, victims []Model) {
	for _, v := range victims {
		if err := v.Close(); err != nil {
			m.log.Warn("unload model", "model", v.Info().Name, "err", err)
		}
	}
	start := time.Now()
	model, err := m.b.Load(m.base, e.name)
	took := time.Since(start)
	if err != nil {
		err = fmt.Errorf("load model %q: %w", e.name, err)
	}
	if m.onLoad != nil {
		m.onLoad(e.name, took, err)
	}
	if err == nil && m.onModel != nil {
		m.onModel(e.name, model)
	}
	m.mu.Lock()
	e.model, e.err, e.loadTook = model, err, took
	var closeNow Model
	if err != nil {
		delete(m.models, e.name)
	} else if e.refs == 0 {
		// Every requester gave up while loading: start the keep-alive as a release would.
		closeNow = m.idleLocked(e)
	}
	close(e.loading)
	m.mu.Unlock()
	if closeNow != nil {
		m.closeModel(closeNow)
	}
	if err == nil {
		m.log.Info("model loaded", "model", e.name, "duration", took)
	} else {
		m.log.Error("model load failed", "model", e.name, "err", err)
	}
}

// evictLocked removes idle loaded models (oldest expiry first) until a new one fits under
// maxLoaded. Models in use are never evicted, so the limit can be exceeded while they run.
func (m *manager) evictLocked(except string) []Model {
	if m.maxLoaded <= 0 || len(m.models) <= m.maxLoaded {
		return nil
	}
	var idle []*entry
	for _, e := range m.models {
		if e.name != except && e.refs == 0 && e.model != nil {
			idle = append(idle, e)
		}
	}
	slices.SortFunc(idle, func(a, b *entry) int { return a.expires.Compare(b.expires) })
	var out []Model
	for _, e := range idle {
		if len(m.models) <= m.maxLoaded {
			break
		}
		out = append(out, m.removeLocked(e))
	}
	return out
}

func (m *manager) removeLocked(e *entry) Model {
	delete(m.models, e.name)
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	return e.model
}

// release ends a lease and starts the model's keep-alive when it became idle.
func (m *manager) release(l *lease) {
	e := l.e
	m.mu.Lock()
	e.refs--
	if e.refs > 0 || e.model == nil || m.models[e.name] != e {
		m.mu.Unlock()
		return
	}
	closeNow := m.idleLocked(e)
	m.mu.Unlock()
	if closeNow != nil {
		m.closeModel(closeNow)
	}
}

// idleLocked starts the keep-alive of a model no lease holds, or removes it (returning it for
// closing outside the lock) when it must go now.
func (m *manager) idleLocked(e *entry) Model {
	switch {
	case m.closed || e.keep == 0:
		return m.removeLocked(e)
	case e.keep < 0:
		e.expires = time.Time{}
	default:
		e.expires = time.Now().Add(e.keep)
		gen := e.gen
		e.timer = time.AfterFunc(e.keep, func() { m.expire(e, gen) })
	}
	return nil
}

func (m *manager) expire(e *entry, gen int) {
	m.mu.Lock()
	if e.gen != gen || e.refs > 0 || m.models[e.name] != e {
		m.mu.Unlock()
		return
	}
	model := m.removeLocked(e)
	m.mu.Unlock()
	m.closeModel(model)
}

func (m *manager) closeModel(model Model) {
	name := model.Info().Name
	if err := model.Close(); err != nil {
		m.log.Warn("unload model", "model", name, "err", err)
		return
	}
	m.log.Info("model unloaded", "model", name)
}

// unload drops the named model now if idle, or when its last lease ends (keep_alive 0).
func (m *manager) unload(name string) {
	if info, ok := lookup(m.b, name); ok {
		name = info.Name
	}
	m.mu.Lock()
	e, ok := m.models[name]
	if !ok || e.model == nil {
		m.mu.Unlock()
		return
	}
	if e.refs > 0 {
		e.keep = 0
		m.mu.Unlock()
		return
	}
	model := m.removeLocked(e)
	m.mu.Unlock()
	m.closeModel(model)
}

// loadedModel is a row of /api/ps.
type loadedModel struct {
	Info    ModelInfo
	Expires time.Time // zero when Forever or when unloading right after use (keep-alive 0)
	Forever bool
	InUse   bool
}

func (m *manager) loaded() []loadedModel {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []loadedModel
	for _, e := range m.models {
		if e.model == nil {
			continue
		}
		lm := loadedModel{Info: e.model.Info(), Expires: e.expires, Forever: e.keep < 0, InUse: e.refs > 0}
		if lm.InUse && e.keep > 0 {
			// In use: it will expire keep after the last lease ends, at the earliest.
			lm.Expires = time.Now().Add(e.keep)
		}
		out = append(out, lm)
	}
	slices.SortFunc(out, func(a, b loadedModel) int {
		if a.Info.Name < b.Info.Name {
			return -1
		}
		if a.Info.Name > b.Info.Name {
			return 1
		}
		return 0
	})
	return out
}

// close unloads every idle model and makes later releases unload at once.
func (m *manager) close() {
	m.mu.Lock()
	m.closed = true
	var idle []Model
	for _, e := range m.models {
		if e.refs == 0 && e.model != nil {
			idle = append(idle, m.removeLocked(e))
		}
	}
	m.mu.Unlock()
	for _, model := range idle {
		m.closeModel(model)
	}
}
